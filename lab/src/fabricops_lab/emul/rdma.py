"""Emulated MLNX_OFED / rdma-core / infiniband-diags tools (stdlib only).

Each function takes argv (without the program name) and returns the exit status. They read only
devstate (hardware.json, the emulated sysfs, the volatile QoS state) and print what the real tools
print; formats are documented, with their sources, in docs/parsers.md.
"""

from __future__ import annotations

import ipaddress
import os
import sys

from . import devstate, hwctl, services

DRIVER_STOPPED = "run/emulated-hw/driver-stopped"


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")


def _pid() -> int:
    return os.getpid()


# --- reading the emulated sysfs ---------------------------------------------------------------

def _driver_loaded() -> bool:
    return not devstate.path(DRIVER_STOPPED).exists()


def _devices() -> list[str] | None:
    """RDMA device names in sysfs order; None when there is no RDMA stack at all."""
    if not _driver_loaded():
        return None
    base = devstate.sysfs("class/infiniband")
    if not base.is_dir():
        return None
    return sorted(p.name for p in base.iterdir())


def _attr(dev: str, name: str, default: str = "") -> str:
    return devstate.read_sysfs(f"class/infiniband/{dev}/{name}", default) or default


def _ports(dev: str) -> list[int]:
    base = devstate.sysfs(f"class/infiniband/{dev}/ports")
    if not base.is_dir():
        return []
    return sorted(int(p.name) for p in base.iterdir() if p.name.isdigit())


def _pattr(dev: str, port: int, name: str, default: str = "") -> str:
    return devstate.read_sysfs(f"{devstate.port_dir(dev, port)}/{name}", default) or default


def _num_state(raw: str) -> tuple[int, str]:
    num, _, name = raw.partition(":")
    try:
        return int(num), name.strip()
    except ValueError:
        return 0, raw


def _rate(dev: str, port: int) -> tuple[float, str, str]:
    """(Gb/s, width, speed name) from the sysfs rate text '400 Gb/sec (4X NDR)'."""
    raw = _pattr(dev, port, "rate", "10 Gb/sec (4X SDR)")
    num = float(raw.split()[0])
    inside = raw[raw.find("(") + 1:raw.find(")")].split() if "(" in raw else ["4X", "SDR"]
    width = inside[0] if inside else "4X"
    speed = inside[1] if len(inside) > 1 else "SDR"
    return num, width, speed


def _fmt_rate(num: float) -> str:
    return str(int(num)) if num == int(num) else f"{num:g}"


def _int_attr(dev: str, port: int, name: str) -> int:
    try:
        return int(_pattr(dev, port, name, "0"), 0)
    except ValueError:
        return 0


def _guid16(dev: str, attr: str) -> str:
    return _attr(dev, attr, "0000:0000:0000:0000").replace(":", "")


def _port_guid(dev: str, port: int) -> str:
    gid0 = _pattr(dev, port, "gids/0", "")
    return gid0.replace(":", "")[16:] if gid0 else "0" * 16


def _hw_port(dev: str, port: int) -> dict:
    hca = devstate.find_hca(dev) or {}
    return next((p for p in hca.get("ports", []) if p.get("port") == port), {})


def _no_stack_verbs() -> int:
    _err("Failed to get IB devices list: Function not implemented")
    return 255


# --- ofed_info ------------------------------------------------------------------------------

def ofed_info(argv: list[str]) -> int:
    release = devstate.ofed_release()
    if not release:
        _err("ofed_info: command not found")
        return 127
    if release.startswith("OFED-internal-"):  # DOCA-OFED (docs/lab-ofed.md, DOCA-Host mirror)
        number = release[len("OFED-internal-"):]
        if "-n" in argv:
            _out(number)
        elif "-s" in argv:
            _out(f"{release}:")
        else:
            _out(f"{release}:")
            _out()
            _out()
        return 0
    number = release.split("-", 1)[1] if "-" in release else release
    try:
        major = int(number.split(".")[0])
    except ValueError:
        major = 0
    if "-n" in argv:
        _out(number)
        return 0
    if "-s" in argv:
        _out(release if major >= 24 else f"{release}:")  # 24.x prints no colon (real captures)
        return 0
    base = "OFED-" + number.rsplit(".", 1)[0]
    _out(f"{release} ({base}):")
    _out()
    _out()
    return 0


# --- ibv_devinfo / ibv_devices ----------------------------------------------------------------

_MTU_CODE = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}
_PHYS_VERBS = {1: "SLEEP", 2: "POLLING", 3: "DISABLED", 4: "PORT_CONFIGURATION TRAINNING",
               5: "LINK_UP", 6: "LINK_ERROR_RECOVERY", 7: "PHY TEST"}
_STATE_VERBS = {1: "PORT_DOWN", 2: "PORT_INIT", 3: "PORT_ARMED", 4: "PORT_ACTIVE"}


def _devinfo_port(dev: str, port: int, verbose: bool) -> list[str]:
    hwp = _hw_port(dev, port)
    st, _ = _num_state(_pattr(dev, port, "state", "1: DOWN"))
    ps, _ = _num_state(_pattr(dev, port, "phys_state", "3: Disabled"))
    max_mtu = int(hwp.get("max_mtu") or 4096)
    act_mtu = int(hwp.get("active_mtu") or 1024)
    ll = _pattr(dev, port, "link_layer", "InfiniBand")
    lines = [
        f"\t\tport:\t{port}",
        f"\t\t\tstate:\t\t\t{_STATE_VERBS.get(st, 'PORT_DOWN')} ({st})",
        f"\t\t\tmax_mtu:\t\t{max_mtu} ({_MTU_CODE.get(max_mtu, 5)})",
        f"\t\t\tactive_mtu:\t\t{act_mtu} ({_MTU_CODE.get(act_mtu, 3)})",
        f"\t\t\tsm_lid:\t\t\t{_int_attr(dev, port, 'sm_lid')}",
        f"\t\t\tport_lid:\t\t{_int_attr(dev, port, 'lid')}",
        "\t\t\tport_lmc:\t\t0x00",
        f"\t\t\tlink_layer:\t\t{ll}",
    ]
    if not verbose:
        return lines
    eth = ll == "Ethernet"
    _, width, speed = _rate(dev, port)
    wcode = hwctl.WIDTHS.get(width, (4, 2))[1]
    stext, scode = hwctl.SPEEDS.get(speed, hwctl.SPEEDS["SDR"])[1:]
    lines += [
        "\t\t\tmax_msg_sz:\t\t0x40000000",
        f"\t\t\tport_cap_flags:\t\t{'0x04010000' if eth else '0xa751e848'}",
        "\t\t\tport_cap_flags2:\t0x0000" if eth else "\t\t\tport_cap_flags2:\t0x0032",
        "\t\t\tmax_vl_num:\t\tinvalid value (0)" if eth else "\t\t\tmax_vl_num:\t\t4 (3)",
        "\t\t\tbad_pkey_cntr:\t\t0x0",
        "\t\t\tqkey_viol_cntr:\t\t0x0",
        "\t\t\tsm_sl:\t\t\t0",
        f"\t\t\tpkey_tbl_len:\t\t{1 if eth else 128}",
        f"\t\t\tgid_tbl_len:\t\t{255 if eth else 8}",
        "\t\t\tsubnet_timeout:\t\t0" if eth else "\t\t\tsubnet_timeout:\t\t18",
        "\t\t\tinit_type_reply:\t0",
        f"\t\t\tactive_width:\t\t{width} ({wcode})",
        f"\t\t\tactive_speed:\t\t{stext} ({scode})",
        f"\t\t\tphys_state:\t\t{_PHYS_VERBS.get(ps, 'DISABLED')} ({ps})",
    ]
    for idx in range(16):
        gid = _pattr(dev, port, f"gids/{idx}", "")
        if not gid or gid.replace(":", "").strip("0") == "":
            continue
        gtype = _pattr(dev, port, f"gid_attrs/types/{idx}", "IB/RoCE v1")
        if not eth:
            lines.append(f"\t\t\tGID[{idx:3d}]:\t\t{gid}")
        elif gtype == "RoCE v2":
            addr = ipaddress.IPv6Address(gid)
            text = f"::ffff:{addr.ipv4_mapped}" if addr.ipv4_mapped else str(addr)  # as inet_ntop
            lines.append(f"\t\t\tGID[{idx:3d}]:\t\t{text}, RoCE v2")
        else:
            lines.append(f"\t\t\tGID[{idx:3d}]:\t\t{gid}, RoCE v1")
    return lines


_VERBOSE_DEV = [
    "\tmax_mr_size:\t\t\t0xffffffffffffffff",
    "\tpage_size_cap:\t\t\t0xfffffffffffff000",
    "\tmax_qp:\t\t\t\t131072",
    "\tmax_qp_wr:\t\t\t32768",
    "\tdevice_cap_flags:\t\t0x21361c36",
    "\t\t\t\t\tBAD_PKEY_CNTR",
    "\t\t\t\t\tBAD_QKEY_CNTR",
    "\t\t\t\t\tAUTO_PATH_MIG",
    "\t\t\t\t\tCHANGE_PHY_PORT",
    "\t\t\t\t\tPORT_ACTIVE_EVENT",
    "\t\t\t\t\tSYS_IMAGE_GUID",
    "\t\t\t\t\tRC_RNR_NAK_GEN",
    "\t\t\t\t\tMEM_WINDOW",
    "\t\t\t\t\tXRC",
    "\t\t\t\t\tMEM_MGT_EXTENSIONS",
    "\t\t\t\t\tMEM_WINDOW_TYPE_2B",
    "\t\t\t\t\tMANAGED_FLOW_STEERING",
    "\tmax_sge:\t\t\t30",
    "\tmax_sge_rd:\t\t\t30",
    "\tmax_cq:\t\t\t\t16777216",
    "\tmax_cqe:\t\t\t4194303",
    "\tmax_mr:\t\t\t\t16777216",
    "\tmax_pd:\t\t\t\t8388608",
    "\tmax_qp_rd_atom:\t\t\t16",
    "\tmax_ee_rd_atom:\t\t\t0",
    "\tmax_res_rd_atom:\t\t2097152",
    "\tmax_qp_init_rd_atom:\t\t16",
    "\tmax_ee_init_rd_atom:\t\t0",
    "\tatomic_cap:\t\t\tATOMIC_HCA (1)",
    "\tmax_ee:\t\t\t\t0",
    "\tmax_rdd:\t\t\t0",
    "\tmax_mw:\t\t\t\t16777216",
    "\tmax_raw_ipv6_qp:\t\t0",
    "\tmax_raw_ethy_qp:\t\t0",
    "\tmax_mcast_grp:\t\t\t2097152",
    "\tmax_mcast_qp_attach:\t\t240",
    "\tmax_total_mcast_qp_attach:\t503316480",
    "\tmax_ah:\t\t\t\t2147483647",
    "\tmax_fmr:\t\t\t0",
    "\tmax_srq:\t\t\t8388608",
    "\tmax_srq_wr:\t\t\t32767",
    "\tmax_srq_sge:\t\t\t31",
    "\tmax_pkeys:\t\t\t128",
    "\tlocal_ca_ack_delay:\t\t16",
    "\tnum_comp_vectors:\t\t63",
]


def _devinfo_device(dev: str, port_filter: int | None, verbose: bool) -> list[str]:
    hca = devstate.find_hca(dev) or {}
    ports = _ports(dev)
    lines = [
        f"hca_id:\t{dev}",
        "\ttransport:\t\t\tInfiniBand (0)",
        f"\tfw_ver:\t\t\t\t{_attr(dev, 'fw_ver')}",
        f"\tnode_guid:\t\t\t{_attr(dev, 'node_guid')}",
        f"\tsys_image_guid:\t\t\t{_attr(dev, 'sys_image_guid')}",
        f"\tvendor_id:\t\t\t{hca.get('vendor_id', '0x02c9')}",
        f"\tvendor_part_id:\t\t\t{hca.get('vendor_part_id', 4129)}",
        f"\thw_ver:\t\t\t\t{_attr(dev, 'hw_rev', '0x0')}",
        f"\tboard_id:\t\t\t{_attr(dev, 'board_id')}",
        f"\tphys_port_cnt:\t\t\t{len(ports)}",
    ]
    if verbose:
        lines += _VERBOSE_DEV
    for p in ports:
        if port_filter is None or p == port_filter:
            lines += _devinfo_port(dev, p, verbose)
    lines.append("")
    return lines


def ibv_devinfo(argv: list[str]) -> int:
    dev = None
    port = None
    verbose = False
    list_only = False
    it = iter(range(len(argv)))
    for i in it:
        a = argv[i]
        if a in ("-d", "--ib-dev") and i + 1 < len(argv):
            dev = argv[i + 1]
            next(it, None)
        elif a.startswith("--ib-dev="):
            dev = a.split("=", 1)[1]
        elif a in ("-i", "--ib-port") and i + 1 < len(argv):
            port = int(argv[i + 1])
            next(it, None)
        elif a in ("-v", "--verbose"):
            verbose = True
        elif a in ("-l", "--list"):
            list_only = True
    devs = _devices()
    if devs is None:
        return _no_stack_verbs()
    if list_only:
        _out(f"{len(devs)} HCA{'s' if len(devs) != 1 else ''} found:")
        for d in devs:
            _out(f"\t{d}")
        return 0
    if not devs:
        _err("No IB devices found")
        return 255
    if dev is not None:
        if dev not in devs:
            _err(f"IB device '{dev}' wasn't found")
            return 255
        devs = [dev]
    if port is not None and dev is not None and port not in _ports(dev):
        _err(f"Failed to query port {port} props")
        return 255
    for d in devs:
        for line in _devinfo_device(d, port, verbose):
            _out(line)
    return 0


def ibv_devices(argv: list[str]) -> int:
    devs = _devices()
    if devs is None:
        return _no_stack_verbs()
    _out(f"    {'device':<16}\t   node GUID")
    _out(f"    {'------':<16}\t----------------")
    for d in devs:
        _out(f"    {d:<16}\t{_guid16(d, 'node_guid')}")
    return 0


# --- ibstat / ibstatus ----------------------------------------------------------------------

def _ibstat_rate(dev: str, port: int) -> str:
    num, _, speed = _rate(dev, port)
    if speed == "FDR10":
        return f"{_fmt_rate(num)} (FDR10)"
    return _fmt_rate(num)


def _ibstat_port(dev: str, port: int, pre: str, hdrpre: str) -> list[str]:
    _, st = _num_state(_pattr(dev, port, "state", "1: DOWN"))
    _, ps = _num_state(_pattr(dev, port, "phys_state", "3: Disabled"))
    names = {"ACTIVE": "Active", "INIT": "Initializing", "ARMED": "Armed", "DOWN": "Down"}
    ll = _pattr(dev, port, "link_layer", "InfiniBand")
    return [
        f"{hdrpre}Port {port}:",
        f"{pre}State: {names.get(st, '???')}",
        f"{pre}Physical state: {ps}",
        f"{pre}Rate: {_ibstat_rate(dev, port)}",
        f"{pre}Base lid: {_int_attr(dev, port, 'lid')}",
        f"{pre}LMC: 0",
        f"{pre}SM lid: {_int_attr(dev, port, 'sm_lid')}",
        f"{pre}Capability mask: {_pattr(dev, port, 'cap_mask', '0x00010000')}",
        f"{pre}Port GUID: 0x{_port_guid(dev, port)}",
        f"{pre}Link layer: {ll}",
    ]


def ibstat(argv: list[str]) -> int:
    flags = [a for a in argv if a.startswith("-")]
    args = [a for a in argv if not a.startswith("-")]
    devs = _devices()
    if devs is None:
        return 0  # real ibstat prints nothing and exits 0 without an RDMA stack (LAB-NOTES)
    if args:
        match = [d for d in devs if args[0].startswith(d)]  # real ibstat matches by prefix
        if not match:
            _err(f"ibpanic: [{_pid()}] main: '{args[0]}' IB device can't be found")
            return 255
        devs = match[:1]
    if "-p" in flags or "--port_list" in flags:
        for d in devs:
            for p in _ports(d):
                _out(f"0x{_port_guid(d, p)}")
        return 0
    if "-l" in flags or "--list_of_cas" in flags:
        for d in devs:
            _out(d)
        return 0
    short = "-s" in flags or "--short" in flags
    for d in devs:
        if len(args) > 1:
            port = int(args[1], 0)
            if port not in _ports(d):
                nports = len(_ports(d))
                _err(f"ibwarn: [{_pid()}] ca_stat: CA: '{d}' has no port number {port} - max ({nports})")
                _err(f"ibpanic: [{_pid()}] main: stat of IB device '{d}' failed: No such file or directory")
                return 255
            _out(f"CA: '{d}'")
            for line in _ibstat_port(d, port, "", ""):
                _out(line)
            continue
        _out(f"CA '{d}'")
        _out(f"\tCA type: {_attr(d, 'hca_type')}")
        _out(f"\tNumber of ports: {len(_ports(d))}")
        _out(f"\tFirmware version: {_attr(d, 'fw_ver')}")
        _out(f"\tHardware version: {int(_attr(d, 'hw_rev', '0x0'), 0)}")
        _out(f"\tNode GUID: 0x{_guid16(d, 'node_guid')}")
        _out(f"\tSystem image GUID: 0x{_guid16(d, 'sys_image_guid')}")
        if short:
            continue
        for p in _ports(d):
            for line in _ibstat_port(d, p, "\t\t", "\t"):
                _out(line)
    return 0


def ibstatus(argv: list[str]) -> int:
    devs = _devices()
    if not devs:
        _out("Fatal error:  No devices")
        return 255
    targets: list[tuple[str, int]] = []
    if argv:
        for a in argv:
            name, _, port = a.partition(":")
            if name not in devs:
                _out(f"Fatal error:  device '{name}' not found")
                return 255
            targets += [(name, int(port))] if port else [(name, p) for p in _ports(name)]
    else:
        targets = [(d, p) for d in devs for p in _ports(d)]
    for d, p in targets:
        num, width, speed = _rate(d, p)
        gid = _pattr(d, p, "gids/0", "unknown")
        _out(f"Infiniband device '{d}' port {p} status:")
        _out(f"\tdefault gid:\t {gid}")
        _out(f"\tbase lid:\t {hex(_int_attr(d, p, 'lid'))}")
        _out(f"\tsm lid:\t\t {hex(_int_attr(d, p, 'sm_lid'))}")
        _out(f"\tstate:\t\t {_pattr(d, p, 'state')}")
        _out(f"\tphys state:\t {_pattr(d, p, 'phys_state')}")
        _out(f"\trate:\t\t {_fmt_rate(num)} Gb/sec ({width} {speed})")
        _out(f"\tlink_layer:\t {_pattr(d, p, 'link_layer')}")
        _out()
    return 0


# --- mlnx_qos -------------------------------------------------------------------------------

_MLNX_QOS_USAGE = "Usage: mlnx_qos -i <interface> [options]"


def _qos_netdev_ok(netdev: str) -> bool:
    found = devstate.find_port_by_netdev(netdev)
    return bool(found and found[1].get("link_layer") == "Ethernet" and _driver_loaded())


def _list8(value: str, lo: int, hi: int, what: str) -> list[int] | str:
    items = value.split(",")
    if len(items) > 8:
        return f"Too many items for {what}"
    out = []
    for t in items:
        try:
            v = int(t)
        except ValueError:
            return f"Bad value for {what}: invalid literal for int() with base 10: '{t}'"
        if v < lo or v > hi:
            return f"Bad value for {what}: {v} is not in the range {lo}..{hi}"
        out.append(v)
    if len(out) != 8:
        return f"{what.lower()} list must have 8 items"
    return out


def _print_qos(q: dict) -> None:
    _out("DCBX mode: OS controlled")
    _out(f"Priority trust state: {q['trust']}")
    if q["trust"] == "dscp":
        _out("dscp2prio mapping:")
        per: dict[int, list[int]] = {}
        for d in sorted((int(k) for k in q["dscp2prio"]), reverse=True):
            per.setdefault(int(q["dscp2prio"][str(d)]), []).append(d)
        for prio in range(8):
            vals = "".join(f"{d:02d}," for d in per.get(prio, []))
            while vals:
                _out(f"\tprio:{prio} dscp:{vals[:24]}")
                vals = vals[24:]
    _out("default priority:")
    pfc = q["pfc"]
    if any(pfc):
        sizes = [130944, 130944] + [0] * 6
        p2b = [1 if on else 0 for on in pfc]
    else:
        sizes = [262016] + [0] * 7
        p2b = [0] * 8
    _out("Receive buffer size (bytes): " + "".join(f"{s}," for s in sizes) + "max_buffer_size=262016")
    _out(f"Cable len: {q['cable_len']}")
    _out("PFC configuration:")
    _out("\tpriority    0   1   2   3   4   5   6   7")
    _out("\tenabled     " + "".join(f"{v}   " for v in pfc))
    _out("\tbuffer      " + "".join(f"{v}   " for v in p2b))
    tc2up: dict[int, list[int]] = {}
    for up, tc in enumerate(q["prio_tc"]):
        tc2up.setdefault(int(tc), []).append(up)
    for tc in sorted(tc2up):
        tsa = q["tsa"][tc]
        msg = f"tc: {tc} ratelimit: unlimited, tsa: "
        msg += f"ets, bw: {q['bw'][tc]}%" if tsa == "ets" else tsa
        _out(msg)
        for up in tc2up[tc]:
            _out(f"\t priority:  {up}")


def mlnx_qos(argv: list[str]) -> int:
    opts: dict[str, list[str]] = {}
    names = {"-i": "intf", "--interface": "intf", "--trust": "trust", "-f": "pfc", "--pfc": "pfc",
             "--dscp2prio": "dscp2prio", "--cable_len": "cable_len", "-p": "prio_tc", "--prio_tc": "prio_tc",
             "-s": "tsa", "--tsa": "tsa", "-t": "tcbw", "--tcbw": "tcbw", "-d": "dcbx", "--dcbx": "dcbx"}
    i = 0
    while i < len(argv):
        a = argv[i]
        key, val = a, None
        if a.startswith("--") and "=" in a:
            key, val = a.split("=", 1)
        if key == "-a":
            i += 1
            continue
        if key not in names:
            _out("Bad arguments")
            _out(_MLNX_QOS_USAGE)
            return 1
        if val is None:
            if i + 1 >= len(argv):
                _out(_MLNX_QOS_USAGE)
                _out(f"mlnx_qos: error: {a} option requires an argument")
                return 2
            val = argv[i + 1]
            i += 1
        opts.setdefault(names[key], []).append(val)
        i += 1
    intf = (opts.get("intf") or [None])[-1]
    if not intf:
        _out("Interface name is required")
        _out(_MLNX_QOS_USAGE)
        return 1
    if not _qos_netdev_ok(intf):
        # what the real tool prints when DCB netlink fails for the interface (mlnx-tools mlnx_qos)
        _out("Priority trust state is not supported on your system")
        _out("Buffers commands are not supported on your system")
        _out("Rate limit is not supported on your system!")
        _out("ETS features are not supported on your system")
        return 1
    q = devstate.qos_state(intf)
    if "cable_len" in opts:
        try:
            q["cable_len"] = int(opts["cable_len"][-1])
        except ValueError:
            bad = opts["cable_len"][-1]
            _out(f"Bad value for cable_len: invalid literal for int() with base 10: '{bad}'")
            _out(_MLNX_QOS_USAGE)
            return 1
    if "pfc" in opts:
        res = _list8(opts["pfc"][-1], 0, 1, "PFC")
        if isinstance(res, str):
            _out(res)
            return 1
        q["pfc"] = res
    if "dscp2prio" in opts and "trust" in opts:
        _out("trust and dscp2prio commands cannot be used at the same time.")
        return 1
    for spec in opts.get("dscp2prio", []):
        if spec == "flush":
            q["dscp2prio"] = {str(d): 0 for d in range(64)}
            continue
        try:
            action, dscp_s, prio_s = spec.split(",")
            dscp, prio = int(dscp_s), int(prio_s)
            if action not in ("set", "del") or not 0 <= dscp <= 63 or not 0 <= prio <= 7:
                raise ValueError
        except ValueError:
            _out("Invalid dscp2prio command. Refer to the help.")
            return 1
        if action == "set":
            q["dscp2prio"][str(dscp)] = prio
        elif int(q["dscp2prio"].get(str(dscp), -1)) == prio:
            q["dscp2prio"][str(dscp)] = 0
    if "trust" in opts:
        trust = opts["trust"][-1]
        if trust not in ("dscp", "pcp"):
            _out("Invalid trust state command. Refer to the help.")
            return 1
        q["trust"] = trust
    if "tsa" in opts:
        items = opts["tsa"][-1].split(",")
        bad = [t for t in items if t not in ("strict", "ets", "vendor")]
        if bad:
            _out(f"('Bad TSA value: ', '{bad[0]}')")
            _out(_MLNX_QOS_USAGE)
            return 1
        if len(items) != 8:
            _out("tsa list must have 8 items")
            return 1
        q["tsa"] = items
    if "tcbw" in opts:
        res = _list8(opts["tcbw"][-1], 0, 100, "ETS BW")
        if isinstance(res, str):
            _out(res.replace("ets bw list", "tcbw list"))
            return 1
        if any(bw and q["tsa"][n] != "ets" for n, bw in enumerate(res)):
            _out("ETS BW for a strict/vendor TC must be 0")
            _out(_MLNX_QOS_USAGE)
            return 1
        q["bw"] = res
    if "prio_tc" in opts:
        res = _list8(opts["prio_tc"][-1], 0, 7, "UP => TC mapping")
        if isinstance(res, str):
            _out(res.replace("up => tc mapping list", "prio_tc list"))
            return 1
        q["prio_tc"] = res
    if any(k in opts for k in ("cable_len", "pfc", "dscp2prio", "trust", "tsa", "tcbw", "prio_tc")):
        devstate.save_qos_state(intf, q)
    _print_qos(q)
    return 0


# --- cma_roce_tos / cma_roce_mode -----------------------------------------------------------

def _dev_port_args(argv: list[str], letters: str) -> tuple[dict[str, str], str | None]:
    vals: dict[str, str] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if len(a) == 2 and a[0] in "-\u2013" and a[1] in letters and i + 1 < len(argv):
            vals[a[1]] = argv[i + 1]
            i += 2
            continue
        return vals, a
    return vals, None


def cma_roce_tos(argv: list[str]) -> int:
    vals, bad = _dev_port_args(argv, "dpt")
    if bad is not None:
        _out("Usage: cma_roce_tos -d <dev> [-p <port>] [-t <TOS>]")
        return 1
    dev = vals.get("d") or ((_devices() or [None])[0])
    port = int(vals.get("p", "1"))
    if not dev or devstate.find_hca(dev) is None or port not in _ports(dev):
        _out(f"Error: failed to find device {dev} port {port}" if dev else "Error: no RDMA device")
        return 1
    rel = f"kernel/config/rdma_cm/{dev}/ports/{port}/default_roce_tos"
    if "t" in vals:
        try:
            tos = int(vals["t"])
            if not 0 <= tos <= 255:
                raise ValueError
        except ValueError:
            _out(f"Error: invalid TOS value {vals['t']}")
            return 1
        devstate.sysfs(rel).parent.mkdir(parents=True, exist_ok=True)
        devstate.write_sysfs(rel, str(tos))
    _out(devstate.read_sysfs(rel, "0") or "0")
    return 0


def cma_roce_mode(argv: list[str]) -> int:
    vals, bad = _dev_port_args(argv, "dpm")
    if bad is not None or "d" not in vals:
        _out("Usage: cma_roce_mode -d <dev> -p <port> [-m <1|2>]")
        return 1
    dev = vals["d"]
    port = int(vals.get("p", "1"))
    if devstate.find_hca(dev) is None or port not in _ports(dev):
        _out(f"Error: failed to find device {dev} port {port}")
        return 1
    rel = f"kernel/config/rdma_cm/{dev}/ports/{port}/default_roce_mode"
    if "m" in vals:
        modes = {"1": "IB/RoCE v1", "2": "RoCE v2"}
        if vals["m"] not in modes:
            _out(f"Error: invalid RoCE mode {vals['m']} (use 1 or 2)")
            return 1
        devstate.sysfs(rel).parent.mkdir(parents=True, exist_ok=True)
        devstate.write_sysfs(rel, modes[vals["m"]])
    _out(devstate.read_sysfs(rel, hwctl.ROCE_MODE_DEFAULT) or hwctl.ROCE_MODE_DEFAULT)
    return 0


# --- perfquery / ibqueryerrors --------------------------------------------------------------

# (PMA field name, sysfs counter, width in bits of the non-extended PortCounters field)
_PMA = [
    ("SymbolErrorCounter", "symbol_error", 16),
    ("LinkErrorRecoveryCounter", "link_error_recovery", 8),
    ("LinkDownedCounter", "link_downed", 8),
    ("PortRcvErrors", "port_rcv_errors", 16),
    ("PortRcvRemotePhysicalErrors", "port_rcv_remote_physical_errors", 16),
    ("PortRcvSwitchRelayErrors", "port_rcv_switch_relay_errors", 16),
    ("PortXmitDiscards", "port_xmit_discards", 16),
    ("PortXmitConstraintErrors", "port_xmit_constraint_errors", 8),
    ("PortRcvConstraintErrors", "port_rcv_constraint_errors", 8),
    ("LocalLinkIntegrityErrors", "local_link_integrity_errors", 4),
    ("ExcessiveBufferOverrunErrors", "excessive_buffer_overrun_errors", 4),
    ("VL15Dropped", "VL15_dropped", 16),
]
_DATA = [
    ("PortXmitData", "port_xmit_data"), ("PortRcvData", "port_rcv_data"),
    ("PortXmitPkts", "port_xmit_packets"), ("PortRcvPkts", "port_rcv_packets"),
]
_EXT_DATA = [*_DATA,
             ("PortUnicastXmitPkts", "port_unicast_xmit_packets"),
             ("PortUnicastRcvPkts", "port_unicast_rcv_packets"),
             ("PortMulticastXmitPkts", "port_multicast_xmit_packets"),
             ("PortMulticastRcvPkts", "port_multicast_rcv_packets")]


def _pq(name: str, value: int | str) -> str:
    return f"{name + ':':.<33}{value}"


def _ib_ports() -> list[tuple[str, int]]:
    out = []
    for d in _devices() or []:
        for p in _ports(d):
            if _pattr(d, p, "link_layer") == "InfiniBand":
                out.append((d, p))
    return out


def _ctr(dev: str, port: int, name: str) -> int:
    return devstate.read_counter(dev, port, name)


#: The sysfs counters each optional group is derived from (what its reset clears in the emulation;
#: the real PMA resets the detail attribute alone, leaving PortRcvErrors/PortXmitDiscards -- an
#: approximation, docs/parsers.md).
_GROUP_SOURCES = {
    "PortRcvErrorDetails": ("port_rcv_errors",), "PortXmitDiscardDetails": ("port_xmit_discards",),
    "PortXmitDataSL": ("port_xmit_data",), "PortRcvDataSL": ("port_rcv_data",),
}


def _reset_counters(dev: str, port: int, only: tuple[str, ...] | None = None) -> None:
    """What `perfquery -R` / `-r` does to the port's PMA counters (hw_counters are not PMA's)."""
    base = devstate.sysfs(f"{devstate.port_dir(dev, port)}/counters")
    if base.is_dir():
        for counter in base.iterdir():
            if only is None or counter.name in only:
                counter.write_text("0\n")


# The optional counter groups perfquery reads with one flag each (perfquery(8); rdma-core
# infiniband-diags/perfquery.c): -X PortXmitDataSL, -S PortRcvDataSL, -D PortXmitDiscardDetails,
# -E PortRcvErrorDetails. Field names and order are libibmad fields.c's; the header is
# common_func's "# <Attribute> counters: Lid L port P" (no CapMask), then PortSelect and
# CounterSelect (the IB_PC_EXT_FIRST_F..IB_PC_EXT_XMT_BYTES_F fields).
_GROUP_FLAGS = {
    "-X": "PortXmitDataSL", "--xmtsl": "PortXmitDataSL",
    "-S": "PortRcvDataSL", "--rcvsl": "PortRcvDataSL",
    "-D": "PortXmitDiscardDetails", "--xmtdisc": "PortXmitDiscardDetails",
    "-E": "PortRcvErrorDetails", "--rcverr": "PortRcvErrorDetails",
}


def _group_fields(group: str, dev: str, port: int) -> list[tuple[str, int]]:
    """The counters of one optional group, from the port's sysfs counters.

    The IB spec (16.1.4.2/16.1.4.3) makes PortRcvErrors the sum of the PortRcvErrorDetails and
    PortXmitDiscards the sum of the PortXmitDiscardDetails. The emulation books every receive
    error as a local physical error (CRC: what a degraded cable produces) and every transmit
    discard as an inactive-port discard (what a port that went down produces); the other causes
    stay 0. The emulated perftest uses SL 0, so all data is on XmtDataSL0/RcvDataSL0 (4-octet
    words, like PortXmitData)."""
    if group == "PortRcvErrorDetails":
        return [("PortLocalPhysicalErrors", min(_ctr(dev, port, "port_rcv_errors"), 0xFFFF)),
                ("PortMalformedPktErrors", 0), ("PortBufferOverrunErrors", 0),
                ("PortDLIDMappingErrors", 0), ("PortVLMappingErrors", 0), ("PortLoopingErrors", 0)]
    if group == "PortXmitDiscardDetails":
        return [("PortInactiveDiscards", min(_ctr(dev, port, "port_xmit_discards"), 0xFFFF)),
                ("PortNeighborMTUDiscards", 0), ("PortSwLifetimeLimitDiscards", 0),
                ("PortSwHOQLifetimeLimitDiscards", 0)]
    xmit = group == "PortXmitDataSL"
    prefix, sysname = ("XmtDataSL", "port_xmit_data") if xmit else ("RcvDataSL", "port_rcv_data")
    total = min(_ctr(dev, port, sysname), (1 << 32) - 1)  # 32-bit fields
    return [(f"{prefix}{sl}", total if sl == 0 else 0) for sl in range(16)]


def perfquery(argv: list[str]) -> int:
    """perfquery [-x|-X|-S|-D|-E] [-a] [-r|-R] [-C CA] [-P PORT] [LID [PORT]]; -r resets after
    reading, -R only resets; -a sums the counters of all ports of the node (port 255)."""
    mode = "read"
    if any(a in ("-R", "--Reset_only") for a in argv):
        mode = "reset_only"
    elif any(a in ("-r", "--reset_after_read") for a in argv):
        mode = "reset_after"
    argv = [a for a in argv if a not in ("-R", "--Reset_only", "-r", "--reset_after_read")]
    return _perfquery(argv, mode)


def _perfquery(argv: list[str], mode: str) -> int:
    extended = any(a in ("-x", "--extended") for a in argv)
    all_ports = any(a in ("-a", "--all_ports") for a in argv)
    groups = [_GROUP_FLAGS[a] for a in argv if a in _GROUP_FLAGS]
    ca = None
    caport = None
    rest: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-C", "--Ca") and i + 1 < len(argv):
            ca, i = argv[i + 1], i + 2
            continue
        if a in ("-P", "--Port") and i + 1 < len(argv):
            caport, i = int(argv[i + 1]), i + 2
            continue
        if not a.startswith("-"):
            rest.append(a)
        i += 1
    ports = _ib_ports()
    if ca:
        ports = [(d, p) for d, p in ports if d == ca]
    if caport is not None:
        ports = [(d, p) for d, p in ports if p == caport]
    if not ports:
        _err(f"ibwarn: [{_pid()}] mad_rpc_open_port: can't open UMAD port ({ca or '(null)'}:{caport or 0})")
        _err(f"perfquery: iberror: failed: Failed to open '{ca or '(null)'}' port '{caport or 0}'")
        return 255
    dev, port = ports[0]
    lid = _int_attr(dev, port, "lid")
    if rest:
        want_lid = int(rest[0], 0)
        match = [(d, p) for d, p in _ib_ports() if _int_attr(d, p, "lid") == want_lid]
        if not match:
            _err(f"ibwarn: [{_pid()}] _do_madrpc: recv failed: Connection timed out")
            _err(f"ibwarn: [{_pid()}] mad_rpc: _do_madrpc failed; dport (Lid {want_lid})")
            _err(f"perfquery: iberror: [pid {_pid()}] main: failed: classportinfo query")
            return 255
        dev, port = match[0]
        lid = want_lid
        if len(rest) > 1:
            port = int(rest[1], 0)
            if port == 255:
                all_ports = True
    targets = [(dev, p) for p in _ports(dev)] if all_ports else [(dev, port)]
    only = tuple(n for g in groups for n in _GROUP_SOURCES[g]) if groups else None
    if mode == "reset_only":
        for d, p in targets:
            _reset_counters(d, p, only)
        return 0
    if mode == "reset_after":
        status = _perfquery(argv, "read")
        for d, p in targets:
            _reset_counters(d, p, only)
        return status
    shown = 255 if all_ports else port  # perfquery.c prints ALL_PORTS for -a

    def total(sysname: str) -> int:
        return sum(_ctr(d, p, sysname) for d, p in targets)

    if groups:
        for group in groups:
            _out(f"# {group} counters: Lid {lid} port {shown}")
            _out(_pq("PortSelect", shown))
            _out(_pq("CounterSelect", "0x0000"))
            sums: dict[str, int] = {}
            for d, p in targets:
                for name, value in _group_fields(group, d, p):
                    sums[name] = sums.get(name, 0) + value
            for name, value in sums.items():
                _out(_pq(name, value))
        return 0
    if extended:
        _out(f"# Port extended counters: Lid {lid} port {shown} (CapMask: 0x5A00 CapMask2: 0x0000002)")
        _out(_pq("PortSelect", shown))
        _out(_pq("CounterSelect", "0x0000"))
        for name, sysname in _EXT_DATA:
            _out(_pq(name, total(sysname)))
        _out(_pq("CounterSelect2", "0x00000000"))
        for name, sysname, _bits in _PMA:
            _out(_pq(name, total(sysname)))
        _out(_pq("PortXmitWait", total("port_xmit_wait")))
        _out(_pq("QP1Dropped", 0))
        return 0
    _out(f"# Port counters: Lid {lid} port {shown} (CapMask: 0x5A00)")
    _out(_pq("PortSelect", shown))
    _out(_pq("CounterSelect", "0x0000"))
    for name, sysname, bits in _PMA[:9]:
        _out(_pq(name, min(total(sysname), (1 << bits) - 1)))
    _out(_pq("CounterSelect2", "0x00"))
    for name, sysname, bits in _PMA[9:]:
        _out(_pq(name, min(total(sysname), (1 << bits) - 1)))
    for name, sysname in _DATA:
        _out(_pq(name, min(total(sysname), (1 << 32) - 1)))
    _out(_pq("PortXmitWait", min(total("port_xmit_wait"), (1 << 32) - 1)))
    return 0


def ibqueryerrors(argv: list[str]) -> int:
    ports = _ib_ports()
    if not ports:
        _err(f"ibwarn: [{_pid()}] mad_rpc_open_port: can't open UMAD port ((null):0)")
        _err(f"ibqueryerrors: iberror: [pid {_pid()}] main: failed: Failed to open '(null)' port '0'")
        return 255
    data = "--data" in argv
    by_dev: dict[str, list[int]] = {}
    for d, p in ports:
        by_dev.setdefault(d, []).append(p)
    bad_nodes = bad_ports = 0
    for d, plist in by_dev.items():
        header = False
        for p in plist:
            found = []
            for name, sysname, _bits in _PMA:
                v = _ctr(d, p, sysname)
                if v:
                    found.append(f" [{name} == {v}]")
            wait = _ctr(d, p, "port_xmit_wait")
            if wait:
                found.append(f" [PortXmitWait == {wait}]")
            if not found:
                continue
            if data:
                for name, sysname in _DATA:
                    v = _ctr(d, p, sysname)
                    if v:
                        found.append(f" [{name} == {v}]")
            if not header:
                _out(f'Errors for "{_attr(d, "node_desc", d)}"')
                header = True
                bad_nodes += 1
            _out(f"   GUID 0x{_port_guid(d, p).lstrip('0') or '0'} port {p}:{''.join(found)}")
            bad_ports += 1
    _out()
    _out(f"## Summary: {len(by_dev)} nodes checked, {bad_nodes} bad nodes found")
    _out(f"##          {len(ports)} ports checked, {bad_ports} ports have errors beyond threshold")
    _out("## Thresholds: ")
    _out("## Suppressed:")
    return 0


# --- openibd --------------------------------------------------------------------------------

def _ok_line(msg: str) -> None:
    _out(f"{msg:<59}[  OK  ]")


def _resync() -> None:
    hwctl.sync()


def openibd(argv: list[str]) -> int:
    action = argv[0] if argv else ""
    flag = devstate.path(DRIVER_STOPPED)
    if action in ("stop", "restart", "force-restart"):
        devstate.reset_qos()
        flag.parent.mkdir(parents=True, exist_ok=True)
        flag.write_text("stopped\n")
        services.unload_dependents()  # nvidia_peermem & co. go with ib_core
        _ok_line("Unloading HCA driver:")
        if action == "stop":
            return 0
    if action in ("start", "restart", "force-restart"):
        if flag.exists():
            flag.unlink()
        from . import dkms  # a DKMS stack whose modules cannot load for uname -r (emul/dkms.py)
        why = dkms.stack_refusal()
        if why:
            _err(why)
            _out(f"{'Loading HCA driver and Access Layer:':<59}[FAILED]")
            return 1
        devstate.reset_qos()
        hwctl.reset_knobs()
        _resync()
        _ok_line("Loading HCA driver and Access Layer:")
        return 0
    if action == "status":
        if not _driver_loaded():
            _out()
            _out("  HCA driver is not loaded")
            _out()
            return 3
        _out()
        _out("  HCA driver loaded")
        _out()
        ipoib = [p.get("netdev") for h in devstate.hcas() for p in h.get("ports", [])
                 if p.get("link_layer") != "Ethernet" and p.get("netdev")]
        eth = [p.get("netdev") for h in devstate.hcas() for p in h.get("ports", [])
               if p.get("link_layer") == "Ethernet" and p.get("netdev")]
        _out("Configured IPoIB devices:")
        _out(" ".join(ipoib))
        _out()
        _out("Currently active IPoIB devices:")
        for n in ipoib:
            _out(n)
        _out("Configured Mellanox EN devices:")
        _out(" ".join(eth))
        _out()
        _out("Currently active Mellanox devices:")
        for n in eth:
            _out(n)
        _out()
        _out("The following OFED modules are loaded:")
        _out()
        for mod in ("rdma_ucm", "rdma_cm", "ib_ipoib", "mlx5_core", "mlx5_ib", "ib_uverbs", "ib_umad",
                    "ib_cm", "ib_core", "mlxfw"):
            _out(f"  {mod}")
        _out()
        return 0
    _out("Usage: /etc/init.d/openibd {start|stop|restart|status}")
    return 1
