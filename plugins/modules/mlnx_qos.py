#!/usr/bin/python
# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""Run mlnx_qos on the host (the action plugin of the same name holds the logic)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: mlnx_qos
short_description: Declare trust, PFC, DSCP-to-priority entries and cable length of a ConnectX netdev
description:
  - Reads C(mlnx_qos -i INTERFACE), compares it with the declared values on the controller
    (C(fabricops.hostqos.mlnx_qos)) and runs only the C(mlnx_qos) arguments that differ, then reads
    again and fails if the NIC does not hold the declared values.
  - Only declared options are managed; an option left out is not touched. C(dscp2prio) holds the
    listed entries and leaves the other DSCP values as they are.
  - In check mode nothing is run but the read; C(commands) and the diff say what would change.
  - mlnx_qos settings live in the NIC and are lost on reboot or driver restart (openibd); the
    C(fabricops.fabric.roce_host) role installs a boot-time unit that re-applies them.
version_added: 0.1.0
author: fabricops developers (@fabricops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
requirements:
  - C(mlnx_qos) on the host (MLNX_OFED or the mlnx-tools package).
  - The C(fabricops) Python package on the controller.
options:
  interface:
    description: The netdev (for example C(enp170s0f0np0)).
    type: str
    required: true
  current:
    description:
      - The output of C(mlnx_qos -i INTERFACE) read earlier in the run, before anything changed the port,
        as a M(fabricops.fabric.host_read) command result (V(rc), V(stdout)). When it ran and parses, it is
        compared instead of reading the port again, so a port already as declared costs no module run.
        Anything else (a failed or empty read) and the port is read as without it.
      - Not used by the read-back after a change, which always reads the port.
    type: dict
    default: {}
  config:
    description:
      - The port's declared mlnx_qos values (C(roce_plan) C(ports[].mlnx_qos)); a key left out or null is
        not managed. Validated and converted on the controller by the action plugin; left out, the
        task only reads.
    type: dict
    suboptions:
      # Generated from src/fabricops/model/roce_schema.py (python -m fabricops.roce.generate); edit it there.
      # BEGIN fabricops.roce.generate config
      trust:
        description: Priority trust state; dscp for RoCE v2 without VLANs.
        type: str
        choices: [dscp, pcp]
      pfc:
        description: PFC enable per priority, 8 values of 0 or 1.
        type: list
        elements: int
      dscp2prio:
        description: DSCP to priority entries to hold; other DSCP values are untouched.
        type: dict
      cable_len:
        description: Cable length in metres (sizes the PFC headroom buffer).
        type: int
      # END fabricops.roce.generate config
  _commands:
    description:
      - Internal - the C(mlnx_qos) argument groups the action plugin computed and passes to the module.
        A task's value is ignored (the action plugin sets it); do not set it.
    type: list
    elements: list
    default: []
attributes:
  action:
    support: full
    details: The action plugin compares and plans on the controller; the module runs C(mlnx_qos) on the host.
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details:
      - Only the read (C(mlnx_qos -i INTERFACE)) runs; RV(commands), RV(after) and the diff are predicted.
  diff_mode:
    support: full
    details: The managed values before and after, in C(mlnx_qos -i) terms.
  platform:
    platforms: linux
    details: ConnectX netdevs with C(mlnx_qos) (MLNX_OFED or mlnx-tools).
"""

EXAMPLES = r"""
- name: Trust DSCP, PFC on priority 3, DSCP 26 on priority 3, CNP DSCP 48 on priority 6
  fabricops.fabric.mlnx_qos:
    interface: enp170s0f0np0
    config:
      trust: dscp
      pfc: [0, 0, 0, 1, 0, 0, 0, 0]
      dscp2prio: {26: 3, 48: 6}
"""

RETURN = r"""
before:
  description: The managed values before (trust, pfc, dscp2prio as read, cable_len).
  returned: always
  type: dict
after:
  description: The managed values after (read back; predicted in check mode).
  returned: always
  type: dict
commands:
  description: The mlnx_qos command lines run (or, in check mode, that would run).
  returned: always
  type: list
  elements: str
  sample: ["mlnx_qos -i enp170s0f0np0 --trust dscp --pfc 0,0,0,1,0,0,0,0"]
stdout:
  description: The last C(mlnx_qos -i INTERFACE) output.
  returned: always
  type: str
"""

import re
import shutil

from ansible.module_utils.basic import AnsibleModule

ALLOWED = ("--trust", "--pfc", "--dscp2prio", "--cable_len")
# The same allow-list as fabricops.validate.netdev (this module runs on the host, without the package).
NETDEV = re.compile(r"(?!\.\.?\Z)[A-Za-z0-9_.-]{1,15}")
# The config suboptions, generated from fabricops.model.roce_schema (python -m fabricops.roce.generate).
# BEGIN fabricops.roce.generate config_spec
CONFIG_OPTIONS = {
    "trust": {"type": "str", "choices": ["dscp", "pcp"]},
    "pfc": {"type": "list", "elements": "int"},
    "dscp2prio": {"type": "dict"},
    "cable_len": {"type": "int"},
}
# END fabricops.roce.generate config_spec


def main():
    module = AnsibleModule(
        argument_spec={
            "interface": {"type": "str", "required": True},
            "config": {"type": "dict", "options": CONFIG_OPTIONS},
            "_commands": {"type": "list", "elements": "list", "default": []},
            "current": {"type": "dict", "default": {}},  # the action plugin's; not sent here
        },
        supports_check_mode=True,
    )
    exe = shutil.which("mlnx_qos") or module.get_bin_path("mlnx_qos", opt_dirs=["/usr/sbin", "/sbin"])
    if not exe:
        module.fail_json(
            msg="mlnx_qos is not installed on this host: install MLNX_OFED "
            "(role fabricops.fabric.mlnx_ofed) or the mlnx-tools package first"
        )
    iface = module.params["interface"]
    if not NETDEV.fullmatch(iface):
        module.fail_json(msg=f"mlnx_qos: interface {iface!r} is not a network interface name "
                         "(1-15 letters, digits, _.-)")
    ran = []
    groups = module.params["_commands"]
    if groups and module.check_mode:
        module.fail_json(msg="mlnx_qos: refusing to change anything in check mode")
    for group in groups:
        group = [str(a) for a in group]
        if not group or any(a.startswith("-") and a not in ALLOWED for a in group):
            module.fail_json(msg=f"mlnx_qos: unexpected arguments {group}")
        argv = [exe, "-i", iface, *group]
        rc, out, err = module.run_command(argv)
        ran.append(" ".join(["mlnx_qos", "-i", iface, *group]))
        if rc != 0:
            detail = (out or err or "").strip().splitlines()
            module.fail_json(
                msg=f"{iface}: '{ran[-1]}' failed (rc {rc}): {detail[-1] if detail else 'no output'}",
                rc=rc,
                stdout=out,
                stderr=err,
                commands=ran,
            )
    rc, out, err = module.run_command([exe, "-i", iface])
    if rc != 0:
        detail = (out or err or "").strip().splitlines()
        module.fail_json(
            msg=f"{iface}: 'mlnx_qos -i {iface}' failed (rc {rc}): {detail[-1] if detail else 'no output'}",
            rc=rc,
            stdout=out,
            stderr=err,
            commands=ran,
        )
    module.exit_json(changed=bool(ran), stdout=out, stderr=err, commands=ran)


if __name__ == "__main__":
    main()
