#!/usr/bin/python
# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""Read and write RoCE sysfs / rdma_cm knobs on the host (the action plugin holds the logic)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: roce_sysfs
short_description: Declare the RoCE knobs of an HCA port that mlnx_qos does not hold
description:
  - Per port, DCQCN notification and reaction points per priority
    (C(/sys/class/net/NETDEV/ecn/roce_np/enable/PRIO), C(.../roce_rp/enable/PRIO)), the CNP DSCP and
    priority (C(.../ecn/roce_np/cnp_dscp), C(cnp_802p_prio), where the driver has them), the RoCE
    traffic class (C(/sys/class/infiniband/DEVICE/tc/PORT/traffic_class)) and the rdma_cm defaults
    (C(cma_roce_tos), C(cma_roce_mode)).
  - Reads every declared knob, compares on the controller (C(fabricops.hostqos.knobs)), writes only
    the ones that differ, reads back and fails naming the netdev and knob that did not take.
  - In check mode only the reads run; the diff and C(changes) say what would change.
  - This is RoCE's ECN. C(net.ipv4.tcp_ecn) is TCP's and does nothing for RoCE.
version_added: 0.1.0
author: fabricops developers (@fabricops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
requirements:
  - MLNX_OFED's mlx5 driver (the C(ecn) and C(tc) sysfs directories) and C(cma_roce_tos) / C(cma_roce_mode).
  - The C(fabricops) Python package on the controller.
options:
  netdev:
    description: The port's netdev.
    type: str
    required: true
  device:
    description: The RDMA device of the port (C(mlx5_2)).
    type: str
    required: true
  port:
    description: The HCA port number.
    type: int
    default: 1
  current:
    description:
      - The port's knobs read earlier in the run, before anything changed the port, as the results of one
        M(fabricops.fabric.host_read) - V(files) (name C(sysfs PATH)) and V(commands) (name C(sysfs ARGV)),
        what C(roce_plan) names in C(sysfs_reads). When it holds every read this port needs and they
        are readable, they are compared instead of reading the port again, so a port already as declared
        costs no module run. Anything else (a read missing, failed or not parseable) and the port is read
        as without it.
      - Not used by the read-back after a change, which always reads the port.
    type: dict
    default: {}
  config:
    description:
      - The port's declared knob values (C(roce_plan) C(ports[].sysfs)); a key left out or null is not
        managed. Validated and converted on the controller by the action plugin; left out, the task only
        reads.
    type: dict
    suboptions:
      # Generated from src/fabricops/model/roce_schema.py (python -m fabricops.roce.generate); edit it there.
      # BEGIN fabricops.roce.generate config
      ecn_np:
        description: DCQCN notification point per priority, 8 values true, false or null.
        type: list
        elements: raw
      ecn_rp:
        description: DCQCN reaction point per priority, as ecn_np.
        type: list
        elements: raw
      cnp_dscp:
        description: DSCP of the CNPs this port sends (skipped where the driver lacks it).
        type: int
      cnp_priority:
        description: Priority of the CNPs this port sends (same caveat).
        type: int
      traffic_class:
        description: RoCE traffic class (IP ToS, 106 for DSCP 26).
        type: int
      rdma_cm_tos:
        description: rdma_cm default ToS for RoCE connections (cma_roce_tos).
        type: int
      roce_mode:
        description: rdma_cm default RoCE mode, 1 or 2 (cma_roce_mode).
        type: int
        choices: [1, 2]
      # END fabricops.roce.generate config
  _read_files:
    description:
      - Internal - the sysfs files the action plugin asks the module to read. A task's value is ignored
        (the action plugin sets it); do not set it.
    type: list
    elements: str
    default: []
  _read_commands:
    description:
      - Internal - the C(cma_roce_tos) / C(cma_roce_mode) reads, as argument lists. A task's value is
        ignored (the action plugin sets it); do not set it.
    type: list
    elements: list
    default: []
  _writes:
    description:
      - Internal - the writes the action plugin planned (C(path) and C(value), or C(argv)); refused in
        check mode. A task's value is ignored (the action plugin sets it); do not set it.
    type: list
    elements: dict
    default: []
attributes:
  action:
    support: full
    details: The action plugin compares and plans on the controller; the module reads and writes on the host.
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details: Only the reads run; RV(changes), RV(after) and the diff are predicted.
  diff_mode:
    support: full
    details: The declared knobs before and after.
  platform:
    platforms: linux
    details: The mlx5 driver's sysfs knobs and rdma_cm (MLNX_OFED).
"""

EXAMPLES = r"""
- name: DCQCN on priority 3, ToS 106, RoCE v2
  fabricops.fabric.roce_sysfs:
    netdev: enp170s0f0np0
    device: mlx5_2
    port: 1
    config:
      ecn_np: [null, null, null, true, null, null, null, null]
      ecn_rp: [null, null, null, true, null, null, null, null]
      traffic_class: 106
      rdma_cm_tos: 106
      roce_mode: 2
"""

RETURN = r"""
before:
  description: Knob name to value before (C(unset) values are null).
  returned: always
  type: dict
after:
  description: Knob name to value after (read back; predicted in check mode).
  returned: always
  type: dict
changes:
  description: The writes done (or, in check mode, that would be done), as C(path=value) or a command line.
  returned: always
  type: list
  elements: str
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

# The config suboptions, generated from fabricops.model.roce_schema (python -m fabricops.roce.generate).
# BEGIN fabricops.roce.generate config_spec
CONFIG_OPTIONS = {
    "ecn_np": {"type": "list", "elements": "raw"},
    "ecn_rp": {"type": "list", "elements": "raw"},
    "cnp_dscp": {"type": "int"},
    "cnp_priority": {"type": "int"},
    "traffic_class": {"type": "int"},
    "rdma_cm_tos": {"type": "int"},
    "roce_mode": {"type": "int", "choices": [1, 2]},
}
# END fabricops.roce.generate config_spec
PREFIXES = ("/sys/class/net/", "/sys/class/infiniband/", "/sys/kernel/config/rdma_cm/")
TOOLS = ("cma_roce_tos", "cma_roce_mode")
# The same allow-lists as fabricops.validate (netdev, HCA): the module runs without the package.
NAMES = {
    "netdev": re.compile(r"(?!\.\.?\Z)[A-Za-z0-9_.-]{1,15}"),
    "device": re.compile(r"[A-Za-z0-9_]{1,32}"),
}


def read_file(path):
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def safe_path(module, path):
    real = os.path.normpath(path)
    if not real.startswith(PREFIXES) or ".." in path.split("/"):
        module.fail_json(msg=f"roce_sysfs: refusing path outside the RoCE sysfs knobs: {path}")
    return real


def run_tool(module, argv):
    argv = [str(a) for a in argv]
    if not argv or argv[0] not in TOOLS:
        module.fail_json(msg=f"roce_sysfs: unexpected command {argv}")
    exe = module.get_bin_path(argv[0], opt_dirs=["/usr/sbin", "/sbin"])
    if not exe:
        module.fail_json(
            msg=f"{argv[0]} is not installed on this host: install MLNX_OFED "
            "(role fabricops.fabric.mlnx_ofed) or the mlnx-tools package first"
        )
    rc, out, err = module.run_command([exe, *argv[1:]])
    return {"argv": argv, "rc": rc, "stdout": out, "stderr": err}


def read_all(module):
    files = {p: read_file(safe_path(module, p)) for p in module.params["_read_files"]}
    commands = [run_tool(module, argv) for argv in module.params["_read_commands"]]
    return {"files": files, "commands": commands}


def main():
    module = AnsibleModule(
        argument_spec={
            "netdev": {"type": "str", "required": True},
            "device": {"type": "str", "required": True},
            "port": {"type": "int", "default": 1},
            "config": {"type": "dict", "options": CONFIG_OPTIONS},
            "current": {"type": "dict", "default": {}},  # the action plugin's; not sent here
            "_read_files": {"type": "list", "elements": "str", "default": []},
            "_read_commands": {"type": "list", "elements": "list", "default": []},
            "_writes": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    for key, regex in NAMES.items():
        if not regex.fullmatch(module.params[key]):
            module.fail_json(msg=f"roce_sysfs: {key} {module.params[key]!r} is not a {key} name")
    writes = module.params["_writes"]
    if writes and module.check_mode:
        module.fail_json(msg="roce_sysfs: refusing to change anything in check mode")
    done = []
    for w in writes:
        if w.get("path"):
            path = safe_path(module, w["path"])
            try:
                with open(path, "w") as fh:
                    fh.write(f"{w['value']}\n")
            except OSError as exc:
                module.fail_json(
                    msg=f"{module.params['netdev']}: writing {w['value']} to {path} failed: {exc}",
                    changes=done,
                )
            done.append(f"{path}={w['value']}")
        else:
            res = run_tool(module, w.get("argv") or [])
            done.append(" ".join(res["argv"]))
            if res["rc"] != 0:
                detail = (res["stdout"] or res["stderr"] or "").strip().splitlines()
                module.fail_json(
                    msg=f"{module.params['netdev']}: '{done[-1]}' failed (rc {res['rc']}): "
                    f"{detail[-1] if detail else 'no output'}",
                    changes=done,
                )
    module.exit_json(changed=bool(done), changes=done, raw=read_all(module))


if __name__ == "__main__":
    main()
