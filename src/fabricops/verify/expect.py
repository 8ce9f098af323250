"""What a host should look like: inventory variables + hardware profile -> :class:`HostExpect`.

Pure Python; the inventory variables come from Ansible's inventory (docs/verify.md, "Inventory
variables"). Nothing here talks to a host.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabricops import validate
from fabricops.errors import BadInput
from fabricops.model.profiles import Profile, load_profile
from fabricops.roce.desired import effective_definition

#: Where the pinned MLNX_OFED version is looked up, first found wins: verification's own pin, then
#: the mlnx_ofed role's choice (what every inventory, the lab's included, sets).
OFED_VERSION_VARS = ("fabricops_verify_ofed_version", "mlnx_ofed_version")
#: nvidia-smi topo -m levels that count as "close" NIC<->GPU affinity (same PCIe switch).
DEFAULT_NIC_GPU_LEVELS = ("PIX", "PXB")
PERFTEST_DEFAULTS = {
    "bw_size": 8388608,  # > 8 MB, ~4 QPs: perftest maintainers (linux-rdma/perftest#252)
    "bw_qps": 4,
    "lat_size": 2,
    "base_port": 18515,
    "timeout_s": 60,
    "connect_retries": 40,
}


@dataclass(frozen=True)
class PortExpect:
    hca: str
    port: int
    netdev: str | None = None
    link_layer: str | None = None  #: InfiniBand | Ethernet | None (unknown until observed)
    switch: str | None = None  #: the switch the port is cabled to (``fabricops_cabling``)
    switch_port: str | None = None  #: its port on that switch (``Eth1/3``, ``swp3``, ``5``)
    address: str | None = None  #: RoCE data address (IPv4, no prefix) when the entry gives one
    speed: str | None = None  #: expected speed when the entry gives one (``400GbE``, ``NDR``)

    @property
    def device(self) -> str:
        return f"{self.hca}/{self.port}"


@dataclass
class HostExpect:
    host: str
    profile: Profile
    ofed_version: str | None
    ofed_version_var: str | None
    ports: list[PortExpect]
    #: the effective RoCE definition the roce_host role applied (``fabricops.roce.desired``:
    #: ``roce_host_roce`` over ``fabricops_roce``), as written; None: none planned
    roce: Mapping[str, Any] | None = None
    roce_source: str = "fabricops_roce"  #: the variable ``roce`` came from
    ipoib: dict[str, Any] | None = None
    nccl_profile: str | None = None
    nccl_conf_path: str = "/etc/nccl.conf"
    nic_gpu_levels: tuple[str, ...] = DEFAULT_NIC_GPU_LEVELS
    address: str | None = None  #: where perftest clients reach this host (out-of-band TCP)
    skip: frozenset[str] = frozenset()
    perftest: dict[str, Any] = field(default_factory=lambda: dict(PERFTEST_DEFAULTS))
    #: device ("mlx5_0/1") -> {counter: value} from an earlier run; None = absolute counters
    counter_baseline: dict[str, dict[str, int]] | None = None
    #: HCA name or netdev -> RoCE data address (``fabricops_roce_addresses``)
    roce_addresses: dict[str, str] = field(default_factory=dict)
    #: the subnet_manager role's plan: {"mode": "switch"|"hosts", "priority": the master's (hosts
    #: mode: the highest in subnet_manager_hosts) or None}; None = no SM planned in the inventory
    subnet_manager: dict[str, Any] | None = None
    #: GPUDirect RDMA is part of the rollout (site.yml's gpudirect phase, fabricops_site_gpudirect)
    gpudirect: bool = True
    #: nic_firmware / mlnx_ofed DKMS expectations (fabricops.verify.firmware.FirmwareExpect); None: none
    firmware: Any = None
    #: DOCA-Host declared (mlnx_ofed_install_method: doca): {"version": "3.1.0", "profile": "doca-ofed"}.
    #: The pin is then the DOCA release the profile package carries, not an MLNX_OFED version.
    doca: dict[str, str] | None = None
    #: the IMEX plan where the profile's platform runs IMEX (GB200/GB300 NVL72; fabricops.services):
    #: {"domain": fabricops_nvlink_domain or None, "address": the IMEX address (imex.member_address),
    #: "managed_by": "host" | "dra", "config_path"}; None: no IMEX on this platform (no IMEX checks)
    imex: dict[str, Any] | None = None

    @property
    def link_layer(self) -> str:
        return self.profile.hca.link_layer

    @property
    def rate_gbps(self) -> float:
        return self.profile.hca.rate_gbps

    def rails(self, observed: Mapping[str, str] | None = None) -> list[PortExpect]:
        """The compute-fabric ports (the profile's link layer), in HCA order.

        ``observed`` maps ``hca/port`` to the link layer ibstat printed, for ports whose expected
        link layer is unknown."""
        out = []
        for p in self.ports:
            layer = p.link_layer or (observed or {}).get(p.device)
            if layer == self.link_layer:
                out.append(p)
        return out


def lookup(data: Mapping[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def ofed_version(hostvars: Mapping[str, Any], override: str | None = None) -> tuple[str | None, str | None]:
    """(version, variable it came from). ``fabricops_verify_ofed_version_var`` names another variable."""
    if override:
        return _strip_ofed(override), "--ofed-version"
    names: Sequence[str] = OFED_VERSION_VARS
    custom = hostvars.get("fabricops_verify_ofed_version_var")
    if custom:
        names = (str(custom), *names)
    for name in names:
        value = lookup(hostvars, name)
        if isinstance(value, str) and value and "{{" not in value:
            return _strip_ofed(value), name
    return None, None


def doca_expect(hostvars: Mapping[str, Any]) -> dict[str, str] | None:
    """The DOCA-Host release and profile the mlnx_ofed role installs (method ``doca``), or None."""
    if hostvars.get("mlnx_ofed_install_method") != "doca":
        return None
    version = hostvars.get("mlnx_ofed_doca_version")
    if not isinstance(version, str) or not version or "{{" in version:
        return None
    profile = hostvars.get("mlnx_ofed_doca_profile") or "doca-ofed"
    return {"version": version, "profile": str(profile)}


def _strip_ofed(value: str) -> str:
    v = value.strip().rstrip(":")
    return v.removeprefix("MLNX_OFED_LINUX-")


def expected_ports(
    host: str, hostvars: Mapping[str, Any], switch_link_layers: Mapping[str, str] | None = None
) -> list[PortExpect]:
    """``fabricops_verify_ports`` (explicit) or the host's cables in ``fabricops_cabling``."""
    explicit = hostvars.get("fabricops_verify_ports")
    entries: list[Mapping[str, Any]]
    if explicit:
        entries = list(explicit)
    else:
        entries = [c for c in hostvars.get("fabricops_cabling") or [] if c.get("host") == host]
    out = []
    for e in entries:
        layer = e.get("link_layer")
        if layer is None and switch_link_layers and e.get("switch") in switch_link_layers:
            layer = switch_link_layers[e["switch"]]
        out.append(
            PortExpect(
                str(e["hca"]),
                int(e.get("port", 1)),
                e.get("netdev"),
                layer,
                e.get("switch"),
                None if e.get("switch_port") is None else str(e["switch_port"]),
                _bare(e.get("address")),
                None if e.get("speed") is None else str(e["speed"]),
            )
        )
    return sorted(set(out), key=lambda p: (_natural(p.hca), p.port))


def _bare(address: Any) -> str | None:
    """``203.0.113.3/26`` -> ``203.0.113.3``."""
    if not address:
        return None
    return str(address).split("/")[0].strip() or None


def roce_addresses(host: str, hostvars: Mapping[str, Any]) -> dict[str, str]:
    """HCA name and netdev -> RoCE data address of ``host`` from ``fabricops_roce_addresses``.

    Shape (what the lab writes): ``{host: [{netdev, hca, address: "203.0.113.3/26"}, ...]}``."""
    table = hostvars.get("fabricops_roce_addresses") or {}
    out: dict[str, str] = {}
    entries = table.get(host) if isinstance(table, Mapping) else None
    for e in entries or []:
        if not isinstance(e, Mapping) or not e.get("address"):
            continue
        addr = _bare(e["address"])
        for key in ("hca", "netdev"):
            if e.get(key) and addr:
                out[str(e[key])] = addr
    return out


def _natural(name: str) -> list[Any]:
    import re

    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def host_expect(
    host: str,
    hostvars: Mapping[str, Any],
    *,
    profile: str | Profile | None = None,
    ofed_override: str | None = None,
    switch_link_layers: Mapping[str, str] | None = None,
    skip: Sequence[str] = (),
    counter_baseline: dict[str, dict[str, int]] | None = None,
) -> HostExpect:
    """Build the expectation for ``host``. Raises ``ProfileError`` when no profile is known."""
    prof = profile if isinstance(profile, Profile) else None
    if prof is None:
        name = profile or hostvars.get("fabricops_hardware_profile")
        if not name:
            from fabricops.model.profiles import ProfileError

            raise ProfileError(
                f"{host}: no hardware profile; set fabricops_hardware_profile in the inventory "
                "or pass --profile"
            )
        prof = load_profile(str(name))
    version, var = ofed_version(hostvars, ofed_override)
    doca = doca_expect(hostvars)
    if doca and not ofed_override and var == "mlnx_ofed_version":
        # the mlnx_ofed role's doca method does not read mlnx_ofed_version: it is not the pin
        version, var = None, None
    # what the roce_host role applied, overrides included (validated by the roce_qos check)
    roce_source, roce = effective_definition(hostvars, host)
    ipoib = None
    if hostvars.get("ipoib_plan") or hostvars.get("ipoib_interfaces"):
        ipoib = {
            "plan": hostvars.get("ipoib_plan") or None,
            "host_index": hostvars.get("ipoib_host_index"),
            "addresses": hostvars.get("ipoib_addresses") or {},
            "interfaces": hostvars.get("ipoib_interfaces") or None,
            "defaults": {
                "mode": hostvars.get("ipoib_mode", "datagram"),
                "mtu": hostvars.get("ipoib_mtu"),
                "ib_mtu": hostvars.get("ipoib_ib_mtu", 4096),
            },
        }
    perftest = dict(PERFTEST_DEFAULTS)
    perftest.update(hostvars.get("fabricops_verify_perftest") or {})
    subnet_manager = None
    if hostvars.get("subnet_manager_mode") in ("switch", "hosts"):
        mode = hostvars["subnet_manager_mode"]
        prios = [int(v) for v in (hostvars.get("subnet_manager_hosts") or {}).values() if str(v).isdigit()]
        subnet_manager = {"mode": mode, "priority": max(prios) if mode == "hosts" and prios else None}
    skip_all = set(skip) | set(hostvars.get("fabricops_verify_skip") or [])
    return HostExpect(
        host=host,
        profile=prof,
        ofed_version=version,
        ofed_version_var=var,
        ports=expected_ports(host, hostvars, switch_link_layers),
        roce=roce,
        roce_source=roce_source or "fabricops_roce",
        ipoib=ipoib,
        nccl_profile=hostvars.get("nccl_profile_name") or None,
        nccl_conf_path=hostvars.get("nccl_profile_conf_path") or "/etc/nccl.conf",
        nic_gpu_levels=tuple(hostvars.get("fabricops_verify_nic_gpu_levels") or DEFAULT_NIC_GPU_LEVELS),
        address=hostvars.get("fabricops_verify_perftest_address") or hostvars.get("ansible_host") or host,
        skip=frozenset(skip_all),
        perftest=perftest,
        counter_baseline=counter_baseline,
        roce_addresses=roce_addresses(host, hostvars),
        subnet_manager=subnet_manager,
        doca=doca,
        gpudirect=_flag(hostvars.get("fabricops_site_gpudirect", True)),
        firmware=_firmware_expect(hostvars),
        imex=imex_expect(host, hostvars, prof),
    )


def imex_expect(host: str, hostvars: Mapping[str, Any], prof: Profile) -> dict[str, Any] | None:
    """The IMEX plan of ``host`` (HostExpect.imex), or None when its platform runs no IMEX."""
    from fabricops import imex, services

    if not prof.platform:
        return None
    try:
        row = services.platform_services(prof.platform)
    except ValueError:
        return None
    if "imex" not in row.services:
        return None
    return {
        "domain": str(hostvars.get("fabricops_nvlink_domain") or "").strip() or None,
        "address": imex.member_address(hostvars, host),
        "managed_by": str(hostvars.get("nvidia_imex_managed_by") or "host"),
        "config_path": str(hostvars.get("nvidia_imex_config_path") or "/etc/nvidia-imex/config.cfg"),
    }


def _firmware_expect(hostvars: Mapping[str, Any]) -> Any:
    from fabricops.verify.firmware import expect_from_hostvars

    return expect_from_hostvars(hostvars)


def _flag(value: Any) -> bool:
    """An inventory boolean (YAML bool, or a string from -e / INI)."""
    if isinstance(value, str):
        return value.strip().lower() not in ("0", "false", "no", "off", "n", "f", "")
    return bool(value)


# --- multi-node NCCL phase settings (docs/verify.md, "Multi-node NCCL") -------------------------

#: The default launcher: OpenMPI's mpirun, as sites launch nccl-tests (SPEC D). ``{mpi_env}`` becomes
#: ``-x NAME=VALUE`` per setting (OpenMPI forwards only the variables named with -x to remote ranks).
NCCL_LAUNCHER_DEFAULT = (
    "mpirun --allow-run-as-root -np {np} -H {hostslots} --bind-to none {mpi_env} "
    "{binary} -b 8 -e {max_bytes} -f 2 -g 1"
)
#: Placeholders a launcher template may use; every value is checked against the inventory's own
#: patterns (fabricops.validate) and shell-quoted before it is put in, so a placeholder must stand
#: bare in the template: never inside quotes, never in a ``sh -c`` string (:func:`launcher_error`).
NCCL_PLACEHOLDERS = {
    "np": "total ranks (planned GPUs per host x hosts)",
    "hostslots": "host:slots list, e.g. gpu01:8,gpu02:8",
    "hosts": "comma-separated host names",
    "nodes": "number of hosts",
    "ppn": "ranks per host (planned GPUs)",
    "binary": "the nccl-tests binary (tests_dir/all_reduce_perf)",
    "max_bytes": "largest message size (-e)",
    "mpi_env": "OpenMPI -x NAME=VALUE flags (NCCL_DEBUG=INFO, NCCL_ALGO=Ring on two hosts, ...)",
    "env": "the same settings as NAME=VALUE words (for `env {env} srun ...`)",
    "json": "a private path for the -J JSON result file",
}
NCCL_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
NCCL_MAX_BYTES_DEFAULT = "1G"
#: ``fabricops_verify_nccl_max_bytes``: nccl-tests' -e size (the range 8..64G is checked apart)
NCCL_MAX_BYTES_RE = re.compile(r"[1-9]\d*[KMG]?")
NCCL_TIMEOUT_DEFAULT_S = 180


@dataclass(frozen=True)
class NcclSettings:
    launcher: str = NCCL_LAUNCHER_DEFAULT
    tests_dir: str = ""  #: empty: the binaries are found on PATH
    collectives: tuple[str, ...] = ("all_reduce",)
    max_bytes: str = NCCL_MAX_BYTES_DEFAULT
    timeout_s: int = NCCL_TIMEOUT_DEFAULT_S

    @property
    def max_bytes_n(self) -> int:
        return _bytes(self.max_bytes)


class NcclSettingsError(BadInput, ValueError):
    """A fabricops_verify_nccl_* value (or a host name) that cannot reach the launcher line; the
    message is one sentence. The verify CLI exits with "invalid input" (5) before any host is run."""


def _bytes(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", text)
    if not m:
        raise NcclSettingsError(text)
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


def nccl_wanted(hostvars: Mapping[str, Any]) -> bool:
    """``fabricops_verify_nccl: true`` opts the full verify run into the NCCL phase."""
    return _flag(hostvars.get("fabricops_verify_nccl", False))


def nccl_settings(hostvars: Mapping[str, Any]) -> NcclSettings:
    """The NCCL phase's settings from the inventory; :class:`NcclSettingsError` names the bad one."""
    import string

    launcher = hostvars.get("fabricops_verify_nccl_launcher") or NCCL_LAUNCHER_DEFAULT
    if not isinstance(launcher, str):
        raise NcclSettingsError("fabricops_verify_nccl_launcher must be a string (a command template).")
    try:
        fields = list(string.Formatter().parse(launcher))
    except ValueError as exc:
        raise NcclSettingsError(
            f"fabricops_verify_nccl_launcher is not a valid template ({exc}); "
            "write literal braces as {{ }}."
        ) from None
    names = set()
    for _text, name, spec, conv in fields:
        if name is None:
            continue
        if name not in NCCL_PLACEHOLDERS or spec or conv:
            raise NcclSettingsError(
                f"fabricops_verify_nccl_launcher has an unknown placeholder {{{name}}}; "
                f"use only {', '.join('{' + k + '}' for k in NCCL_PLACEHOLDERS)}."
            )
        names.add(name)
    if "binary" not in names:
        raise NcclSettingsError(
            "fabricops_verify_nccl_launcher must contain {binary} (the nccl-tests binary)."
        )
    if not names & {"mpi_env", "env"}:
        raise NcclSettingsError(
            "fabricops_verify_nccl_launcher must pass NCCL_DEBUG=INFO and NCCL_ALGO to the ranks: "
            "put {mpi_env} (mpirun -x flags) or {env} (NAME=VALUE words) in it."
        )
    why = launcher_error(launcher)
    if why:
        raise NcclSettingsError(why)
    tests_dir = hostvars.get("fabricops_verify_nccl_tests_dir") or ""
    try:
        validate.optional_path("fabricops_verify_nccl_tests_dir", tests_dir)
    except validate.UnsafeValue as exc:
        raise NcclSettingsError(f"{exc}.") from None
    raw = hostvars.get("fabricops_verify_nccl_collectives") or ["all_reduce"]
    items = [s.strip() for s in raw.split(",")] if isinstance(raw, str) else list(raw)
    collectives: list[str] = []
    for c in items:
        name = str(c).strip().removesuffix("_perf")
        if name not in NCCL_COLLECTIVES:
            raise NcclSettingsError(
                f"fabricops_verify_nccl_collectives: unknown collective {str(c)!r}; "
                f"choose from {', '.join(NCCL_COLLECTIVES)}."
            )
        if name not in collectives:
            collectives.append(name)
    if not collectives:
        raise NcclSettingsError("fabricops_verify_nccl_collectives is empty; name at least all_reduce.")
    max_bytes = str(hostvars.get("fabricops_verify_nccl_max_bytes") or NCCL_MAX_BYTES_DEFAULT).strip().upper()
    if not NCCL_MAX_BYTES_RE.fullmatch(max_bytes) or not 8 <= _bytes(max_bytes) <= 64 << 30:
        raise NcclSettingsError(
            f"fabricops_verify_nccl_max_bytes {max_bytes!r} is not a size from 8 to 64G such as 1G or 8G."
        )
    timeout = hostvars.get("fabricops_verify_nccl_timeout_s", NCCL_TIMEOUT_DEFAULT_S)
    try:
        timeout_s = int(str(timeout).strip())
    except ValueError:
        timeout_s = 0
    if isinstance(timeout, bool) or not 10 <= timeout_s <= 7200:
        raise NcclSettingsError(
            f"fabricops_verify_nccl_timeout_s {timeout!r} is not a whole number of seconds from 10 to 7200."
        )
    return NcclSettings(launcher, tests_dir, tuple(collectives), max_bytes, timeout_s)


#: a short-option word that makes a shell read its next argument as a command string (``sh -c``,
#: ``bash -lc``, ``sh -ec``): a value in that string is parsed by a second shell, past any quoting.
_DASH_C = re.compile(r"-[a-z]{0,3}c")


def launcher_error(template: str) -> str | None:
    """Why ``template`` (fabricops_verify_nccl_launcher) cannot be filled safely, in one sentence;
    None when every placeholder stands bare.

    The template is tokenised as POSIX sh reads it (unquoted text, '...', "..." with its backslash
    escapes, words split at blanks and operators). Each value is shell-quoted as one word, so a
    placeholder inside the template's own quotes would end those quotes (``-w "{hosts}"``), and one
    after ``-c`` lands in a string that a second shell parses again (``bash -c "... {hostslots}"``):
    both are refused. An unterminated quote is refused too."""
    import string

    try:
        fields = list(string.Formatter().parse(template))
    except ValueError:
        return None  # reported by nccl_settings with its own sentence
    state = ""  # "", "'" or '"'
    word = ""
    after_c = False
    pending_escape = False
    for literal, name, _spec, _conv in fields:
        for ch in literal:
            if pending_escape:
                pending_escape = False
                word += ch
                continue
            if state == "'":
                if ch == "'":
                    state = ""
                else:
                    word += ch
            elif state == '"':
                if ch == '"':
                    state = ""
                elif ch == "\\":
                    pending_escape = True
                else:
                    word += ch
            elif ch == "\\":
                pending_escape = True
            elif ch in "'\"":
                state = ch
            elif ch in " \t\n;&|()<>":
                if _DASH_C.fullmatch(word):
                    after_c = True
                word = ""
            else:
                word += ch
        if name is None:
            continue
        if after_c:
            return (
                f"fabricops_verify_nccl_launcher puts {{{name}}} after -c, in a command string that a second "
                f"shell parses again past verify's quoting; run the launcher directly with {{{name}}} as a "
                "bare word of its own, not through sh -c (for srun's -c N write --cpus-per-task=N)."
            )
        if state:
            kind = "single" if state == "'" else "double"
            return (
                f"fabricops_verify_nccl_launcher puts {{{name}}} inside {kind} quotes, which the value's own "
                f"shell quoting would break; write {{{name}}} bare instead of {state}{{{name}}}{state} "
                "(every value is quoted for you)."
            )
        word += "x"  # a placeholder is part of the word it stands in
    if state:
        kind = "single" if state == "'" else "double"
        return f"fabricops_verify_nccl_launcher has an unterminated {kind} quote ({state}); close it."
    return None
