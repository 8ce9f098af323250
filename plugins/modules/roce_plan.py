#!/usr/bin/python
# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""Documentation only: fabricops.fabric.roce_plan runs entirely on the controller (action plugin)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: roce_plan
short_description: Validate the fabric-wide RoCE definition and compute a host's per-port desired state
description:
  - Runs on the controller only and changes nothing. Validates O(roce) with
    C(fabricops.model.roce.validate) (the same code the switch role uses), picks the RoCE ports of the
    host from the discovered HCAs, and returns the desired state of each port.
  - Bad input fails with one sentence that names the field and what to fix (for example
    C(fabricops_roce.lossless_priority is 9; it must be from 0 to 7.)).
version_added: 0.1.0
author: fabricops developers (@fabricops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  roce:
    description: The fabric-wide RoCE definition (usually C(fabricops_roce)); see docs/roce.md.
    type: dict
    default: {}
    suboptions:
      # Generated from src/fabricops/model/roce_schema.py (python -m fabricops.roce.generate); edit it there.
      # BEGIN fabricops.roce.generate roce
      lossless:
        description: >-
          true: PFC on lossless_priority (lossless RoCE); false: lossy RoCE, ECN only, PFC off on hosts
          and switches (NVUE qos roce mode lossy). Default true.
        type: bool
      lossless_priority:
        description: The one priority with PFC (RoCE data). Default 3.
        type: int
        choices: [0, 1, 2, 3, 4, 5, 6, 7]
      dscp:
        description: DSCP of RoCE data (ToS = DSCP << 2 | 2, so 26 gives 106). From 0 to 63. Default 26.
        type: int
      cnp_dscp:
        description: DSCP of congestion notification packets (not dscp). From 0 to 63. Default 48.
        type: int
      cnp_priority:
        description: Priority of CNPs (not lossless_priority). Default 6.
        type: int
        choices: [0, 1, 2, 3, 4, 5, 6, 7]
      trust:
        description: Priority trust of the NICs and switch ports (dscp L3, pcp L2). Default dscp.
        type: str
        choices: [dscp, pcp]
      ecn:
        description: ECN thresholds (switch side) and host DCQCN on the other priorities.
        type: dict
        suboptions:
          min_kb:
            description: Switch ECN marking starts at this queue depth. From 1 to 100000 KB. Default 150.
            type: int
          max_kb:
            description: >-
              Switch ECN marking reaches probability here (not below min_kb). From 1 to 100000 KB. Default
              1500.
            type: int
          probability:
            description: Switch ECN marking probability at max_kb. From 1 to 100 percent. Default 100.
            type: int
          other_priorities:
            description: Host DCQCN on the priorities other than the lossless one. Default enabled.
            type: str
            choices: [enabled, disabled, unmanaged]
      cable_length_m:
        description: mlnx_qos cable length (PFC headroom); null leaves it as it is. From 1 to 1000 m.
        type: int
      roce_mode:
        description: rdma_cm default RoCE mode (1 = v1, 2 = v2). Default 2.
        type: int
        choices: [1, 2]
      dscp_map:
        description: >-
          Extra DSCP to priority entries (the RoCE and CNP entries are always set). Keys (DSCP) 0 to 63,
          values 0 to 7.
        type: dict
      # END fabricops.roce.generate roce
  hcas:
    description: C(ansible_facts.fabric.hcas) from C(fabricops.fabric.fabric_facts).
    type: list
    elements: dict
    required: true
  interfaces:
    description: Netdevs to manage; empty means every Ethernet-link-layer HCA port with a netdev.
    type: list
    elements: str
    default: []
attributes:
  action:
    support: full
    details: Runs entirely on the controller; the module file holds documentation only.
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details: Computes and changes nothing, so it runs the same in check mode.
  diff_mode:
    support: none
  platform:
    platforms: all
    details: The host is never contacted.
"""

EXAMPLES = r"""
- name: Plan the RoCE ports of this host
  fabricops.fabric.roce_plan:
    roce: "{{ fabricops_roce }}"
    hcas: "{{ ansible_facts.fabric.hcas }}"
  register: plan
"""

RETURN = r"""
roce:
  description: The effective definition (defaults merged) with derived values (tos, pfc_vector, dscp2prio).
  returned: always
  type: dict
ports:
  description:
    - Per port - netdev, device, port, and the arguments for mlnx_qos (C(mlnx_qos)) and roce_sysfs (C(sysfs)).
  returned: always
  type: list
  elements: dict
sysfs_reads:
  description:
    - What M(fabricops.fabric.roce_sysfs) reads for every port, for one M(fabricops.fabric.host_read) of
      them all - C(files) (name C(sysfs PATH) -> path) and C(commands) (name C(sysfs ARGV) -> argument
      list). Its results, given as roce_sysfs's O(fabricops.fabric.roce_sysfs#module:current), spare
      roce_sysfs its own read of the port.
  returned: always
  type: dict
"""
