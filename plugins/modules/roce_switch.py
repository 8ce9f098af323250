#!/usr/bin/python
# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""Documentation only: fabricops.fabric.roce_switch runs on the controller (action plugin)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: roce_switch
short_description: RoCE lossless QoS on NVIDIA Spectrum switches (Onyx and Cumulus NVUE) through netmiko
description:
  - Resource module for the RoCE QoS of one switch - lossless priority with PFC per port, trust (L3/DSCP),
    DSCP to switch-priority map, ECN thresholds per traffic class, CNP priority and ETS, the lossless
    buffer pool where the OS exposes it (NVUE C(qos roce mode)), PFC watchdog, and the ports it applies to.
  - The desired state comes from the fabric-wide definition O(roce) (C(fabricops_roce), validated by
    C(fabricops.model.roce), the same code the host role uses), so host and switch cannot disagree.
  - Runs on the controller and opens its own netmiko session (C(mellanox_mlnxos) for Onyx,
    C(cumulus_linux) for Cumulus) from the host's inventory - C(ansible_host), C(ansible_port),
    C(ansible_user), and a password (C(roce_switch_password), C(ansible_password) or the environment
    variable E(FABRICOPS_SWITCH_PASSWORD)) and/or a private key (C(roce_switch_private_key_file), else
    C(ansible_ssh_private_key_file); passphrase C(roce_switch_private_key_passphrase)), the ssh-agent
    (C(roce_switch_use_agent)), an ssh_config (C(roce_switch_ssh_config)) and a bastion (ProxyJump or
    ProxyCommand in C(ansible_ssh_common_args) or the ssh_config). Vault, inline vault and C(!unsafe)
    values are read as in a play. Credentials are never task arguments and never in the result.
    The same function (C(fabricops.switch.access)) serves C(fabricops verify) and C(fabricops diagnose).
  - A Cumulus switch with C(roce_switch_transport=rest) is reached over the NVUE REST API instead of SSH
    (HTTPS on C(roce_switch_api_port), default 8765, the certificate verified against C(roce_switch_api_ca));
    the states, check mode and diff are the same as over the CLI.
  - SSH host keys are checked against a known_hosts file - O(known_hosts), else C(roce_switch_known_hosts),
    C(fabricops_known_hosts), C(fabricops_ssh_known_hosts), the C(UserKnownHostsFile) in
    C(ansible_ssh_common_args), then C(~/.ssh/known_hosts). Unknown keys are rejected, never added.
  - Onyx - commands are sent in config mode; on a rejected command, a dropped session or a failed check the
    previous running configuration is restored over a new session and the task fails naming the switch and
    the step; C(configuration write) is sent only after the change is verified.
  - Cumulus NVUE - C(nv set)/C(nv unset) into a pending revision, C(nv config diff) decides whether anything
    changed, C(nv config apply --confirm TIME -y), then a new session checks reachability and the applied
    state before confirming; C(nv config save). On failure the pending revision is detached and an
    unconfirmed apply is rolled back.
version_added: 0.1.0
author: fabricops developers (@fabricops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
options:
  state:
    description:
      - C(merged) sets what differs; C(replaced) also removes RoCE knobs the want does not hold,
        globally and on the wanted ports; C(overridden) does so on every port; C(deleted) removes the
        RoCE knobs globally and on the wanted ports; C(gathered) reads; C(rendered) computes commands
        without a switch; C(parsed) reads O(running_config) text offline.
    type: str
    choices: [merged, replaced, overridden, deleted, gathered, rendered, parsed]
    default: merged
  roce:
    description: The fabric-wide RoCE definition (C(fabricops_roce)); schema in docs/roce.md.
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
  ports:
    description:
      - Switch ports to configure (C(Eth1/1), C(swp1)). Empty - the ports O(cabling) connects to this switch
        and its ends of the O(links).
    type: list
    elements: str
    default: []
  cabling:
    description: C(fabricops_cabling) - list of C(host), C(netdev), C(switch), C(switch_port) entries.
    type: list
    elements: dict
    default: []
  links:
    description:
      - C(fabricops_switch_links) - the inter-switch links, a list of C(switch_a), C(port_a), C(switch_b),
        C(port_b) entries. When O(ports) is empty, this switch's ends of them (uplinks on a leaf, downlinks
        on a spine) are configured with the host-facing ports, the same PFC, ECN and trust.
      - An entry that lacks one of the four keys fails the task before the switch is contacted.
    type: list
    elements: dict
    default: []
  os:
    description: C(onyx) or C(cumulus). Default - C(fabricops_switch_os), then C(ansible_network_os).
    type: str
  # The switch-only settings (role variables roce_switch_*), generated from the schema.
  # BEGIN fabricops.roce.generate switch_settings
  pfc_watchdog:
    description: PFC watchdog (storm protection) on the configured ports (Onyx also globally).
    type: bool
    default: true
  ets_lossless_percent:
    description: >-
      DWRR share of the lossless traffic class; class 0 gets the rest, the CNP class is strict. From 1
      to 99 percent.
    type: int
    default: 50
  buffer_pool:
    description: >-
      NVUE lossless buffer pool layout (qos roce mode); default: lossless on Cumulus, unmanaged on
      Onyx (Onyx traffic pool buffers are not managed yet).
    type: str
    choices: [default, lossless, lossless-single-ipool]
    default: default
  # END fabricops.roce.generate switch_settings
  save:
    description: Save after a verified change (Onyx C(configuration write), NVUE C(nv config save)).
    type: bool
    default: true
  confirm_timeout:
    description:
      - NVUE C(nv config apply --confirm) time (C(30s), C(5m)); the apply rolls back unless confirmed.
        Digits and one unit letter, 10s to 1h; anything else is refused before the switch is contacted.
    type: str
    default: 120s
  discard_pending:
    description: NVUE - detach a pending revision found before the change instead of failing.
    type: bool
    default: false
  running_config:
    description: For O(state=parsed) - Onyx C(show running-config) text or NVUE C(nv config show) YAML/JSON.
    type: str
  known_hosts:
    description: known_hosts file for host-key checking (see above for the default order).
    type: path
  timeout:
    description: SSH connect and authentication timeout in seconds.
    type: int
    default: 30
  check_access:
    description:
      - Only resolve how the switch is reached (user, address, credential kinds, known_hosts) and fail
        with one sentence when a variable is missing or wrong; no switch contact, no secret shown.
    type: bool
    default: false
attributes:
  action:
    support: full
    details: Runs on the controller and opens its own netmiko SSH session to the switch.
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details: Computes and returns the commands; sends only show commands.
  diff_mode:
    support: full
    details: The RoCE configuration before and after (predicted in check mode), returned only in diff mode.
  platform:
    platforms: [onyx, cumulus]
    details: NVIDIA Spectrum switches running Onyx or Cumulus Linux (NVUE).
"""

EXAMPLES = r"""
- name: RoCE lossless on the switch ports the RoCE hosts are cabled to and on its inter-switch links
  fabricops.fabric.roce_switch:
    roce: "{{ fabricops_roce }}"
    cabling: "{{ fabricops_cabling }}"
    links: "{{ fabricops_switch_links | default([]) }}"

- name: Show what a replace would send, without a switch
  fabricops.fabric.roce_switch:
    state: rendered
    os: onyx
    roce: {lossless_priority: 3, dscp: 26}
    ports: [Eth1/1, Eth1/2]
  register: rendered

- name: Read the RoCE configuration of the switch
  fabricops.fabric.roce_switch:
    state: gathered
  register: gathered
"""

RETURN = r"""
before:
  description: Configured RoCE knobs before the task (C(global) and per-port C(ports)).
  returned: when the switch was read
  type: dict
commands:
  description: The configuration commands the state needs (sent unless in check mode).
  returned: always
  type: list
  elements: str
  sample: ["dcb priority-flow-control enable force", "interface ethernet 1/1-1/4 qos trust L3"]
after:
  description: Configured RoCE knobs after the task (predicted in check mode).
  returned: when the switch was read
  type: dict
sent:
  description: Every configuration command actually sent, including save / apply / confirm.
  returned: when a change was applied
  type: list
  elements: str
operational:
  description: Effective state read from json-print (Onyx) or C(nv show qos roce -o json) (NVUE).
  returned: when the switch was read
  type: dict
ports:
  description: The switch ports the task manages.
  returned: except for parsed
  type: list
  elements: str
gathered:
  description:
    - The switch's RoCE configuration in the shape users write, C(roce) (the C(fabricops_roce) fields
      it holds), C(ports), C(pfc_watchdog), C(ets_lossless_percent), C(buffer_pool) (NVUE), C(notes)
      where the ports differ, and the per-knob facts under C(knobs) (docs/switches.md).
  returned: state is gathered
  type: dict
rendered:
  description: The commands for the wanted state against an empty switch.
  returned: state is rendered
  type: list
  elements: str
parsed:
  description: The RoCE knobs read from O(running_config).
  returned: state is parsed
  type: dict
"""
