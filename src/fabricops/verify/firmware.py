"""NIC firmware, DKMS and Secure Boot checks (issue 20; docs/verify.md "NIC firmware and DKMS").

One probe per host (:func:`probe_command`, run as root by verify's become) prints sections
``@@fabricops KEY`` ... ``@@rc N``:

- per RDMA device (``/sys/class/infiniband/DEV/device`` -> its PCI function, ``@@hca DEV BDF``):
  ``mlxconfig -d BDF -e q`` (Default/Current/Next Boot values; ``fabricops.parsers.mlxconfig``);
- ``mlxfwmanager --query`` (PSID, burned and running firmware; ``fabricops.parsers.mlxfwmanager``);
- ``uname -r``, ``ls -1 /boot`` (the ``vmlinuz-*`` kernels: the next boot's is the newest,
  ``fabricops.doca.next_boot_kernel``), ``dkms status`` (``fabricops.parsers.dkms``; the gaps:
  ``fabricops.doca.dkms_gaps``, the stack's modules ``fabricops.doca.stack_dkms_modules``);
- ``/sys/firmware/efi`` present or not, ``mokutil --sb-state``, ``/var/lib/dkms/mok.pub`` present or not,
  ``mokutil --test-key /var/lib/dkms/mok.pub`` (``fabricops.parsers.mokutil``) and
  ``modinfo -F signer mlx5_core``.

What is expected comes from the inventory (:func:`expect_from_hostvars`): the nic_firmware role's
``nic_firmware_presets/config/device_config/devices/versions`` and the mlnx_ofed role's
``mlnx_ofed_install_method`` (``doca``: the kernel modules are DKMS-built) and
``mlnx_ofed_dkms_kernels``. A check is SKIP (not applicable, with the reason) when the inventory
declares nothing for it; a host that declares state and whose tool is missing or whose output is
unreadable is ERROR (could not check: failing closed), never a pass.

The judging functions (``judge_*``) are pure and return :class:`fabricops.result.Result` s (the one
verdict type); verify adds them to its check results (:func:`evaluate`) and ``fabricops diagnose``
words the failed ones as findings (:func:`problems`): one home for each rule.
"""

from __future__ import annotations

import importlib
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricops.errors import FabricopsError, ParseError
from fabricops.result import ERROR, FAIL, PASS, SKIP, Result

FW_CHECKS = ("nic_fw_reset_pending", "nic_fw_config", "nic_fw_version", "dkms_modules", "secure_boot_signing")
PROBE_KEY = "fw_probe"
#: the dkms signing key dkms 3 generates on its first build (dkms(8), ``mok_signing_key``/``mok_certificate``)
MOK_PUB = "/var/lib/dkms/mok.pub"
DEFAULT_DKMS_KERNELS = ("running", "next")
DKMS_METHODS = ("doca",)

REMEDY = {
    "config": "run playbooks/firmware.yml (role nic_firmware) to set it, with nic_firmware_allow_reset: true "
    "to activate it",
    "reset": "run playbooks/firmware.yml with nic_firmware_allow_reset: true (mlxfwreset; or "
    "nic_firmware_reset_method: reboot with nic_firmware_allow_reboot: true)",
    "update": "run playbooks/firmware.yml with nic_firmware_allow_update: true (burns the pinned image of "
    "nic_firmware_images) and nic_firmware_allow_reset: true",
    "mft": "install MFT (the mft package of MLNX_OFED / DOCA-Host: playbooks/ofed.yml)",
    "dkms": "run playbooks/ofed.yml (role mlnx_ofed builds the DKMS modules: kernel headers, then "
    "dkms autoinstall -k KERNEL)",
    "enroll": "run playbooks/ofed.yml with mlnx_ofed_secure_boot_enroll: true and mlnx_ofed_mok_password "
    "(queues the DKMS key for MOK enrollment), then confirm it in MokManager at the next boot",
    "confirm": "reboot the host and confirm 'Enroll MOK' in MokManager at the console with the password of "
    "mlnx_ofed_mok_password",
    "sign": "run playbooks/ofed.yml so the DKMS modules are rebuilt and signed with " + MOK_PUB,
}


# --- expectations ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FirmwareExpect:
    """What the inventory declares about NIC firmware and the DKMS-built driver stack."""

    presets: Any = ()
    config: Any = field(default_factory=dict)
    device_config: Any = field(default_factory=dict)
    devices: tuple[str, ...] = ()
    versions: Any = field(default_factory=dict)
    install_method: str = "tarball"
    dkms_kernels: tuple[str, ...] = DEFAULT_DKMS_KERNELS
    ofed_state_dir: str | None = None  #: mlnx_ofed_state_dir (where the role marks a queued MOK enrollment)
    #: None: the stack's (fabricops.doca.stack_dkms_modules: mlnx-ofed-kernel + the optional ones dkms lists)
    dkms_modules: tuple[str, ...] | None = None

    @property
    def config_declared(self) -> bool:
        return bool(self.presets or self.config or self.device_config)

    @property
    def fw_declared(self) -> bool:
        return self.config_declared or bool(self.versions)

    @property
    def dkms(self) -> bool:
        return self.install_method in DKMS_METHODS


def expect_from_hostvars(hostvars: Mapping[str, Any]) -> FirmwareExpect:
    """The nic_firmware (D1) and mlnx_ofed DKMS (D2) variables of a host, as written."""

    def seq(v: Any, default: Sequence[str] = ()) -> tuple[str, ...]:
        if v is None:
            return tuple(default)
        if isinstance(v, str):
            return (v,)
        return tuple(str(x) for x in v)

    return FirmwareExpect(
        presets=hostvars.get("nic_firmware_presets") or (),
        config=hostvars.get("nic_firmware_config") or {},
        device_config=hostvars.get("nic_firmware_device_config") or {},
        devices=seq(hostvars.get("nic_firmware_devices")),
        versions=hostvars.get("nic_firmware_versions") or {},
        install_method=str(hostvars.get("mlnx_ofed_install_method") or "tarball"),
        dkms_kernels=seq(hostvars.get("mlnx_ofed_dkms_kernels"), DEFAULT_DKMS_KERNELS),
        ofed_state_dir=hostvars["mlnx_ofed_state_dir"]
        if isinstance(hostvars.get("mlnx_ofed_state_dir"), str)
        and "{{" not in hostvars["mlnx_ofed_state_dir"]
        else None,
        dkms_modules=seq(hostvars["fabricops_verify_dkms_modules"])
        if hostvars.get("fabricops_verify_dkms_modules")
        else None,
    )


# --- the probe --------------------------------------------------------------------------------------

_PROBE_FN = (
    't() { k=$1; shift; echo "@@fabricops $k"; if command -v "$1" >/dev/null 2>&1; then "$@" 2>&1; '
    'echo "@@rc $?"; else echo "$1: command not found"; echo "@@rc 127"; fi; }; '
)
_PROBE_FW = (
    'for d in /sys/class/infiniband/*/device; do [ -e "$d" ] || continue; n=${d%/device}; n=${n##*/}; '
    # the kernel links device to the PCI function; where it is a directory (no link), uevent's
    # PCI_SLOT_NAME names it (as the nic_firmware role reads it: filter nic_firmware_bdf)
    'b=$(basename "$(readlink -f "$d")"); case $b in *:*:*.*) ;; *) '
    'b=$(sed -n "s/^PCI_SLOT_NAME=//p" "$d/uevent" 2>/dev/null);; esac; '
    'echo "@@hca $n ${b:-?} $(ls "/sys/class/infiniband/$n/ports" | wc -l)"; '
    't "mlxconfig:$n" mlxconfig -d "$b" -e q; done; '
    "t mlxfwmanager mlxfwmanager --query; "
)
_PROBE_DKMS = (
    "t uname uname -r; t boot ls -1 /boot; t dkms dkms status; "
    '[ -d /sys/firmware/efi ] && echo "@@efi yes" || echo "@@efi no"; '
    f'[ -f {MOK_PUB} ] && echo "@@keyfile yes" || echo "@@keyfile no"; '
    f"t sb_state mokutil --sb-state; t test_key mokutil --test-key {MOK_PUB}; "
    "t signer modinfo -F signer mlx5_core; "
    '[ -d /sys/module/mlx5_core ] && echo "@@mlx5 yes" || echo "@@mlx5 no"; '
    # the mlnx_ofed role's marker of a MOK enrollment it queued in this boot (its content: the boot id):
    # mokutil --test-key already calls a key of the pending request enrolled (fabricops.doca.secure_boot_plan)
    'q=$(cat "$FABRICOPS_MOK_MARKER" 2>/dev/null); i=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null); '
    '[ -n "$q" ] && [ "$q" = "$i" ] && echo "@@mokqueued yes" || echo "@@mokqueued no"; '
)
#: the mlnx_ofed role's default mlnx_ofed_state_dir
OFED_STATE_DIR = "/var/lib/fabricops/mlnx_ofed"


def probe_command(fw: FirmwareExpect | None, full: bool = False) -> str | None:
    """The one shell line that gathers the evidence (None: nothing declared, nothing to read).
    ``full``: every section (diagnose reads every host alike)."""
    parts = []
    if full or (fw is not None and fw.fw_declared):
        parts.append(_PROBE_FW)
    if full or (fw is not None and fw.dkms):
        state = (fw.ofed_state_dir if fw is not None else None) or OFED_STATE_DIR
        parts.append(
            f"FABRICOPS_MOK_MARKER={shlex.quote(state.rstrip('/') + '/mok-enroll-pending')}; " + _PROBE_DKMS
        )
    if not parts:
        return None
    return _PROBE_FN + "".join(parts) + "true"


_SECTION = re.compile(r"^@@fabricops (\S+)$")
_RC = re.compile(r"^@@rc (\d+)$")
_HCA = re.compile(r"^@@hca (\S+) (\S+)(?:\s+(\d+))?\s*$")
_FLAG = re.compile(r"^@@(efi|keyfile|mlx5|mokqueued) (yes|no)$")


@dataclass
class Probe:
    """The probe's output split into sections: {key: {"rc": int | None, "stdout": str}}."""

    sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    hcas: dict[str, str] = field(default_factory=dict)  #: mlx5_0 -> 0000:41:00.0
    ports: dict[str, int] = field(
        default_factory=dict
    )  #: mlx5_0 -> its ports in sysfs (as fabric_facts counts)
    flags: dict[str, bool] = field(default_factory=dict)  #: efi, keyfile
    error: str | None = None  #: why the probe itself gave nothing usable


def split_probe(res: Mapping[str, Any] | None) -> Probe:
    if res is None:
        return Probe(error=f"{PROBE_KEY} was not run (no data: failing closed)")
    text = (res.get("stdout") or "").replace("\r", "")
    probe = Probe()
    cur: str | None = None
    buf: list[str] = []
    for line in text.splitlines():
        m = _SECTION.match(line)
        if m:
            if cur is not None:  # a section without its @@rc line: cut off
                probe.sections[cur] = {"rc": None, "stdout": "\n".join(buf)}
            cur, buf = m[1], []
            continue
        m = _RC.match(line)
        if m and cur is not None:
            probe.sections[cur] = {"rc": int(m[1]), "stdout": "\n".join(buf) + ("\n" if buf else "")}
            cur, buf = None, []
            continue
        m = _HCA.match(line)
        if m and cur is None:
            probe.hcas[m[1]] = m[2].lower()
            if m[3]:
                probe.ports[m[1]] = int(m[3])
            continue
        m = _FLAG.match(line)
        if m and cur is None:
            probe.flags[m[1]] = m[2] == "yes"
            continue
        if cur is not None:
            buf.append(line)
    if cur is not None:
        probe.sections[cur] = {"rc": None, "stdout": "\n".join(buf)}
    if res.get("rc") not in (0, None) and not probe.sections:
        lines = (res.get("stderr") or text or "").strip().splitlines()
        probe.error = (
            f"the firmware/DKMS probe failed: {lines[-1] if lines else 'exit ' + str(res.get('rc'))}"
        )
    return probe


def _section(probe: Probe, key: str, what: str) -> tuple[str | None, str | None, bool]:
    """(stdout, why unusable, tool missing)."""
    if probe.error:
        return None, probe.error, False
    sec = probe.sections.get(key)
    if sec is None:
        return None, f"`{what}` was not run (no data: failing closed)", False
    if sec["rc"] == 127:
        return None, f"{what.split()[0]} is not installed (command not found)", True
    if sec["rc"] is None:
        return None, f"`{what}` output was cut off (no exit status: failing closed)", False
    if sec["rc"] != 0:
        lines = sec["stdout"].strip().splitlines()
        return None, f"`{what}` failed: {lines[-1] if lines else 'exit ' + str(sec['rc'])}", False
    return sec["stdout"], None, False


def _mod(name: str) -> Any:
    return importlib.import_module(name)


# --- judging (pure) ---------------------------------------------------------------------------------


def _result(
    host: str,
    check: str,
    device: str | None,
    status: str,
    message: str,
    *,
    kind: str | None = None,
    remedy: str | None = None,
    details: Mapping[str, Any] | None = None,
    **kw: Any,
) -> Result:
    """One firmware/DKMS verdict (verify's category ``hosts``). The remedy is its ``action``; a FAIL
    names the diagnose finding it is worded as in ``details["kind"]`` (docs/troubleshooting.md)."""
    info = {**(details or {}), **({"kind": kind} if kind else {})}
    return Result("hosts", check, host, device, status, message, action=remedy, details=info, **kw)


def _hcas(fw: FirmwareExpect, probe: Probe, planned: Sequence[str]) -> tuple[list[str], list[str], str]:
    """The HCAs firmware is declared for (nic_firmware_devices, else every one found, planned
    included), the wanted HCAs that sysfs does not show (each an ERROR) and the scope's name."""
    found = set(probe.hcas)
    wanted = list(fw.devices) or sorted(found | set(planned), key=_natural)
    errs = []
    for dev in wanted:
        if dev not in found:
            errs.append(dev)
    return (
        [d for d in wanted if d in found],
        errs,
        ("nic_firmware_devices" if fw.devices else "every RDMA device"),
    )


def _device_ports(dev: str, ports: Mapping[str, int]) -> int:
    return max(1, int(ports.get(dev, 1)))


def judge_config(
    host: str,
    fw: FirmwareExpect,
    probe: Probe,
    planned: Sequence[str] = (),
    ports: Mapping[str, int] | None = None,
) -> list[Result]:
    """nic_fw_config and nic_fw_reset_pending (configuration part) per HCA."""
    out: list[Result] = []
    if not fw.fw_declared:
        why = f"{host}: no nic_firmware_* state declared in the inventory (not applicable)"
        return [
            _result(host, "nic_fw_config", None, SKIP, why),
            _result(host, "nic_fw_reset_pending", None, SKIP, why),
        ]
    devs, missing, _scope = _hcas(fw, probe, planned)
    for dev in missing:
        for check in ("nic_fw_config", "nic_fw_reset_pending"):
            out.append(
                _result(
                    host,
                    check,
                    dev,
                    ERROR,
                    f"{host} {dev}: no /sys/class/infiniband/{dev}/device "
                    f"(RDMA device not found): firmware state cannot be read (failing closed)",
                )
            )
    if not devs and not missing:
        for check in ("nic_fw_config", "nic_fw_reset_pending"):
            out.append(
                _result(
                    host,
                    check,
                    None,
                    ERROR,
                    f"{host}: no RDMA device in /sys/class/infiniband "
                    f"({probe.error or 'none found'}): firmware declared, nothing to read (failing closed)",
                )
            )
        return out
    try:
        mlxconfig = _mod("fabricops.parsers.mlxconfig")
    except ImportError as exc:
        return [
            _result(
                host, c, None, ERROR, f"{host}: {exc.name or exc} is missing (cannot judge: failing closed)"
            )
            for c in ("nic_fw_config", "nic_fw_reset_pending")
        ]
    firmware: Any = None
    if fw.config_declared:
        try:
            firmware = _mod("fabricops.firmware")
        except ImportError as exc:
            out.append(
                _result(
                    host,
                    "nic_fw_config",
                    None,
                    ERROR,
                    f"{host}: {exc.name or exc} is missing (cannot judge: failing closed)",
                )
            )
            firmware = False
    for dev in devs:
        bdf = probe.hcas[dev]
        text, why, absent = _section(probe, f"mlxconfig:{dev}", f"mlxconfig -d {bdf} -e q")
        if why:
            hint = f"; {REMEDY['mft']}" if absent else ""
            for check in ("nic_fw_config", "nic_fw_reset_pending"):
                out.append(
                    _result(
                        host,
                        check,
                        dev,
                        ERROR,
                        f"{host} {dev} ({bdf}): {why}{hint}: the inventory "
                        "declares its firmware state, which cannot be checked (failing closed)",
                        remedy=REMEDY["mft"] if absent else None,
                    )
                )
            continue
        try:
            q = mlxconfig.parse_query(text)
        except ParseError as exc:
            for check in ("nic_fw_config", "nic_fw_reset_pending"):
                out.append(
                    _result(
                        host,
                        check,
                        dev,
                        ERROR,
                        f"{host} {dev} ({bdf}): mlxconfig output unreadable ({exc}): failing closed",
                    )
                )
            continue
        configs = q.get("configs") or {}
        if "current" not in (q.get("columns") or []):
            for check in ("nic_fw_config", "nic_fw_reset_pending"):
                out.append(
                    _result(
                        host,
                        check,
                        dev,
                        ERROR,
                        f"{host} {dev} ({bdf}): mlxconfig printed no Current "
                        "column (needs -e): failing closed",
                    )
                )
            continue
        # reset pending: a stored (next boot) value the running firmware does not use yet
        pending = {
            k: (c.get("current"), c.get("next"))
            for k, c in sorted(configs.items())
            if "next" in c and "current" in c and not mlxconfig.same(c["current"], c["next"])
        }
        if pending:
            listing = ", ".join(f"{k} current {cur} next boot {nxt}" for k, (cur, nxt) in pending.items())
            out.append(
                _result(
                    host,
                    "nic_fw_reset_pending",
                    dev,
                    FAIL,
                    f"{host} {dev} ({bdf}): firmware reset pending: {listing}; {REMEDY['reset']}",
                    kind="nic_fw_reset_pending",
                    cause=f"{dev}: mlxconfig values set for the next boot are not active until a "
                    "firmware reset "
                    "(mlxfwreset) or a reboot",
                    remedy=REMEDY["reset"],
                    measured=sorted(pending),
                    threshold=[],
                    details={
                        "bdf": bdf,
                        "pending": {k: {"current": c, "next": n} for k, (c, n) in pending.items()},
                    },
                )
            )
        else:
            out.append(
                _result(
                    host,
                    "nic_fw_reset_pending",
                    dev,
                    PASS,
                    f"{host} {dev} ({bdf}): no configuration reset pending (next boot == current "
                    f"for {len(configs)} settings)",
                    measured=[],
                    threshold=[],
                    details={"bdf": bdf},
                )
            )
        if firmware is False:
            continue
        if firmware is None:
            out.append(
                _result(
                    host,
                    "nic_fw_config",
                    dev,
                    SKIP,
                    f"{host} {dev}: no nic_firmware_presets/config/"
                    "device_config declared (only versions): not applicable",
                )
            )
            continue
        try:
            want = firmware.declared(
                list(fw.presets),
                dict(fw.config),
                dict(fw.device_config),
                dev,
                _device_ports(dev, probe.ports or ports or {}),
            )
        except (FabricopsError, ValueError, TypeError) as exc:
            out.append(
                _result(
                    host,
                    "nic_fw_config",
                    dev,
                    ERROR,
                    f"{host} {dev}: nic_firmware_presets/config/"
                    f"device_config do not validate ({exc}): failing closed",
                )
            )
            continue
        bad, ok = [], []
        for key, value in sorted(want.items()):
            c = configs.get(key)
            if c is None:
                bad.append(
                    (
                        key,
                        f"{key}: declared {value}, not a setting of this device's firmware "
                        "(not in mlxconfig q; the role refuses it)",
                        "config",
                    )
                )
                continue
            cur, nxt = c.get("current"), c.get("next")
            cur_ok, nxt_ok = mlxconfig.same(str(value), cur), mlxconfig.same(str(value), nxt)
            if cur_ok and nxt_ok:
                ok.append(key)
            elif nxt_ok:
                bad.append(
                    (
                        key,
                        f"{key}: current {cur}, declared {value}; next boot already {nxt} (reset pending)",
                        "reset",
                    )
                )
            elif cur_ok:
                bad.append(
                    (
                        key,
                        f"{key}: current {cur} == declared, but next boot {nxt}: a reset or "
                        "reboot would change it",
                        "config",
                    )
                )
            else:
                bad.append((key, f"{key}: current {cur}, next boot {nxt}, declared {value}", "config"))
        if bad:
            remedy = REMEDY["config"] if any(r == "config" for _k, _m, r in bad) else REMEDY["reset"]
            out.append(
                _result(
                    host,
                    "nic_fw_config",
                    dev,
                    FAIL,
                    f"{host} {dev} ({bdf}): firmware configuration differs from the inventory: "
                    + "; ".join(m for _k, m, _r in bad)
                    + f"; {remedy}",
                    kind="nic_fw_noncompliant",
                    cause=f"{dev}: mlxconfig settings changed out of band or never applied (declared in "
                    "nic_firmware_presets/config/device_config)",
                    remedy=remedy,
                    measured=[k for k, _m, _r in bad],
                    threshold=[],
                    details={
                        "bdf": bdf,
                        "declared": want,
                        "device": {
                            k: {c: v for c, v in (configs.get(k) or {}).items() if c != "modified"}
                            for k, _m, _r in bad
                        },
                    },
                )
            )
        else:
            out.append(
                _result(
                    host,
                    "nic_fw_config",
                    dev,
                    PASS,
                    f"{host} {dev} ({bdf}): {len(ok)} declared firmware "
                    "settings match (current and next boot)",
                    measured=[],
                    threshold=[],
                    details={"bdf": bdf, "declared": want},
                )
            )
    return out


def judge_version(host: str, fw: FirmwareExpect, probe: Probe, planned: Sequence[str] = ()) -> list[Result]:
    """nic_fw_version (running vs the pin of its PSID) and the burned-not-running reset."""
    if not fw.versions:
        return [
            _result(
                host,
                "nic_fw_version",
                None,
                SKIP,
                f"{host}: nic_firmware_versions is empty (firmware versions not managed)",
            )
        ]
    if not isinstance(fw.versions, Mapping):
        return [
            _result(
                host,
                "nic_fw_version",
                None,
                ERROR,
                f"{host}: nic_firmware_versions must map PSID -> version: failing closed",
            )
        ]
    devs, missing, _scope = _hcas(fw, probe, planned)
    out = [
        _result(
            host,
            "nic_fw_version",
            d,
            ERROR,
            f"{host} {d}: RDMA device not found in /sys/class/infiniband (failing closed)",
        )
        for d in missing
    ]
    text, why, absent = _section(probe, "mlxfwmanager", "mlxfwmanager --query")
    if why:
        return [
            *out,
            _result(
                host,
                "nic_fw_version",
                None,
                ERROR,
                f"{host}: {why}"
                + (f"; {REMEDY['mft']}" if absent else "")
                + ": nic_firmware_versions pins firmware, which cannot be checked (failing closed)",
                remedy=REMEDY["mft"] if absent else None,
            ),
        ]
    try:
        mfw = _mod("fabricops.parsers.mlxfwmanager")
        records = mfw.parse_query(text)
    except ImportError as exc:
        return [
            *out,
            _result(
                host, "nic_fw_version", None, ERROR, f"{host}: {exc.name or exc} is missing: failing closed"
            ),
        ]
    except ParseError as exc:
        return [
            *out,
            _result(
                host,
                "nic_fw_version",
                None,
                ERROR,
                f"{host}: mlxfwmanager --query output unreadable ({exc}): failing closed",
            ),
        ]
    by_pci = {_pci(r.get("pci")): r for r in records if r.get("pci")}
    pins = {str(k): str(v) for k, v in fw.versions.items()}
    if not devs and not missing:
        out.append(
            _result(
                host,
                "nic_fw_version",
                None,
                ERROR,
                f"{host}: no RDMA device in /sys/class/infiniband: "
                "nic_firmware_versions pins firmware, nothing to read (failing closed)",
            )
        )
    for dev in devs:
        bdf = probe.hcas[dev]
        rec = by_pci.get(_pci(bdf))
        if rec is None:
            out.append(
                _result(
                    host,
                    "nic_fw_version",
                    dev,
                    ERROR,
                    f"{host} {dev} ({bdf}): not in mlxfwmanager --query "
                    f"({len(records)} devices listed): failing closed",
                )
            )
            continue
        psid = rec.get("psid")
        burned, running = mfw.fw_burned(rec), mfw.fw_running(rec)
        pinned = pins.get(str(psid))
        info = {
            "bdf": bdf,
            "psid": psid,
            "running": running,
            "burned": burned,
            "pinned": pinned,
            "part_number": rec.get("part_number"),
        }
        if pinned is None:
            out.append(
                _result(
                    host,
                    "nic_fw_version",
                    dev,
                    SKIP,
                    f"{host} {dev} ({bdf}): PSID {psid} not pinned in "
                    f"nic_firmware_versions (running {running}): not managed",
                    details=info,
                )
            )
        elif running == pinned and burned == pinned:
            out.append(
                _result(
                    host,
                    "nic_fw_version",
                    dev,
                    PASS,
                    f"{host} {dev} ({bdf}): firmware {running} == pin for {psid}",
                    measured=running,
                    threshold=pinned,
                    details=info,
                )
            )
        elif burned == pinned:
            out.append(
                _result(
                    host,
                    "nic_fw_version",
                    dev,
                    FAIL,
                    f"{host} {dev} ({bdf}): PSID {psid} pinned {pinned} is burned but firmware "
                    f"{running} is still "
                    f"running (reset pending); {REMEDY['reset']}",
                    kind="nic_fw_reset_pending",
                    cause=f"{dev}: the pinned image was burned; the new firmware runs only after a "
                    "firmware reset or "
                    "a reboot",
                    remedy=REMEDY["reset"],
                    measured=running,
                    threshold=pinned,
                    details=info,
                )
            )
        elif running == pinned:
            out.append(
                _result(
                    host,
                    "nic_fw_version",
                    dev,
                    FAIL,
                    f"{host} {dev} ({bdf}): PSID {psid} runs the pinned {pinned} but {burned} is "
                    "burned: a reset or "
                    f"reboot would activate it; {REMEDY['update']}",
                    kind="nic_fw_noncompliant",
                    cause=f"{dev}: another firmware image was burned out of band",
                    remedy=REMEDY["update"],
                    measured=burned,
                    threshold=pinned,
                    details=info,
                )
            )
        else:
            out.append(
                _result(
                    host,
                    "nic_fw_version",
                    dev,
                    FAIL,
                    f"{host} {dev} ({bdf}): PSID {psid} runs firmware {running} (burned {burned}), "
                    f"pinned {pinned}; "
                    f"{REMEDY['update']}",
                    kind="nic_fw_noncompliant",
                    cause=f"{dev}: firmware updated or downgraded out of band, or the pin never applied",
                    remedy=REMEDY["update"],
                    measured=running,
                    threshold=pinned,
                    details=info,
                )
            )
    return out


def _pci(value: Any) -> str:
    v = str(value or "").strip().lower()
    return v if v.count(":") == 2 else f"0000:{v}"


def kernels(doca: Any, fw: FirmwareExpect, running: str, next_boot: str | None) -> dict[str, list[str]]:
    """kernel release -> [running|next|declared]: mlnx_ofed_dkms_kernels as the role reads it
    (fabricops.doca.dkms_kernels), each kernel labelled by the boot it serves."""
    wanted = [k for k in fw.dkms_kernels if next_boot or k != "next"]
    out: dict[str, list[str]] = {}
    for rel in doca.dkms_kernels(wanted, running, next_boot or ""):
        out[rel] = [b for b, k in (("running", running), ("next", next_boot)) if k == rel] or ["declared"]
    return out


def judge_dkms(host: str, fw: FirmwareExpect, probe: Probe) -> list[Result]:
    """dkms_modules: the DKMS modules are installed for the running and the next-boot kernel."""
    if not fw.dkms:
        return [
            _result(
                host,
                "dkms_modules",
                None,
                SKIP,
                f"{host}: mlnx_ofed_install_method {fw.install_method} (not a DKMS stack): not applicable",
            )
        ]
    out: list[Result] = []
    rel, why, _ = _section(probe, "uname", "uname -r")
    running = (rel or "").strip() or None
    if running is None:
        return [
            _result(
                host,
                "dkms_modules",
                None,
                ERROR,
                f"{host}: running kernel unknown ({why or 'uname -r empty'}): failing closed",
            )
        ]
    try:
        doca = _mod("fabricops.doca")
        dkms = _mod("fabricops.parsers.dkms")
    except ImportError as exc:
        return [
            _result(
                host, "dkms_modules", None, ERROR, f"{host}: {exc.name or exc} is missing: failing closed"
            )
        ]
    boot, why_b, _ = _section(probe, "boot", "ls -1 /boot")
    next_boot = None
    if boot is not None:
        names = [n.strip() for n in boot.splitlines() if n.strip().startswith("vmlinuz-")]
        try:
            next_boot = doca.next_boot_kernel(names, running) if names else None
        except (ValueError, FabricopsError):
            next_boot = None
    if "next" in fw.dkms_kernels and next_boot is None:
        out.append(
            _result(
                host,
                "dkms_modules",
                "next",
                ERROR,
                f"{host}: next-boot kernel unknown ("
                f"{why_b or 'no /boot/vmlinuz-*'}): its DKMS modules cannot be checked (failing closed)",
            )
        )
    text, why_d, absent = _section(probe, "dkms", "dkms status")
    if why_d:
        return [
            *out,
            _result(
                host,
                "dkms_modules",
                None,
                ERROR,
                f"{host}: {why_d}: mlnx_ofed_install_method {fw.install_method} builds the kernel "
                "modules with DKMS, which cannot be checked (failing closed)"
                + (f"; {REMEDY['dkms']}" if absent else ""),
                remedy=REMEDY["dkms"] if absent else None,
            ),
        ]
    try:
        status = dkms.parse_status(text)
    except ParseError as exc:
        return [
            *out,
            _result(
                host, "dkms_modules", None, ERROR, f"{host}: dkms status unreadable ({exc}): failing closed"
            ),
        ]
    modules = list(fw.dkms_modules or doca.stack_dkms_modules(status))
    for rel_, boots in kernels(doca, fw, running, next_boot).items():
        boot_s = "+".join(boots)
        gaps = doca.dkms_gaps(status, modules, [rel_])
        info = {"kernel": rel_, "boot": boot_s, "running": running, "next": next_boot}
        if gaps:
            listing = ", ".join(f"{g['module']} ({g.get('state') or 'not built'})" for g in gaps)
            when = (
                "the running kernel: the modules do not load now"
                if "running" in boots
                else "the next-boot kernel: the host boots without its RDMA driver"
            )
            out.append(
                _result(
                    host,
                    "dkms_modules",
                    rel_,
                    FAIL,
                    f"{host} kernel {rel_} ({boot_s}): DKMS modules missing: {listing} for {when}; "
                    f"{REMEDY['dkms']}",
                    kind="dkms_modules_missing",
                    cause=(
                        f"DKMS modules not built for {when}: a kernel installed without its "
                        "headers, a failed "
                        "build, or the modules removed"
                    ),
                    remedy=REMEDY["dkms"],
                    measured=[g["module"] for g in gaps],
                    threshold=[],
                    details={**info, "missing": gaps},
                )
            )
        else:
            out.append(
                _result(
                    host,
                    "dkms_modules",
                    rel_,
                    PASS,
                    f"{host} kernel {rel_} ({boot_s}): DKMS modules {', '.join(modules)} installed",
                    measured=[],
                    threshold=[],
                    details=info,
                )
            )
    return out


def judge_secure_boot(host: str, fw: FirmwareExpect, probe: Probe) -> list[Result]:
    """secure_boot_signing: Secure Boot on -> the DKMS signing key is enrolled and mlx5_core is signed."""
    if not fw.dkms:
        return [
            _result(
                host,
                "secure_boot_signing",
                None,
                SKIP,
                f"{host}: mlnx_ofed_install_method {fw.install_method} (not a DKMS stack): not applicable",
            )
        ]
    if probe.error:
        return [_result(host, "secure_boot_signing", None, ERROR, f"{host}: {probe.error}")]
    if probe.flags.get("efi") is False:
        return [
            _result(
                host,
                "secure_boot_signing",
                None,
                PASS,
                f"{host}: no /sys/firmware/efi (BIOS boot): Secure Boot off, unsigned modules load",
                measured=False,
                threshold=None,
            )
        ]
    if "efi" not in probe.flags:
        return [
            _result(host, "secure_boot_signing", None, ERROR, f"{host}: EFI state not read: failing closed")
        ]
    try:
        mok = _mod("fabricops.parsers.mokutil")
    except ImportError as exc:
        return [
            _result(
                host,
                "secure_boot_signing",
                None,
                ERROR,
                f"{host}: {exc.name or exc} is missing: failing closed",
            )
        ]
    sec = probe.sections.get("sb_state")
    if sec is None or sec["rc"] == 127 or sec["rc"] is None:
        what = "mokutil is not installed" if sec and sec["rc"] == 127 else "mokutil --sb-state not read"
        return [
            _result(
                host,
                "secure_boot_signing",
                None,
                ERROR,
                f"{host}: {what} on an EFI host: Secure Boot state "
                "unknown, module signing cannot be checked (failing closed)",
            )
        ]
    try:
        sb = mok.parse_sb_state(sec["stdout"])  # mokutil exits non-zero without EFI variables: judge the text
    except ParseError as exc:
        return [
            _result(
                host,
                "secure_boot_signing",
                None,
                ERROR,
                f"{host}: mokutil --sb-state unreadable ({exc}): failing closed",
            )
        ]
    if not sb:
        return [
            _result(
                host,
                "secure_boot_signing",
                None,
                PASS,
                f"{host}: Secure Boot "
                f"{'disabled' if sb is False else 'off (no EFI variables)'}: unsigned modules load",
                measured=bool(sb),
            )
        ]
    info: dict[str, Any] = {"secure_boot": True, "key": MOK_PUB, "mlx5_core_loaded": probe.flags.get("mlx5")}
    if probe.flags.get("keyfile") is False:
        return [
            _result(
                host,
                "secure_boot_signing",
                None,
                FAIL,
                f"{host}: Secure Boot on but no DKMS signing key {MOK_PUB}: DKMS modules are "
                "unsigned and the "
                f"kernel rejects them ('Key was rejected by service'); {REMEDY['sign']}",
                kind="secure_boot_key_not_enrolled",
                cause="Secure Boot on and no DKMS signing key",
                remedy=REMEDY["sign"],
                measured="no key",
                threshold="enrolled",
                details=info,
            )
        ]
    tk = probe.sections.get("test_key")
    try:
        if tk is None or tk["rc"] in (127, None):
            raise ParseError("mokutil --test-key", "its output", "not read")
        enrolled = mok.parse_test_key(tk["stdout"])
    except ParseError as exc:
        return [
            _result(
                host,
                "secure_boot_signing",
                None,
                ERROR,
                f"{host}: cannot tell whether {MOK_PUB} is enrolled ({exc}): failing closed",
            )
        ]
    if not enrolled:
        return [
            _result(
                host,
                "secure_boot_signing",
                None,
                FAIL,
                f"{host}: Secure Boot on and the DKMS signing key {MOK_PUB} is not enrolled: the "
                "kernel rejects "
                f"the DKMS-built modules ('Key was rejected by service'); {REMEDY['enroll']}",
                kind="secure_boot_key_not_enrolled",
                cause="Secure Boot on and the DKMS module signing key not enrolled in the MOK list",
                remedy=REMEDY["enroll"],
                measured="not enrolled",
                threshold="enrolled",
                details=info,
            )
        ]
    if probe.flags.get("mokqueued"):
        return [
            _result(
                host,
                "secure_boot_signing",
                None,
                FAIL,
                f"{host}: Secure Boot on and {MOK_PUB} is queued for MOK enrollment in this boot, "
                "not enrolled "
                "yet (mokutil --test-key calls a pending key enrolled): the kernel rejects the DKMS modules "
                f"until the reboot; {REMEDY['confirm']}",
                kind="secure_boot_key_not_enrolled",
                cause="the DKMS signing key's MOK enrollment is queued, a reboot and the console "
                "confirmation away",
                remedy=REMEDY["confirm"],
                measured="queued",
                threshold="enrolled",
                details=info,
            )
        ]
    signer, why, _ = _section(probe, "signer", "modinfo -F signer mlx5_core")
    if why:
        return [
            _result(
                host,
                "secure_boot_signing",
                None,
                ERROR,
                f"{host}: key enrolled, but {why}: the module's signature cannot be read (failing closed)",
                details=info,
            )
        ]
    signer = (signer or "").strip()
    info["signer"] = signer
    if not signer:
        return [
            _result(
                host,
                "secure_boot_signing",
                None,
                FAIL,
                f"{host}: Secure Boot on, key enrolled, but mlx5_core is not signed (modinfo -F signer "
                f"empty); {REMEDY['sign']}",
                kind="secure_boot_key_not_enrolled",
                cause="the DKMS modules were built without signing",
                remedy=REMEDY["sign"],
                measured="unsigned",
                threshold="signed",
                details=info,
            )
        ]
    return [
        _result(
            host,
            "secure_boot_signing",
            None,
            PASS,
            f"{host}: Secure Boot on, {MOK_PUB} enrolled, mlx5_core signed by {signer}",
            measured="enrolled",
            threshold="enrolled",
            details=info,
        )
    ]


def judge(
    host: str,
    fw: FirmwareExpect,
    res: Mapping[str, Any] | None,
    want: set[str],
    planned: Sequence[str] = (),
    ports: Mapping[str, int] | None = None,
) -> list[Result]:
    """Every wanted firmware/DKMS check of a host from the probe's result."""
    needs_probe = (fw.fw_declared and want & {"nic_fw_config", "nic_fw_reset_pending", "nic_fw_version"}) or (
        fw.dkms and want & {"dkms_modules", "secure_boot_signing"}
    )
    probe = split_probe(res) if needs_probe else Probe()
    items: list[Result] = []
    if want & {"nic_fw_config", "nic_fw_reset_pending"}:
        items += [i for i in judge_config(host, fw, probe, planned, ports) if i.check in want]
    if "nic_fw_version" in want:
        items += judge_version(host, fw, probe, planned)
    if "dkms_modules" in want:
        items += judge_dkms(host, fw, probe)
    if "secure_boot_signing" in want:
        items += judge_secure_boot(host, fw, probe)
    return items


def problems(host: str, fw: FirmwareExpect, res: Mapping[str, Any] | None) -> list[Result]:
    """The failed results (diagnose's findings): what could not be read is no finding there."""
    return [i for i in judge(host, fw, res, set(FW_CHECKS)) if i.status == FAIL]


def evaluate(ctx: Any, want: set[str]) -> None:
    """Add the firmware/DKMS check results of ``ctx`` (hostchecks' context)."""
    want = want & set(FW_CHECKS)
    if not want:
        return
    fw = ctx.expect.firmware or FirmwareExpect()
    planned = sorted({p.hca for p in ctx.expect.ports}, key=_natural)
    ports: dict[str, int] = {}
    for p in ctx.expect.ports:
        ports[p.hca] = max(ports.get(p.hca, 0), p.port)
    for i in judge(ctx.host, fw, ctx.raw.get(PROBE_KEY), want, planned, ports):
        ctx.add(
            i.category,
            i.check,
            i.device,
            i.status,
            i.message,
            measured=i.measured,
            threshold=i.threshold,
            cause=i.cause,
            action=i.action,
            observed_at=i.observed_at,
            # docs/verify.md: details.remedy carries the remedy in the JSON report (as before action)
            details={**i.details, **({"remedy": i.action} if i.action else {})},
        )


def _natural(name: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]
