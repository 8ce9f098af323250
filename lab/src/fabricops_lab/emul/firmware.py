"""Emulated NVIDIA MFT tools for the lab's NICs: ``mlxconfig``, ``mlxfwmanager``, ``mlxfwreset``.

State (SPEC-20 C, docs/lab-device-contract.md "NIC firmware (MFT)"):
``/var/lib/emulated-hw/firmware/<bdf>.json`` = ``{"burned", "running", "next", "current",
"defaults", "roms", "psid", "hw_fw_ver"}``, written by these tools and the lab's faults; created
from hardware.json ``hcas[]`` when absent (``burned = running = fw_ver``, every setting at its
default). When hardware.json's ``fw_ver`` changes (the ``wrong-firmware`` fault swaps the silicon
and its clear swaps it back), the state follows it. ``mlxconfig set`` writes ``next``;
``mlxfwmanager -u`` writes ``burned``; ``mlxfwreset reset`` (and a power cycle of the lab host,
:func:`power_cycle_dir`) makes ``running = burned`` and ``current = next``. ibstat, ibv_devinfo and
sysfs ``fw_ver`` report the running version (``devstate.fw_running``).

Formats and refusals, with their public sources:
- ``mlxconfig`` query/set tables, the ``*`` mark and its footnote, the prompt ``Apply new
  Configuration? (y/n) [n] :``, ``Applying... Done!`` and ``-I- Please reboot machine to load new
  configurations.``: the captures under tests/fixtures/mlxconfig/ and mstflint
  ``mlxconfig/mlxcfg_ui.cpp`` (``setDevCfgWithParams``, ``askUser``: anything but y/yes is
  ``-E- Aborted by user.``, status MLX_CFG_ABORTED = 2; errors are MLX_CFG_ERROR = 3).
- ``-E- Unknown Parameter: KEY`` (MFT 4.37 as quoted in a public BlueField guide; mstflint's
  ``mlxcfg_generic_commander.cpp`` prints it without the colon), ``-E- Unknown value X``
  (mstflint ``mlxcfg_param.cpp`` ``EnumParamValue::parseValue``), ``-E- Failed to open the
  device`` (``mlxcfg_commander.cpp``).
- ``mlxfwmanager`` blocks: tests/fixtures/mlxfwmanager/ (``FW (Running)`` only while burned !=
  running); the update lines (``Device #1: Updating FW ...``, ``FSMST_INITIALIZE -   OK``,
  ``Restart needed for updates to take effect.``) from a public mlxup run on two ConnectX-7.
  An image whose PSID is not the device's is never burned: the block says ``Status: No matching
  image found`` and the tool exits 1 (the exit status is not in a public capture: fail closed).
  An older image is not burned without ``--force`` (no downgrade by accident).
- ``mlxfwreset``: the query rows of tests/fixtures/mlxfwreset/; ``The reset level for device,
  DEV is:``, ``Continue with reset?[y/N]``, the ``-I- ... -Done`` steps and ``-I- FW was loaded
  successfully.``: mstflint ``small_utils/mstfwreset.py`` and public ConnectX runs; errors are
  ``-E- <reason>.`` with exit 1 (``mstfwreset.py`` ``__main__``).
Stdlib only; relative imports (the package is copied into lab hosts).
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from . import devstate

# hardware.json hca_type -> (Device type as MFT prints it, part number, mst device name)
DEVICE_TYPES: dict[str, tuple[str, str | None, str]] = {
    # ConnectX-7 NDR single-port OSFP: PSID MT_0000000838 (tests/fixtures/mlxfwmanager/cx7_*)
    "MT4129": ("ConnectX7", "MCX75310AAS-NEA_Ax", "mt4129_pciconf"),
    # BlueField-3 B3220: PSID MT_0000000884, part as a public mlxfwmanager capture prints it
    "MT41692": ("BlueField3", "900-9D3B6-00CV-A_Ax", "mt41692_pciconf"),
    # no public capture pairs the lab's PSIDs of these with a part number: printed as N/A
    "MT4123": ("ConnectX6", None, "mt4123_pciconf"),
    "MT4125": ("ConnectX6DX", None, "mt4125_pciconf"),
    "MT4131": ("ConnectX8", None, "mt4131_pciconf"),
}
#: PXE / UEFI ROM versions (the 28.43.1014 image of a public flint query: UEFI 14.36.16, PXE 3.7.500)
DEFAULT_ROMS = {"PXE": "3.7.0500", "UEFI": "14.36.0016"}

IMAGE_MAGIC = "EMULATED-MLNX-FW-IMAGE 1"

BOOL = {"False": 0, "True": 1}
# name -> (kind, allowed, default). kind "bool" | "enum" (allowed: name -> value) | "int" (allowed:
# (lo, hi)). Names, value spellings and defaults as the ConnectX query captures print them
# (tests/fixtures/mlxconfig/cx5_vpi_full_query_rst_indented.txt): ATS/PCI settings for GPUDirect,
# the RoCE congestion-control knobs, SR-IOV, the port link type.
GLOBAL_PARAMS: dict[str, tuple[str, Any, int]] = {
    "NUM_OF_VFS": ("int", (0, 127), 0),
    "SRIOV_EN": ("bool", BOOL, 0),
    "PCI_WR_ORDERING": ("enum", {"per_mkey": 0, "force_relax": 1}, 0),
    "ATS_ENABLED": ("bool", BOOL, 0),
    "ADVANCED_PCI_SETTINGS": ("bool", BOOL, 0),
    "MAX_ACC_OUT_READ": ("int", (0, 255), 0),
    "RDMA_SELECTIVE_REPEAT_EN": ("bool", BOOL, 0),
    "EXP_ROM_UEFI_x86_ENABLE": ("bool", BOOL, 1),
    "EXP_ROM_PXE_ENABLE": ("bool", BOOL, 1),
}
PORT_PARAMS: dict[str, tuple[str, Any, int]] = {
    "LINK_TYPE_P{n}": ("enum", {"IB": 1, "ETH": 2}, 1),
    "ROCE_CC_PRIO_MASK_P{n}": ("int", (0, 255), 255),
    "CNP_DSCP_P{n}": ("int", (0, 63), 48),
    "CNP_802P_PRIO_P{n}": ("int", (0, 7), 6),
}
#: mlxfwreset query rows of a ConnectX NIC (the BlueField-3 capture's wording; ARM rows dropped)
RESET_LEVELS = [
    (0, 'Driver, PCI link, network link will remain up ("live-Patch")', False),
    (3, "Driver restart and PCI reset", True),
    (4, "Warm Reboot", True),
]
DEFAULT_LEVEL = 3
RESET_TYPES = [
    (0, "Full chip reset", True), (1, "Phy-less reset (keep network port active during reset)", False),
]
RESET_SYNCS = [(0, "Tool is the owner", True), (1, "Driver is the owner", True)]

_VERSION = re.compile(r"^\d{1,3}\.\d{1,4}\.\d{1,5}$")


class ToolError(Exception):
    """A refusal: the message (printed as is) and the tool's exit status."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _prompt(question: str) -> bool:
    sys.stdout.write(question)
    sys.stdout.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


# --- the parameter table --------------------------------------------------------------------------

def params_for(hca: dict[str, Any]) -> dict[str, tuple[str, Any, int]]:
    """The parameters this device has: the global ones and the per-port ones of its ports."""
    table = dict(GLOBAL_PARAMS)
    for port in hca.get("ports") or [{"port": 1}]:
        n = int(port.get("port", 1))
        for name, (kind, allowed, default) in PORT_PARAMS.items():
            if name.startswith("LINK_TYPE"):
                default = 2 if port.get("link_layer") == "Ethernet" else 1
            table[name.format(n=n)] = (kind, allowed, default)
    return table


def render(spec: tuple[str, Any, int], value: int) -> str:
    """A stored value as mlxconfig prints it: 'True(1)', 'IB(1)', '48'."""
    kind, allowed, _ = spec
    if kind == "int":
        return str(value)
    name = next((k for k, v in allowed.items() if v == value), None)
    return f"{name}({value})" if name is not None else str(value)


def parse_value(spec: tuple[str, Any, int], text: str) -> int:
    """A value as ``set KEY=VALUE`` takes it (name in any case, or its number) -> stored int."""
    kind, allowed, _ = spec
    raw = text.strip()
    number: int | None = None
    if re.fullmatch(r"0[xX][0-9a-fA-F]{1,8}", raw):
        number = int(raw, 16)
    elif re.fullmatch(r"\d{1,10}", raw):
        number = int(raw)
    if kind == "int":
        lo, hi = allowed
        if number is None or not lo <= number <= hi:
            raise ToolError(f"-E- Unknown value {raw}", 3)
        return number
    if number is not None and number in allowed.values():
        return number
    for name, v in allowed.items():
        if name.lower() == raw.lower():
            return v
    raise ToolError(f"-E- Unknown value {raw}", 3)


# --- state ----------------------------------------------------------------------------------------

def state_rel(bdf: str) -> str:
    return f"{devstate.FIRMWARE_DIR}/{bdf}.json"


def initial_state(hca: dict[str, Any]) -> dict[str, Any]:
    table = params_for(hca)
    defaults = {k: spec[2] for k, spec in table.items()}
    fw = hca.get("fw_ver", "")
    return {
        "psid": hca.get("psid") or hca.get("board_id"),
        "burned": fw, "running": fw, "hw_fw_ver": fw,
        "defaults": defaults, "current": dict(defaults), "next": dict(defaults),
        "roms": dict(DEFAULT_ROMS), "roms_burned": dict(DEFAULT_ROMS),
    }


def follow_hardware(state: dict[str, Any] | None, hca: dict[str, Any]) -> dict[str, Any]:
    """The state for this device: created when absent, its versions re-read from hardware.json when
    hardware.json's fw_ver changed since (the silicon was swapped); settings are kept."""
    if not isinstance(state, dict) or "next" not in state:
        return initial_state(hca)
    fw = hca.get("fw_ver", "")
    if state.get("hw_fw_ver") != fw:
        state.update(burned=fw, running=fw, hw_fw_ver=fw)
    fresh = initial_state(hca)
    for key in ("defaults", "current", "next"):
        merged = dict(fresh[key])
        merged.update({k: v for k, v in (state.get(key) or {}).items() if k in merged})
        state[key] = merged
    state.setdefault("roms", dict(DEFAULT_ROMS))
    state.setdefault("roms_burned", dict(state["roms"]))
    state.setdefault("psid", fresh["psid"])
    return state


def load_state(hca: dict[str, Any]) -> dict[str, Any]:
    try:
        state = json.loads(devstate.path(state_rel(hca["pci"])).read_text())
    except (OSError, ValueError):
        state = None
    return follow_hardware(state, hca)


def save_state(hca: dict[str, Any], state: dict[str, Any]) -> None:
    target = devstate.path(state_rel(hca["pci"]))
    target.parent.mkdir(parents=True, exist_ok=True)
    devstate.write_json_atomic(target, state)


def power_cycle(state: dict[str, Any]) -> dict[str, Any]:
    """What a cold boot (or mlxfwreset) does: the burned image runs, next-boot settings apply."""
    state["running"] = state["burned"]
    state["current"] = dict(state["next"])
    state["roms"] = dict(state.get("roms_burned") or state.get("roms") or DEFAULT_ROMS)
    return state


def power_cycle_dir(firmware_dir) -> int:
    """Apply :func:`power_cycle` to every state file in a host's firmware directory (the lab host
    restarts: hosts.prepare_host). Returns how many devices it touched."""
    from pathlib import Path

    count = 0
    d = Path(firmware_dir)
    if not d.is_dir():
        return 0
    for f in sorted(d.glob("*.json")):
        try:
            state = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(state, dict) and "burned" in state and "next" in state:
            devstate.write_json_atomic(f, power_cycle(state))
            count += 1
    return count


# --- devices --------------------------------------------------------------------------------------

def card_functions(hca: dict[str, Any]) -> list[dict[str, Any]]:
    """Every HCA on the same adapter as HCA: the PCI functions of one domain:bus:device."""
    card = str(hca.get("pci", "")).rsplit(".", 1)[0]
    return [h for h in devstate.hcas() if str(h.get("pci", "")).rsplit(".", 1)[0] == card] or [hca]


def _short_bdf(bdf: str) -> str:
    return bdf.split(":", 1)[1] if bdf.startswith("0000:") else bdf


def mst_name(hca: dict[str, Any], hcas: list[dict[str, Any]]) -> str:
    base = DEVICE_TYPES.get(hca.get("hca_type", ""), ("", None, "mt4129_pciconf"))[2]
    same = [h for h in hcas if DEVICE_TYPES.get(h.get("hca_type", ""), ("", None, ""))[2] == base]
    return f"/dev/mst/{base}{same.index(hca)}"


def find_device(spec: str) -> dict[str, Any] | None:
    """-d as MFT takes it: a PCI address (0000:41:00.0 or 41:00.0), an RDMA device (mlx5_0) or
    an mst device (/dev/mst/mt4129_pciconf0)."""
    hcas = devstate.hcas()
    s = spec.strip().lower()
    for hca in hcas:
        bdf = str(hca.get("pci", "")).lower()
        if s in (bdf, _short_bdf(bdf), hca["name"].lower(), mst_name(hca, hcas)):
            return hca
    return None


def _device_or_fail(spec: str | None, message: str, status: int) -> dict[str, Any]:
    hca = find_device(spec) if spec else None
    if hca is None:
        raise ToolError(message, status)
    return hca


def device_type(hca: dict[str, Any]) -> str:
    return DEVICE_TYPES.get(hca.get("hca_type", ""), ("ConnectX7", None, ""))[0]


def part_number(hca: dict[str, Any]) -> str | None:
    return DEVICE_TYPES.get(hca.get("hca_type", ""), ("", None, ""))[1]


# --- mlxconfig ------------------------------------------------------------------------------------

def _opening(hca: dict[str, Any], dev: str) -> None:
    _out()
    _out("Device #1:")
    _out("----------")
    _out()
    _out(f"{'Device type:':<16}{device_type(hca)}")
    _out(f"{'Name:':<16}{part_number(hca) or 'N/A'}")
    _out(f"{'Description:':<16}{'N/A'}")
    _out(f"{'Device:':<16}{dev}")
    _out()


def _row(mark: str, name: str, values: list[str]) -> str:
    return (f"{mark:<9}{name:<36}" + "".join(f"{v:<15} " for v in values)).rstrip()


def _header(columns: list[str]) -> str:
    return (f"{'Configurations:':<45}" + "".join(f"{c:<15} " for c in columns)).rstrip()


def mlxconfig(argv: list[str]) -> int:
    try:
        return _mlxconfig(argv)
    except ToolError as exc:
        _out(str(exc))
        return exc.status


def _mlxconfig(argv: list[str]) -> int:
    dev: str | None = None
    yes = extended = False
    rest: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-d", "--dev") and i + 1 < len(argv):
            dev = argv[i + 1]
            i += 2
            continue
        if a in ("-y", "--yes"):
            yes = True
        elif a in ("-e", "--enable_verbosity"):
            extended = True
        else:
            rest.append(a)
        i += 1
    if not rest:
        raise ToolError("-E- No command given (use q|query, s|set)", 3)
    cmd, args = rest[0], rest[1:]
    if dev is None:
        raise ToolError("-E- Failed to open the device", 3)
    hca = _device_or_fail(dev, "-E- Failed to open the device", 3)
    state = load_state(hca)
    table = params_for(hca)
    if cmd in ("q", "query"):
        return _query(hca, dev, state, table, args, extended)
    if cmd in ("s", "set"):
        return _set(hca, dev, state, table, args, yes)
    raise ToolError(f"-E- Unknown command: {cmd}", 3)


def _query(hca, dev, state, table, keys: list[str], extended: bool) -> int:
    _opening(hca, dev)
    columns = ["Default", "Current", "Next Boot"] if extended else ["Next Boot"]
    _out(_header(columns))
    names = keys or list(table)
    for key in names:
        if key not in table:
            raise ToolError(f"-E- Unknown Parameter: {key}", 3)
    differ = False
    for key in names:
        spec = table[key]
        d, c, n = state["defaults"][key], state["current"][key], state["next"][key]
        mark = "*" if extended and (n != d or n != c) else ""
        differ = differ or bool(mark)
        vals = [render(spec, d), render(spec, c), render(spec, n)] if extended else [render(spec, n)]
        _out(_row(mark, key, vals))
    if differ:
        _out("The '*' shows parameters with next value different from default/current value.")
    return 0


def _set(hca, dev, state, table, pairs: list[str], yes: bool) -> int:
    if not pairs:
        raise ToolError("-E- No parameters to set were given", 3)
    _opening(hca, dev)
    _out(_header(["Next Boot", "New"]))
    wanted: dict[str, int] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in table:
            raise ToolError(f"-E- Unknown Parameter: {key}", 3)
        wanted[key] = parse_value(table[key], value)
    for key, value in wanted.items():
        _out(_row("", key, [render(table[key], state["next"][key]), render(table[key], value)]))
    question = "\n Apply new Configuration? (y/n) [n] : "
    if yes:
        _out(question + "y")
    elif not _prompt(question):
        raise ToolError("-E- Aborted by user.", 2)
    state["next"].update(wanted)
    save_state(hca, state)
    _out("Applying... Done!")
    _out("-I- Please reboot machine to load new configurations.")
    return 0


# --- images ---------------------------------------------------------------------------------------

def image_text(psid: str, version: str, dev_type: str, part: str | None, roms: dict[str, str]) -> str:
    """The emulated image file: a header line, then key=value lines (what ``-i`` reads)."""
    lines = [IMAGE_MAGIC, f"psid={psid}", f"fw={version}", f"device_type={dev_type}",
             f"part_number={part or 'N/A'}", f"pxe={roms['PXE']}", f"uefi={roms['UEFI']}"]
    return "\n".join(lines) + "\n"


def read_image(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(65536)
    except OSError:
        raise ToolError(f"-E- Failed to open image file {path}", 1) from None
    lines = text.splitlines()
    if not lines or lines[0].strip() != IMAGE_MAGIC:
        raise ToolError(f"-E- {path} is not a valid firmware image", 1)
    out = dict(ln.split("=", 1) for ln in lines[1:] if "=" in ln)
    if not out.get("psid") or not _VERSION.match(out.get("fw", "")):
        raise ToolError(f"-E- {path} is not a valid firmware image", 1)
    return out


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".")) if _VERSION.match(v or "") else (0,)


# --- mlxfwmanager ---------------------------------------------------------------------------------

def _block(
    n: int, hca: dict[str, Any], state: dict[str, Any], image: dict[str, str] | None, status: str | None
) -> None:
    _out(f"Device #{n}:")
    _out("----------")
    _out()
    _out(f"  {'Device Type:':<18}{device_type(hca)}")
    _out(f"  {'Part Number:':<18}{part_number(hca) or 'N/A'}")
    _out(f"  {'Description:':<18}N/A")
    _out(f"  {'PSID:':<18}{state['psid']}")
    _out(f"  {'PCI Device Name:':<18}{hca['pci']}")
    guid = str(hca.get("node_guid", "")).replace(":", "").removeprefix("0x")
    if guid:
        _out(f"  {'Base GUID:':<18}{guid}")
    _out(f"  {'Versions:':<18}{'Current':<15}Available")
    match = image is not None and image.get("psid") == state["psid"]
    avail = image["fw"] if match else "N/A"
    _out(f"     {'FW':<15}{state['burned']:<15}{avail}")
    if state["running"] != state["burned"]:
        _out(f"     {'FW (Running)':<15}{state['running']:<15}N/A")
    for rom in ("PXE", "UEFI"):
        ra = image.get(rom.lower(), "N/A") if match and image else "N/A"
        _out(f"     {rom:<15}{state['roms_burned'].get(rom, 'N/A'):<15}{ra}")
    _out()
    if status:
        _out(f"  {'Status:':<18}{status}")
        _out()


def mlxfwmanager(argv: list[str]) -> int:
    try:
        return _mlxfwmanager(argv)
    except ToolError as exc:
        _out(str(exc))
        return exc.status


def _mlxfwmanager(argv: list[str]) -> int:
    dev = image_path = None
    update = yes = force = False
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-d", "--dev") and i + 1 < len(argv):
            dev, i = argv[i + 1], i + 2
            continue
        if a in ("-i", "--image") and i + 1 < len(argv):
            image_path, i = argv[i + 1], i + 2
            continue
        if a in ("-u", "--update"):
            update = True
        elif a in ("-y", "--yes"):
            yes = True
        elif a in ("-f", "--force"):
            force = True
        elif a not in ("--query", "-q"):
            raise ToolError(f"-E- Unknown option: {a}", 1)
        i += 1
    no_dev = "-E- No devices found or specified, mst might be stopped, run 'mst start' to load MST modules"
    if dev is not None:
        devices = [_device_or_fail(dev, no_dev, 1)]
    else:
        devices = list(devstate.hcas())
        if not devices:
            raise ToolError(no_dev, 1)
    image = read_image(image_path) if image_path else None
    _out("Querying Mellanox devices firmware ...")
    _out()
    todo = []
    rc = 0
    for n, hca in enumerate(devices, 1):
        state = load_state(hca)
        status = None
        if image is not None:
            if image["psid"] != state["psid"]:
                status = "No matching image found"
                rc = 1
            elif _vkey(image["fw"]) > _vkey(state["burned"]) or (force and image["fw"] != state["burned"]):
                status = "Update required" if not force else "Forced update required"
                todo.append((n, hca, state))
            else:
                status = "Up to date"
        _block(n, hca, state, image, status)
    if not update or not todo:
        if update and image is not None and rc == 0:
            _out("---------")
            _out("All listed device(s) firmware images are up to date.")
        return rc
    _out("---------")
    _out(f"Found {len(todo)} device(s) requiring firmware update...")
    _out()
    if yes:
        _out("Perform FW update? [y/N]: y")
    elif not _prompt("Perform FW update? [y/N]: "):
        raise ToolError("-E- Aborted by user.", 1)
    for n, hca, state in todo:
        _out(f"Device #{n}: Updating FW ...     ")
        _out("FSMST_INITIALIZE -   OK          ")
        _out("Writing Boot image component -   OK          ")
        _out("Done")
        state["burned"] = image["fw"]
        state["roms_burned"] = {"PXE": image.get("pxe", "N/A"), "UEFI": image.get("uefi", "N/A")}
        save_state(hca, state)
    _out()
    _out("Restart needed for updates to take effect.")
    return rc


# --- mlxfwreset -----------------------------------------------------------------------------------

def _reset_rows(rows: list[tuple[int, str, bool]], default: int) -> None:
    for n, text, ok in rows:
        mark = "-Not Supported"
        if ok:
            mark = "-Supported     (default)" if n == default else "-Supported"
        _out(f"{n}: {text:<62}{mark}")


def mlxfwreset(argv: list[str]) -> int:
    try:
        return _mlxfwreset(argv)
    except ToolError as exc:
        _out(str(exc))
        return exc.status


def _mlxfwreset(argv: list[str]) -> int:
    dev = None
    yes = False
    level: int | None = None
    cmd = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-d", "--device") and i + 1 < len(argv):
            dev, i = argv[i + 1], i + 2
            continue
        if a in ("-l", "--level") and i + 1 < len(argv):
            if not argv[i + 1].isdigit():
                raise ToolError(f"-E- argument -l/--level: invalid choice: '{argv[i + 1]}'.", 1)
            level, i = int(argv[i + 1]), i + 2
            continue
        if a.startswith("-l") and a[2:].isdigit():
            level = int(a[2:])
        elif a in ("-y", "--yes"):
            yes = True
        elif a in ("q", "query", "r", "reset"):
            cmd = a[0]
        else:
            raise ToolError(f"-E- Unknown argument: {a}.", 1)
        i += 1
    if cmd is None:
        raise ToolError("-E- No command given (query or reset).", 1)
    if dev is None:
        raise ToolError("-E- Please specify a device (-d|--device).", 1)
    hca = _device_or_fail(dev, f"-E- Failed to open device: {dev}.", 1)
    if cmd == "q":
        _out("Reset-levels:")
        _reset_rows(RESET_LEVELS, DEFAULT_LEVEL)
        _out()
        _out("Reset-types (relevant only for reset-levels 3,4):")
        _reset_rows(RESET_TYPES, 0)
        _out()
        _out("Reset-sync (relevant only for reset-level 3):")
        _reset_rows(RESET_SYNCS, 1)
        return 0
    chosen = DEFAULT_LEVEL if level is None else level
    ok = {n: s for n, _t, s in RESET_LEVELS}
    if not ok.get(chosen):
        raise ToolError(
            f"-E- Reset-level '{chosen}' is not supported in the current state of this device.", 1
        )
    text = next(t for n, t, _s in RESET_LEVELS if n == chosen)
    _out(f"The reset level for device, {dev} is:")
    _out()
    _out(f"{chosen}: {text}")
    if yes:
        _out("Continue with reset?[y/N] y")
    elif not _prompt("Continue with reset?[y/N] "):
        raise ToolError("-E- Aborted by user.", 1)
    for step in ("Sending Reset Command To Fw", "Stopping Driver", "Resetting PCI", "Starting Driver"):
        _out(f"-I- {step:<40}-Done")
    _out(f"-I- {'Restarting MST':<40}-Skipped")
    # The reset is the card's, not the function's: the firmware reloads once for every PCI function
    # of the adapter (a dual-port card's .0 and .1), as a cold boot does (MFT manual, mlxfwreset:
    # "the reset is applied to the device", and the driver restarts on all its functions).
    for card_fn in card_functions(hca):
        state = power_cycle(load_state(card_fn))
        save_state(card_fn, state)
        # the driver restarted: the running firmware shows in sysfs, volatile QoS is back at defaults
        rel = f"class/infiniband/{card_fn['name']}/fw_ver"
        if devstate.sysfs(rel).exists():
            devstate.write_sysfs(rel, state["running"])
    devstate.reset_qos()
    _out("-I- FW was loaded successfully.")
    return 0
