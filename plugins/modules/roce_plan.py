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
"""
