#!/usr/bin/python
# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""Run mlxconfig on the host (the action plugin of the same name holds the logic)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: mlxconfig
short_description: Declare the firmware (NVCONFIG) settings of a ConnectX device with mlxconfig
description:
  - Reads C(mlxconfig -d DEVICE -e q) (default, current and next-boot values), compares the next-boot
    values with the declared ones on the controller (C(fabricops.firmware.config_plan)) and runs one
    C(mlxconfig -d DEVICE -y set KEY=VALUE ...) with only the keys that differ, then reads again and
    fails if the next-boot configuration does not hold the declared values.
  - mlxconfig changes take effect at the next firmware reset (C(mlxfwreset)) or reboot. The module
    never resets; it returns RV(reset_pending), the declared keys whose running (current) value is
    not yet the declared one. The C(fabricops.fabric.nic_firmware) role resets with consent.
  - Only declared keys are managed; every other setting is left as it is. A key the device does not
    show in C(mlxconfig -e q) is refused before anything is set.
  - In check mode only the read runs; C(changed), RV(commands) and the diff say what would be set.
version_added: 0.1.0
author: fabricops developers (@fabricops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
requirements:
  - C(mlxconfig) on the host (NVIDIA MFT, the C(mft) package of MLNX_OFED or DOCA-Host).
  - The C(fabricops) Python package on the controller.
options:
  device:
    description: The device as C(mlxconfig -d) takes it, by PCI address (C(0000:41:00.0) or C(41:00.0)).
    type: str
    required: true
  config:
    description:
      - The declared settings, C(KEY) (as mlxconfig names it, upper case, optionally C(KEY[N]) for one
        array element) to value (a decimal or C(0x) number, C(true)/C(false), or a name mlxconfig prints
        such as C(IB), C(ETH); C(True(1)) as printed is taken as C(1)). Validated on the controller.
      - Left out, the task only reads.
    type: dict
  _set:
    description:
      - Internal - the C(KEY=VALUE) arguments the action plugin computed and passes to the module.
        A task's value is ignored (the action plugin sets it); do not set it.
    type: list
    elements: str
    default: []
attributes:
  action:
    support: full
    details: The action plugin compares and plans on the controller; the module runs C(mlxconfig) on the host.
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details:
      - Only the read (C(mlxconfig -d DEVICE -e q)) runs; RV(commands), RV(next_boot) and the diff
        are predicted.
  diff_mode:
    support: full
    details: The declared keys' next-boot values before and after.
  platform:
    platforms: linux
    details: NVIDIA ConnectX / BlueField devices with MFT's C(mlxconfig).
"""

EXAMPLES = r"""
- name: ATS off and PCI settings for GPUDirect, on one NIC (takes effect after a firmware reset)
  fabricops.fabric.mlxconfig:
    device: "0000:41:00.0"
    config:
      ADVANCED_PCI_SETTINGS: true
      MAX_ACC_OUT_READ: 0
      ATS_ENABLED: false
  register: nic

- name: Say whether a reset is still needed
  ansible.builtin.debug:
    msg: "reset pending for {{ nic.reset_pending | join(', ') }}"
  when: nic.reset_pending | length > 0
"""

RETURN = r"""
commands:
  description: The mlxconfig command run (or, in check mode, that would run); empty when nothing differs.
  returned: always
  type: list
  elements: str
  sample: ["mlxconfig -d 0000:41:00.0 -y set ATS_ENABLED=0"]
next_boot:
  description:
    - The declared keys' next-boot values after (read back; predicted in check mode), as printed.
  returned: always
  type: dict
  sample: {"ATS_ENABLED": "False(0)"}
current:
  description: The declared keys' running (current) values, as mlxconfig prints them.
  returned: always
  type: dict
reset_pending:
  description:
    - Declared keys whose current value is not the declared one (they take effect after a firmware reset).
  returned: always
  type: list
  elements: str
deferred:
  description:
    - Declared keys the device hides until ADVANCED_PCI_SETTINGS is on in the running configuration;
      set them after the reset (a second run does).
  returned: always
  type: list
  elements: str
stdout:
  description: The last C(mlxconfig -d DEVICE -e q) output.
  returned: always
  type: str
"""

import re
import shutil

from ansible.module_utils.basic import AnsibleModule

# The same allow-lists as fabricops.firmware (this module runs on the host, without the package).
BDF = re.compile(r"(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]")
SETTING = re.compile(
    r"[A-Z][A-Z0-9_]{0,63}(\[[0-9]{1,3}\])?=([0-9]{1,10}|0[xX][0-9a-fA-F]{1,8}|[A-Za-z][A-Za-z0-9_]{0,31})"
)


def _last(out, err):
    lines = [ln for ln in (out or err or "").strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "no output"


def main():
    module = AnsibleModule(
        argument_spec={
            "device": {"type": "str", "required": True},
            "config": {"type": "dict"},
            "_set": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    exe = shutil.which("mlxconfig") or module.get_bin_path("mlxconfig", opt_dirs=["/usr/sbin", "/sbin"])
    if not exe:
        module.fail_json(
            msg="mlxconfig is not installed on this host: install NVIDIA MFT (the mft package of "
            "MLNX_OFED or DOCA-Host, role fabricops.fabric.mlnx_ofed) first"
        )
    device = module.params["device"]
    if not BDF.fullmatch(device):
        module.fail_json(msg=f"mlxconfig: device {device!r} is not a PCI address like 0000:41:00.0")
    settings = [str(s) for s in module.params["_set"]]
    if settings and module.check_mode:
        module.fail_json(msg="mlxconfig: refusing to change anything in check mode")
    bad = [s for s in settings if not SETTING.fullmatch(s)]
    if bad:
        module.fail_json(msg=f"mlxconfig: unexpected settings {bad}")
    ran = []
    if settings:
        argv = [exe, "-d", device, "-y", "set", *settings]
        ran.append(" ".join(["mlxconfig", "-d", device, "-y", "set", *settings]))
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg=f"{device}: '{ran[-1]}' failed (rc {rc}): {_last(out, err)}",
                             rc=rc, stdout=out, stderr=err, commands=ran)
    rc, out, err = module.run_command([exe, "-d", device, "-e", "q"])
    if rc != 0:
        module.fail_json(msg=f"{device}: 'mlxconfig -d {device} -e q' failed (rc {rc}): {_last(out, err)}",
                         rc=rc, stdout=out, stderr=err, commands=ran)
    module.exit_json(changed=bool(ran), stdout=out, stderr=err, commands=ran)


if __name__ == "__main__":
    main()
