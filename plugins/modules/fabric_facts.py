#!/usr/bin/python
# Copyright: fabricops contributors
# SPDX-License-Identifier: Apache-2.0
"""Collect the raw fabric facts of a host (the action plugin of the same name parses them)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_facts
short_description: Discover HCAs, ports, netdevs, GIDs, OFED and GPUs of a host
description:
  - Reads C(/sys/class/infiniband), C(/sys/class/net) and, when they are installed, C(ofed_info -s)
    and C(nvidia-smi). Changes nothing; runs in check mode.
  - The action plugin C(fabricops.fabric.fabric_facts) parses what this module collects on the
    controller with the C(fabricops) package and sets C(ansible_facts.fabric).
  - Before MLNX_OFED is installed the HCAs the kernel sees are still listed (inbox driver) and
    C(fabric.ofed.installed) is false.
version_added: 0.1.0
author: fabricops developers (@fabricops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - ansible.builtin.action_common_attributes.facts
options:
  max_gids:
    description: How many GID table entries to read per port.
    type: int
    default: 16
attributes:
  action:
    support: full
    details: The action plugin parses what the module read, on the controller (C(fabricops.facts)).
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details: The module only reads, so it runs the same in check mode.
  diff_mode:
    support: none
  facts:
    support: full
    details: Sets C(ansible_facts.fabric).
  platform:
    platforms: linux
    details: Reads Linux sysfs (C(/sys/class/infiniband), C(/sys/class/net)).
"""

EXAMPLES = r"""
- name: Discover the fabric
  fabricops.fabric.fabric_facts:

- name: Show the HCAs that are up
  ansible.builtin.debug:
    msg: "{{ ansible_facts.fabric.hcas | map(attribute='name') | list }}"
"""

RETURN = r"""
raw:
  description: What was read, before parsing (sysfs values and tool outputs).
  returned: always
  type: dict
"""

import glob
import os
import shutil

from ansible.module_utils.basic import AnsibleModule

IB_ATTRS = ("node_guid", "sys_image_guid", "fw_ver", "hca_type", "board_id", "node_desc", "node_type")
PORT_ATTRS = ("state", "phys_state", "rate", "link_layer", "lid", "sm_lid")
NET_ATTRS = ("type", "address", "mtu", "operstate", "mode", "dev_port")
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def read(path):
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def collect_ib(max_gids):
    devices = {}
    for dev_path in sorted(glob.glob("/sys/class/infiniband/*")):
        dev = os.path.basename(dev_path)
        entry = {attr: read(os.path.join(dev_path, attr)) for attr in IB_ATTRS}
        entry["numa_node"] = read(os.path.join(dev_path, "device", "numa_node"))
        entry["netdevs"] = sorted(os.listdir(os.path.join(dev_path, "device", "net"))) if os.path.isdir(
            os.path.join(dev_path, "device", "net")
        ) else []
        entry["traffic_class"] = read(os.path.join(dev_path, "tc", "1", "traffic_class"))
        ports = {}
        for port_path in sorted(glob.glob(os.path.join(dev_path, "ports", "*"))):
            port = {attr: read(os.path.join(port_path, attr)) for attr in PORT_ATTRS}
            gids = []
            for index in range(max_gids):
                gid = read(os.path.join(port_path, "gids", str(index)))
                if gid is None:
                    break
                if gid == ZERO_GID:
                    continue
                gids.append({
                    "index": index,
                    "gid": gid,
                    "type": read(os.path.join(port_path, "gid_attrs", "types", str(index))),
                    "ndev": read(os.path.join(port_path, "gid_attrs", "ndevs", str(index))),
                })
            port["gids"] = gids
            ports[os.path.basename(port_path)] = port
        entry["ports"] = ports
        devices[dev] = entry
    return devices


def collect_net():
    netdevs = {}
    for net_path in sorted(glob.glob("/sys/class/net/*")):
        name = os.path.basename(net_path)
        if name == "lo":
            continue
        netdevs[name] = {attr: read(os.path.join(net_path, attr)) for attr in NET_ATTRS}
    return netdevs


def run_tool(module, argv):
    if shutil.which(argv[0]) is None:
        return None
    rc, out, err = module.run_command(argv)
    return {"rc": rc, "stdout": out, "stderr": err}


def main():
    module = AnsibleModule(
        argument_spec={"max_gids": {"type": "int", "default": 16}},
        supports_check_mode=True,
    )
    raw = {
        "infiniband": collect_ib(module.params["max_gids"]),
        "net": collect_net(),
        "ofed_info": run_tool(module, ["ofed_info", "-s"]),
        "nvidia_smi_query": run_tool(
            module,
            [
                "nvidia-smi",
                "--query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total",
                "--format=csv",
            ],
        ),
        "nvidia_smi_topo": run_tool(module, ["nvidia-smi", "topo", "-m"]),
    }
    module.exit_json(changed=False, raw=raw)


if __name__ == "__main__":
    main()
