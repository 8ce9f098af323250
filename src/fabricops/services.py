"""Fabric services: InfiniBand subnet manager (OpenSM), NVSwitch fabric manager, GPUDirect RDMA,
and which GPU platform needs which host service (``model/data/gpu_platforms.yml``, the one table).

Pure logic for the roles ``subnet_manager``, ``nvidia_fabric_manager`` and ``gpudirect``
(docs/fabric-services.md); the Ansible filters in ``plugins/filter/fabric_services.py`` are thin
shims over these functions. No Ansible and no I/O here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from fabricops.model import _data
from fabricops.parsers.sminfo import SmInfo, normalise_guid

# --- subnet manager -----------------------------------------------------------------------------

#: Routing engines OpenSM ships (opensm(8) ``-R``); the role accepts these as an override.
ROUTING_ENGINES = ("minhop", "updn", "dnup", "file", "ftree", "lash", "dor", "torus-2QoS", "dfsssp",
                   "sssp", "chain", "nue", "ar_updn", "ar_ftree")

#: Topology -> routing engine: ftree for fat trees (needs the tree, finds roots itself), updn for
#: other multi-switch fabrics (deadlock-free on any graph), minhop for one switch (opensm's default).
TOPOLOGY_ROUTING = {"fat_tree": "ftree", "single_switch": "minhop", "other": "updn"}

#: What opensm.conf keys the role writes, in file order (opensm -c writes the same names).
CONF_KEYS = ("guid", "sm_priority", "routing_engine", "sweep_interval", "log_file", "log_max_size",
             "partition_config_file", "root_guid_file")

SM_STATE_MASTER = 3


def routing_engine(topology: str, override: str | None = None) -> str:
    """The routing engine for a topology (``fat_tree`` | ``single_switch`` | ``other``)."""
    if override:
        if override.split(",")[0] not in ROUTING_ENGINES:
            known = ", ".join(ROUTING_ENGINES)
            raise ValueError(f"routing engine {override!r} is not one of OpenSM's: {known}")
        return override
    if topology not in TOPOLOGY_ROUTING:
        raise ValueError(f"topology {topology!r} is not one of {', '.join(TOPOLOGY_ROUTING)}")
    return TOPOLOGY_ROUTING[topology]


def port_guid_from_gid(gid: str) -> str:
    """The port GUID in a port's link-local GID 0 (fe80::<guid>) as ``0x`` + 16 hex digits."""
    digits = gid.replace(":", "").lower()
    if len(digits) != 32 or not digits.startswith("fe80"):
        raise ValueError(f"{gid!r} is not a link-local GID")
    return "0x" + digits[16:]


def ib_ports(fabric: dict[str, Any]) -> list[dict[str, Any]]:
    """InfiniBand ports from ``ansible_facts.fabric``: hca, port, netdev, state, phys_state, guid."""
    out = []
    for hca in fabric.get("hcas") or []:
        for port in hca.get("ports") or []:
            if port.get("link_layer") != "InfiniBand":
                continue
            gid0 = next((g.get("gid") for g in port.get("gids") or [] if int(g.get("index", -1)) == 0), None)
            guid = None
            if gid0:
                try:
                    guid = port_guid_from_gid(gid0)
                except ValueError:
                    guid = None
            if guid is None and port.get("port") == 1 and hca.get("node_guid"):
                guid = normalise_guid(hca["node_guid"])  # mlx5: port 1's GUID is the node GUID
            out.append({"hca": hca.get("name"), "port": port.get("port"), "netdev": port.get("netdev"),
                        "state": port.get("state"), "phys_state": port.get("phys_state"), "guid": guid})
    return out


def bind_port(fabric: dict[str, Any], port_guid: str | None = None, hca: str | None = None) -> dict[str, Any]:
    """The local IB port OpenSM binds to: the one with ``port_guid``, else the first port of ``hca``
    (or of any HCA) whose physical link is up. Raises ValueError with a reason."""
    ports = ib_ports(fabric)
    if not ports:
        raise ValueError("no InfiniBand port on this host: OpenSM needs one to bind to")
    if port_guid:
        want = normalise_guid(port_guid)
        found = next((p for p in ports if p["guid"] == want), None)
        if found is None:
            have = ", ".join(f"{p['hca']}/{p['port']}={p['guid']}" for p in ports)
            raise ValueError(f"no local InfiniBand port has GUID {want} (ports: {have})")
        return found
    cands = [p for p in ports if hca in (None, "", p["hca"])]
    if not cands:
        raise ValueError(f"no InfiniBand port on HCA {hca}")
    up = [p for p in cands if p["phys_state"] == "LinkUp"]
    if not up:
        raise ValueError("no InfiniBand port with a physical link (phys_state LinkUp): check cables")
    return up[0]


def plan_errors(sms: list[dict[str, Any]]) -> list[str]:
    """Errors in the fabric-wide SM plan: ``[{host, priority, guid}]`` for every host that runs OpenSM
    on one subnet. Priorities 0..15, no two SMs with the same priority (the SM spec would then
    elect by lowest GUID, silently; we refuse), no GUID twice, at least one SM."""
    errors: list[str] = []
    if not sms:
        return ["no host is designated to run OpenSM (subnet_manager_hosts / subnet_manager_priority)"]
    seen_prio: dict[int, str] = {}
    seen_guid: dict[str, str] = {}
    for sm in sms:
        host = str(sm.get("host"))
        try:
            prio = int(sm.get("priority"))
        except (TypeError, ValueError):
            errors.append(f"{host}: subnet_manager_priority {sm.get('priority')!r} is not a number 0..15")
            continue
        if not 0 <= prio <= 15:
            errors.append(f"{host}: subnet_manager_priority {prio} is outside 0..15")
        elif prio in seen_prio:
            errors.append(f"{host} and {seen_prio[prio]} both run OpenSM with priority {prio}: give the "
                          "master a higher priority than the standby (e.g. 15 and 14)")
        else:
            seen_prio[prio] = host
        guid = sm.get("guid")
        if guid:
            g = normalise_guid(str(guid))
            if g in seen_guid:
                errors.append(f"{host} and {seen_guid[g]} bind OpenSM to the same port GUID {g}")
            seen_guid[g] = host
    return errors


def conflict(sminfo: SmInfo | None, priority: int, guid: str) -> str | None:
    """A running SM that this one must not join: a *different* port with the same priority.
    ``sminfo`` is what the subnet reports now (None: no SM answered)."""
    if sminfo is None:
        return None
    if normalise_guid(sminfo.guid) == normalise_guid(guid):
        return None
    if sminfo.priority == int(priority) and sminfo.state in (2, SM_STATE_MASTER):
        return (f"another SM ({sminfo.state_name}, guid {sminfo.guid}, lid {sminfo.lid}) already runs with "
                f"priority {priority}: refusing to start a second SM of the same priority")
    return None


def render_conf(guid: str, priority: int, engine: str, *, sweep_interval: int = 10,
                log_file: str = "/var/log/opensm.log", log_max_size: int = 0,
                partition_config_file: str = "/etc/opensm/partitions.conf",
                root_guid_file: str | None = None, header: str = "") -> str:
    """opensm.conf (the format ``opensm -c`` writes: ``# comment`` lines and ``key value``)."""
    if not 0 <= int(priority) <= 15:
        raise ValueError(f"sm_priority {priority} is outside 0..15")
    routing_engine(engine.split(",")[0] if engine in ROUTING_ENGINES else "other", engine)
    lines = [f"# {ln}" if ln else "#" for ln in header.splitlines()] if header else []
    values = {
        "guid": normalise_guid(guid),
        "sm_priority": str(int(priority)),
        "routing_engine": engine,
        "sweep_interval": str(int(sweep_interval)),
        "log_file": log_file,
        "log_max_size": str(int(log_max_size)),
        "partition_config_file": partition_config_file,
        "root_guid_file": root_guid_file or "(null)",
    }
    notes = {
        "guid": "The port GUID on which the OpenSM is running",
        "sm_priority": "SM priority used for deciding who is the master (0..15, 15 highest)",
        "routing_engine": "Routing engine",
        "sweep_interval": "The number of seconds between subnet sweeps (0 disables it)",
        "log_file": "Log file to be used",
        "log_max_size": "Limit the size of the log file in MB (0: unlimited)",
        "partition_config_file": "Partition configuration file to be used",
        "root_guid_file": "The file holding the root node guids (for fat-tree or Up/Down)",
    }
    for key in CONF_KEYS:
        lines += [f"# {notes[key]}", f"{key} {values[key]}", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def parse_conf(text: str) -> dict[str, str]:
    """``key value`` lines of an opensm.conf (comments and blank lines skipped)."""
    out: dict[str, str] = {}
    for raw in text.replace("\r", "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        out[key] = value.strip()
    return out


def verify(sminfo: SmInfo | None, ports: list[dict[str, Any]], expected_master_guid: str | None = None,
           expected_priority: int | None = None) -> list[str]:
    """Verification of a subnet: exactly one master answers, it is the expected one, and every IB
    port that has a physical link is ACTIVE. Returns the failures (empty: verified)."""
    errors: list[str] = []
    if sminfo is None:
        errors.append("no subnet manager answers sminfo on this subnet")
    elif sminfo.state != SM_STATE_MASTER:
        errors.append(f"the SM that answers is {sminfo.state_name}, not SMINFO_MASTER")
    else:
        if expected_master_guid and normalise_guid(sminfo.guid) != normalise_guid(expected_master_guid):
            errors.append(f"the master SM is {sminfo.guid}, expected {normalise_guid(expected_master_guid)}")
        if expected_priority is not None and sminfo.priority != int(expected_priority):
            errors.append(f"the master SM has priority {sminfo.priority}, expected {expected_priority}")
    for p in ports:
        if p.get("phys_state") == "LinkUp" and p.get("state") != "ACTIVE":
            errors.append(f"{p.get('hca')}/{p.get('port')} is {p.get('state')} with a physical link: "
                          "no SM has brought it to ACTIVE")
    return errors


# --- NVIDIA fabric manager ----------------------------------------------------------------------

_DRIVER = re.compile(r"^(\d{3,4})\.(\d+)(?:\.(\d+))?$")


def driver_branch(driver_version: str) -> str:
    """'550.54.15' -> '550' (the package name suffix NVIDIA uses: nvidia-fabricmanager-550)."""
    m = _DRIVER.match(str(driver_version or "").strip())
    if not m:
        raise ValueError(f"{driver_version!r} is not an NVIDIA driver version like 550.54.15")
    return m.group(1)


def fm_package(driver_version: str, pattern: str = "nvidia-fabricmanager-{branch}") -> str:
    return pattern.format(branch=driver_branch(driver_version))


def fm_installed(listing: str, package: str) -> dict[str, dict[str, Any]]:
    """One package from ``dpkg-query -W -f='${Package}|${Version}|${Status}\\n' PATTERN`` output ("|":
    no package name, Debian version or dpkg status word holds one), as the two reads
    ``dpkg-query -W -f=${Version} PACKAGE`` and ``-f=${Status}`` would have given it: ``{"version":
    {"rc", "stdout"}, "selection": {"rc", "stdout"}}``, rc 0 when dpkg lists the package (its
    version may be empty: known, not installed), 1 when it does not."""
    for line in (listing or "").splitlines():
        name, sep, rest = line.partition("|")
        if sep and name == package:
            version, _, status = rest.partition("|")
            return {"version": {"rc": 0, "stdout": version}, "selection": {"rc": 0, "stdout": status}}
    return {"version": {"rc": 1, "stdout": ""}, "selection": {"rc": 1, "stdout": ""}}


def upstream(deb_version: str) -> str:
    """'550.54.15-1' -> '550.54.15'; '1:550.54.15-1ubuntu1' -> '550.54.15'."""
    v = str(deb_version).split(":", 1)[-1]
    return v.rsplit("-", 1)[0] if "-" in v else v


def fm_choice(driver_version: str, available: list[str], installed: str | None = None,
              label: str = "nvidia-fabricmanager", noun: str = "fabric manager") -> dict[str, Any]:
    """Which fabric manager package version to install for a driver: exactly the driver's.

    ``available``: Debian versions the repository offers (``apt-cache madison``);
    ``installed``: the installed package's Debian version or None. Returns ``{"ok", "version"
    (Debian version to install, or the installed one), "change" (bool), "msg"}``; ``ok`` False means
    fail and change nothing, with both versions named in ``msg``."""
    want = str(driver_version).strip()
    driver_branch(want)
    if installed and upstream(installed) == want:
        return {"ok": True, "version": installed, "change": False,
                "msg": f"{label} {upstream(installed)} matches driver {want}"}
    match = sorted((v for v in available if upstream(v) == want), reverse=True)
    if installed and not match:
        return {"ok": False, "version": None, "change": False,
                "msg": (f"{label} {upstream(installed)} is installed but the driver is {want}, "
                        f"and the repository has no {noun} {want} "
                        f"(it offers {', '.join(sorted({upstream(v) for v in available})) or 'none'})")}
    if not match:
        offers = ", ".join(sorted({upstream(v) for v in available})) or "no version"
        return {"ok": False, "version": None, "change": False,
                "msg": (f"driver {want} needs {label} {want} exactly, but the repository "
                        f"offers {offers}: {noun} {offers} does not match driver {want}")}
    return {"ok": True, "version": match[0], "change": True,
            "msg": (f"install {label} {upstream(match[0])} for driver {want}"
                    + (f" (replacing {upstream(installed)})" if installed else ""))}


#: rpm's query format for what the roles read of installed packages on the RHEL family: the line
#: ``dpkg-query -W -f='${Package}|${Version}|${Status}\n'`` gives on Debian (fm_installed reads both). rpm
#: lists only installed packages (its database has no "known, not installed" or "held" state: dnf's
#: versionlock list holds the hold), so every line's status is "install ok installed".
RPM_QUERY_FORMAT = "%{NAME}|%{VERSION}-%{RELEASE}|install ok installed\n"

_LOCK = re.compile(r"^(?P<name>.+)-(?:(?P<epoch>\d+):)?(?P<version>[^-:]+-[^-:]+)\.(?P<arch>[^.\s]+)$")


def versionlock_versions(text: str, package: str) -> list[str]:
    """The ``<version>-<release>`` values dnf's versionlock plugin locks PACKAGE to, from its list file
    (``/etc/dnf/plugins/versionlock.list``). ``dnf versionlock add`` writes one ``name-epoch:version-
    release.arch`` line per package (dnf-plugins-core ``versionlock.py`` ``pkgtup2spec``: arch ``*``);
    ``#`` lines are comments and ``!`` lines excludes (``dnf versionlock exclude``), not locks."""
    out = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        m = _LOCK.match(line)
        if m and m.group("name") == package and m.group("version") not in out:
            out.append(m.group("version"))
    return out


def is_nvswitch_system(q_gpus: list[dict[str, Any]]) -> bool:
    """From ``nvidia-smi -q`` (parsed): GPUs whose Fabric section reports a state (N/A elsewhere)."""
    return any(g.get("fabric_state") for g in q_gpus)


def fabric_errors(q_gpus: list[dict[str, Any]]) -> list[str]:
    """GPUs whose fabric is not ``Completed`` / ``Success``."""
    out = []
    for g in q_gpus:
        state, status = g.get("fabric_state"), g.get("fabric_status")
        if state and (state, status) != ("Completed", "Success"):
            out.append(f"GPU {g.get('pci_bus_id')}: Fabric State {state}, Status {status}")
    return out


# --- fabric services per GPU platform (data: model/data/gpu_platforms.yml) ------------------------

#: The host services a platform can need, in install order.
SERVICES = ("fabric_manager", "nvlink_subnet_manager", "imex")


@dataclass(frozen=True)
class PlatformServices:
    """What one GPU platform runs on its hosts for its NVLink fabric."""

    platform: str
    label: str  #: "GB200 NVL72"
    services: tuple[str, ...]  #: subset of SERVICES, in install order; () for no NVSwitch
    instead: str | None  #: what replaces the host fabric manager where the table says so
    source: str

    @property
    def fabric_manager(self) -> bool:
        return "fabric_manager" in self.services


def platform_table() -> dict[str, PlatformServices]:
    """Every platform of ``gpu_platforms.yml``; raises ValueError where a row names an unknown service."""
    data = _data.load("gpu_platforms.yml")
    unknown = sorted(set(data["services"]) ^ set(SERVICES))
    if unknown:
        raise ValueError(f"gpu_platforms.yml: services {', '.join(unknown)} differ from "
                         f"{', '.join(SERVICES)}")
    out = {}
    for name, row in data["platforms"].items():
        services = tuple(row.get("services") or ())
        bad = [s for s in services if s not in SERVICES]
        if bad or len(set(services)) != len(services):
            raise ValueError(f"gpu_platforms.yml: platform {name} names services {services!r}")
        out[name] = PlatformServices(name, row["label"], tuple(s for s in SERVICES if s in services),
                                     row.get("instead"), row["source"])
    return out


def platform_services(platform: str) -> PlatformServices:
    """The row of one platform (``"hgx-b200"``); ValueError names the known ones."""
    table = platform_table()
    if platform not in table:
        raise ValueError(f"GPU platform {platform!r} is not one of {', '.join(sorted(table))}")
    return table[platform]


def profile_services(profile: str) -> PlatformServices | None:
    """The services of a hardware profile (a shipped name or a profile file); None when the profile
    names no platform (a profile file may leave it out: then nothing is decided from the table).
    Raises ValueError for a profile that does not load."""
    from fabricops.model.profiles import ProfileError, load_profile

    try:
        prof = load_profile(profile)
    except ProfileError as exc:
        raise ValueError(str(exc)) from None
    return platform_services(prof.platform) if prof.platform else None


def service_packages(service: str, driver_version: str) -> list[dict[str, str | None]]:
    """The packages of one service for a driver: ``[{name, version}]``, ``version`` the driver's
    upstream version where the table pins it to the driver, None where the package has its own."""
    data = _data.load("gpu_platforms.yml")["services"]
    if service not in data:
        raise ValueError(f"service {service!r} is not one of {', '.join(SERVICES)}")
    branch = driver_branch(driver_version)
    return [{"name": pkg["name"].format(branch=branch),
             "version": str(driver_version).strip() if pkg["version"] == "driver" else None}
            for pkg in data[service]["packages"]]


def fm_refusal(host: str, profile: str) -> str:
    """'' when the host fabric manager may run on ``profile`` (empty: no profile named, or one whose
    platform needs it or has no NVSwitch fabric at all), else the one sentence that refuses it."""
    if not profile:
        return ""
    try:
        row = profile_services(profile)
    except ValueError as exc:
        return f"{host}: {exc}"
    if row is None or row.fabric_manager or row.instead is None:
        return ""
    return (f"{host}: hardware profile {profile} is a {row.label} platform, which runs no host fabric "
            f"manager (starting one fails provisioning), so use {row.instead} instead and leave "
            "nvidia_fabric_manager off (fabricops_site_fabric_manager: false).")


def fm_companions(profile: str, driver_version: str, listing: str) -> list[dict[str, Any]]:
    """The packages the platform of ``profile`` needs beside the fabric manager (the NVLink subnet
    manager on B200/B300) that ``listing`` (``dpkg-query -W -f='${Package}|${Version}|${Status}\n'``
    output) does not show installed at the wanted version: ``[{name, version, spec}]``, ``spec`` the
    apt argument (``libnvsdm-570=570.124.06-*`` pins the driver's version; ``nvlsm`` any version)."""
    row = profile_services(profile) if profile else None
    if row is None:
        return []
    out = []
    for service in row.services:
        if service == "fabric_manager":
            continue  # the role's own choice (fm_choice): exactly the driver's version
        if service == "imex":
            raise ValueError(f"profile {profile}: IMEX is not the fabric manager's companion")
        for pkg in service_packages(service, driver_version):
            have = fm_installed(listing, pkg["name"])
            installed = have["version"]["rc"] == 0 and "ok installed" in have["selection"]["stdout"]
            version = have["version"]["stdout"]
            if installed and (pkg["version"] is None or upstream(version) == pkg["version"]):
                continue
            spec = pkg["name"] if pkg["version"] is None else f"{pkg['name']}={pkg['version']}-*"
            out.append({"name": pkg["name"], "version": pkg["version"], "spec": spec})
    return out


def fm_companion_patterns(profile: str) -> list[str]:
    """dpkg-query patterns for the companion packages of ``profile`` (``{branch}`` -> ``*``)."""
    row = profile_services(profile) if profile else None
    if row is None:
        return []
    data = _data.load("gpu_platforms.yml")["services"]
    return [pkg["name"].replace("{branch}", "*") for service in row.services
            if service not in ("fabric_manager", "imex") for pkg in data[service]["packages"]]


# --- GPUDirect RDMA -----------------------------------------------------------------------------

def lsmod_modules(text: str) -> list[str]:
    """Module names from ``lsmod`` (or /proc/modules) output."""
    names = []
    for line in text.replace("\r", "").splitlines():
        parts = line.split()
        if not parts or parts[0] == "Module":
            continue
        names.append(parts[0])
    return names


def gpudirect_applicable(fabric: dict[str, Any]) -> bool:
    """GPUs and RDMA HCAs on the same host."""
    return bool(fabric.get("gpu_count")) and bool(fabric.get("hcas"))
