"""Lab side of the fabric services (docs/fabric-services.md, "The lab").

- :func:`opensm_deb`: the ``opensm`` package of the emulated MLNX_OFED (``/usr/sbin/opensm``,
  ``opensmd.service``, ``/etc/opensm/``); ``ofed_repo.packages()`` appends it (hook).
- :func:`fm_debs` / :func:`prepare`: a flat apt repository of ``nvidia-fabricmanager-<branch>``
  packages served with the MLNX_OFED repository at ``http://198.51.100.1:8080/nvidia-fabricmanager/``;
  it holds :data:`FM_VERSIONS`, i.e. the lab driver's version and an older one.
- :func:`imex_debs`: ``nvidia-imex-<branch>`` packages (``nvidia-imex``, ``nvidia-imex-ctl``,
  ``nvidia-imex.service``, ``/etc/nvidia-imex/config.cfg``) in the same repository, one per
  :data:`FM_VERSIONS` entry (emul/imex.py; docs/lab-fidelity.md, "GB200 / GB300 NVL72 compute trays").
- :func:`nvlsm_debs`: ``nvlsm`` (its own version, :data:`NVLSM_VERSIONS`) and ``libnvsdm-<branch>`` (one per
  :data:`FM_VERSIONS` entry), what HGX B200/B300 install beside the fabric manager, in the same repository;
  the fabric manager's ``nv-fabricmanager`` is the front-end of emul/nvlsm.py, which starts nvlsm first on a
  host with NVSwitch management ports (:func:`mark_nvlink5_hosts`; docs/lab-fidelity.md, "HGX B200").
- :func:`install_driver_source` (from :func:`prepare`): on NVL72 trays, the driver's apt source (this
  repository, as NVIDIA's CUDA repository is on a real tray), from which the nvidia_imex role installs;
  a tray of the ``rpm`` variant gets its dnf source instead (rpm_repo.install_driver_source).
- :func:`install_into_root`: what every host gets at boot (hook in ``hosts.install_emulated_software``):
  the emulated ``modprobe``/``lsmod``/``rmmod`` front-ends, the ``emulated-hw-sm`` path unit and the
  emulated NVIDIA driver's boot step (``emulated-nvidia-driver.service``: /proc/devices and IMEX channel0).
- :func:`attach_host` / :func:`detach_host`: for a *running* lab: refresh a host's emulated
  software, bind the SM wire writable and set ``subnet_manager`` / ``fabric_manager`` in its
  ``hardware.json`` (the integration test uses this before the default topology flips).
- :func:`set_driver_version`: the ``driver-version`` fault (driver updated, fabric manager not).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from fabricops.errors import FabricopsError
from fabricops_lab import ofed_repo, paths

DATA = Path(__file__).resolve().parent / "data" / "fabric_services"
#: Fabric manager versions the lab repository offers (the driver the lab installs is 550.54.15).
FM_VERSIONS: tuple[str, ...] = ("550.54.14", "550.54.15")
FM_REPO = "nvidia-fabricmanager"
OPENSM_VERSION = "5.18.0.MLNX20240128.3f266a48-0.1.2410114"
MODULE_TOOLS = ("modprobe", "lsmod", "rmmod", "modinfo")
SM_UNITS = ("emulated-hw-sm.path", "emulated-hw-sm.service")
DRIVER_UNIT = "emulated-nvidia-driver.service"
DRIVER_TOOL = "emulated-nvidia-driver-load"


#: nvlsm as NVIDIA's CUDA repository versions it (its own calendar version, ``<version>-1``): 2025.06.5
#: (siderolabs/extensions#893) and 2025.06.6 (bottlerocket-kernel-kit's nvlsm spec:
#: nvlsm-2025.06.6-1.x86_64.rpm from developer.download.nvidia.com/compute/cuda/repos/rhel9).
NVLSM_VERSIONS: tuple[str, ...] = ("2025.06.5", "2025.06.6")


def wrapper(tool: str, vendor: str, template: str = "wrapper.py.in") -> bytes:
    text = (DATA / template).read_text().replace("@TOOL@", tool).replace("@VENDOR@", vendor)
    return text.encode()


def opensm_deb(version: str) -> ofed_repo.Deb:
    """The emulated MLNX_OFED ``opensm`` package for an MLNX_OFED version."""
    major, _ = ofed_repo._split(version)
    files = {
        "usr/sbin/opensm": (wrapper("opensm", "MLNX_OFED opensm"), 0o755),
        "lib/systemd/system/opensmd.service": ((DATA / "opensmd.service").read_bytes(), 0o644),
        "etc/opensm/.keep": (b"", 0o644),
        "var/cache/opensm/.keep": (b"", 0o644),
    }
    return ofed_repo.Deb("opensm", f"{OPENSM_VERSION.rsplit('-', 1)[0]}-0.1.{major.replace('.', '')}",
                         "", "An InfiniBand subnet manager (opensm, opensmd.service)", files, {})


def fm_debs(versions: tuple[str, ...] = FM_VERSIONS) -> list[ofed_repo.Deb]:
    debs = []
    for v in versions:
        branch = v.split(".")[0]
        files = {
            # emul/nvlsm.py: the start step (nvlsm first where NVSwitch management ports are), then
            # emul/services.py's fabric manager
            "usr/bin/nv-fabricmanager":
                (wrapper("nv-fabricmanager", f"nvidia-fabricmanager-{branch}", "nvlsm-wrapper.py.in"), 0o755),
            "lib/systemd/system/nvidia-fabricmanager.service":
                ((DATA / "nvidia-fabricmanager.service").read_bytes(), 0o644),
            # the lab's stand-in for the control-group kill a lab host's systemd cannot do (the file says)
            "lib/systemd/system/nvidia-fabricmanager.service.d/fabricops-lab.conf":
                ((DATA / "nvidia-fabricmanager-lab.conf").read_bytes(), 0o644),
            "usr/share/nvidia/nvswitch/fabricmanager.cfg": ((DATA / "fabricmanager.cfg").read_bytes(), 0o644),
            "usr/share/nvidia/nvswitch/emulated-version": (f"{v}\n".encode(), 0o644),
        }
        debs.append(ofed_repo.Deb(f"nvidia-fabricmanager-{branch}", f"{v}-1", "",
                                  "Fabric Manager for NVSwitch based systems", files, {},
                                  conffiles=("/usr/share/nvidia/nvswitch/fabricmanager.cfg",),
                                  section="multiverse/devel"))
    return debs


def imex_debs(versions: tuple[str, ...] = FM_VERSIONS) -> list[ofed_repo.Deb]:
    """``nvidia-imex-<branch>`` at each driver version (NVIDIA's CUDA repositories version them
    ``<driver>-1``, as the fabric manager: gpu_platforms.yml ``imex``)."""
    debs = []
    for v in versions:
        branch = v.split(".")[0]
        vendor = f"nvidia-imex-{branch}"
        files = {
            "usr/bin/nvidia-imex": (wrapper("nvidia-imex", vendor), 0o755),
            "usr/bin/nvidia-imex-ctl": (wrapper("nvidia-imex-ctl", vendor), 0o755),
            "lib/systemd/system/nvidia-imex.service": ((DATA / "nvidia-imex.service").read_bytes(), 0o644),
            "etc/nvidia-imex/config.cfg": ((DATA / "imex-config.cfg").read_bytes(), 0o644),
            "usr/share/nvidia-imex/emulated-version": (f"{v}\n".encode(), 0o644),
        }
        debs.append(ofed_repo.Deb(vendor, f"{v}-1", "", "NVIDIA IMEX for multi-node NVLink", files, {},
                                  conffiles=("/etc/nvidia-imex/config.cfg",), section="multiverse/devel"))
    return debs


def nvlsm_debs(versions: tuple[str, ...] = FM_VERSIONS,
               nvlsm_versions: tuple[str, ...] = NVLSM_VERSIONS) -> list[ofed_repo.Deb]:
    """``nvlsm`` at each of ``nvlsm_versions`` and ``libnvsdm-<branch>`` at each driver version
    (``<driver>-1``, NVIDIA/gpu-driver-container#246). nvlsm's files are where NVIDIA's package puts
    them (/opt/nvidia/nvlsm/sbin/nvlsm, /usr/share/nvidia/nvlsm/nvlsm.conf; no systemd unit: the fabric
    manager's start step runs it). libnvsdm's contents are in none of our sources: it ships a marker."""
    debs = []
    for v in nvlsm_versions:
        files = {
            "opt/nvidia/nvlsm/sbin/nvlsm": (wrapper("nvlsm", "nvlsm", "nvlsm-wrapper.py.in"), 0o755),
            "usr/share/nvidia/nvlsm/nvlsm.conf": ((DATA / "nvlsm.conf").read_bytes(), 0o644),
            "usr/share/nvidia/nvlsm/emulated-version": (f"{v}\n".encode(), 0o644),
        }
        debs.append(ofed_repo.Deb("nvlsm", f"{v}-1", "", "NVIDIA NVLink subnet manager (NVLSM)", files, {},
                                  section="multiverse/devel"))
    for v in versions:
        branch = v.split(".")[0]
        files = {f"usr/share/doc/libnvsdm-{branch}/emulated-version": (f"{v}\n".encode(), 0o644)}
        debs.append(ofed_repo.Deb(f"libnvsdm-{branch}", f"{v}-1", "", "libnvsdm (fabricops lab, emulated)",
                                  files, {}, section="multiverse/libs"))
    return debs


def data_digest() -> str:
    """sha256 over the packages' data files (units, configs, wrappers): a repository built from other
    ones is rebuilt by :func:`prepare`."""
    h = hashlib.sha256()
    for f in sorted(DATA.iterdir()):
        if f.is_file():
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def build_fm_repo(out: Path, versions: tuple[str, ...] = FM_VERSIONS,
                  darch: str | None = None) -> dict[str, Any]:
    """Build the flat apt repository into ``out`` (replacing it) for dpkg architecture ``darch``
    (default: the controller's; the packages hold scripts and text only); return its manifest."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    arch = darch or ofed_repo.deb_arch()
    for deb in (*fm_debs(versions), *imex_debs(versions), *nvlsm_debs(versions)):
        ofed_repo.build_deb(deb, out, arch)
    ofed_repo.write_index(out, label="nvidia-fabricmanager (fabricops lab)", arch=arch)
    manifest = {**({"arch": darch} if darch else {}),
                "versions": list(versions), "packages": sorted({d.package for d in fm_debs(versions)}),
                "imex_packages": sorted({d.package for d in imex_debs(versions)}),
                "nvlsm_packages": [f"{d.package}={d.version}" for d in nvlsm_debs(versions)],
                "data_sha256": data_digest()}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def prepare(lab: dict[str, Any]) -> dict[str, Any]:
    """Build the fabric manager repository next to the MLNX_OFED one (call after
    ``ofed_repo.prepare``, whose rebuild clears ``repo_dir()``); return the group_vars facts
    (``fabricops_fabric_manager``): ``{"repo_url", "versions", "packages", "repo_key_url",
    "repo_key_sha256"}`` (the repository is signed with the lab's key)."""
    out = paths.repo_dir() / FM_REPO
    cfg = lab.get("fabric_manager_build") or {}
    versions = tuple(cfg.get("versions") or FM_VERSIONS)
    manifest_path = out / "manifest.json"
    manifest = None
    if manifest_path.is_file():
        try:
            manifest = json.loads(manifest_path.read_text())
        except ValueError:
            manifest = None
    want_nvlsm = [f"{d.package}={d.version}" for d in nvlsm_debs(versions)]
    if (not manifest or manifest.get("versions") != list(versions) or "imex_packages" not in manifest
            or manifest.get("nvlsm_packages") != want_nvlsm or manifest.get("data_sha256") != data_digest()):
        manifest = build_fm_repo(out, versions)
    # Signed like a real repository (roles write signed-by; ofed_repo.sign_repo): the key is served
    # next to the MLNX_OFED one and handed to nvidia_fabric_manager through these facts.
    key_sha256 = ofed_repo.export_key(paths.repo_dir() / ofed_repo.KEY_FILE)
    ofed_repo.sign_repo(out)
    base = f"http://{ofed_repo.CONTROLLER_IP}:{ofed_repo.HTTP_PORT}"
    by_arch = prepare_arches(lab, manifest, versions, base)
    install_driver_source(lab, f"{base}/{FM_REPO}")
    mark_nvlink5_hosts(lab)
    return {"repo_url": f"{base}/{FM_REPO}", "versions": list(versions), "packages": manifest["packages"],
            "repo_key_url": f"{base}/{ofed_repo.KEY_FILE}", "repo_key_sha256": key_sha256,
            **({"by_arch": by_arch} if by_arch else {})}


def prepare_arches(lab: dict[str, Any], manifest: dict[str, Any], versions: tuple[str, ...],
                   base: str) -> dict[str, Any]:
    """The same repository for each other architecture of the topology's hosts (``arch: arm64``) at
    ``nvidia-fabricmanager-<darch>/``, signed; ``{DARCH: {"repo_url"}}`` (none for the default rack)."""
    out: dict[str, Any] = {}
    for darch in ofed_repo.topology_arches(lab.get("topology"))[1:]:
        repo = paths.repo_dir() / f"{FM_REPO}-{darch}"
        try:
            have = json.loads((repo / "manifest.json").read_text())
        except (OSError, ValueError):
            have = None
        if have != {**manifest, "arch": darch}:
            build_fm_repo(repo, versions, darch)
        ofed_repo.sign_repo(repo)
        out[darch] = {"repo_url": f"{base}/{FM_REPO}-{darch}"}
    return out


#: The apt source an NVL72 tray's driver was installed from (NVIDIA's CUDA repository, which carries
#: nvidia-imex-<branch>; the nvidia_imex role installs from the sources a host has, as on a real tray).
DRIVER_SOURCE = "etc/apt/sources.list.d/nvidia-cuda.list"
DRIVER_KEYRING = "usr/share/keyrings/nvidia-cuda-lab.gpg"


def install_driver_source(lab: dict[str, Any], repo_url: str) -> None:
    """On every NVL72 tray (a host with an ``nvlink_domain``): the driver's apt source (the lab's
    repository, signed with its key) and its package lists, as a driver installed from NVIDIA's CUDA
    repository leaves them. HGX hosts get nothing (their fabric manager role brings its own source), nor
    does a tray of the ``rpm`` variant (its dnf source: rpm_repo.install_driver_source)."""
    from fabricops_lab import hosts

    key = paths.repo_dir() / ofed_repo.KEY_FILE
    for h in (lab.get("topology") or {}).get("hosts") or []:
        root = paths.host_dir(h["name"]) / "root"
        if not h.get("nvlink_domain") or not (root / "etc").is_dir() or not key.is_file():
            continue
        if (h.get("variant") or "default") == "rpm":
            continue
        (root / DRIVER_KEYRING).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(key, root / DRIVER_KEYRING)
        (root / DRIVER_SOURCE).write_text(
            f"# the NVIDIA driver's repository (fabricops lab: emulated CUDA repository)\n"
            f"deb [signed-by=/{DRIVER_KEYRING}] {repo_url} ./\n"
        )
        try:
            update = ["apt-get", "update", "-qq", "-o", f"Dir::Etc::sourcelist=/{DRIVER_SOURCE}",
                      "-o", "Dir::Etc::sourceparts=-", "-o", "APT::Get::List-Cleanup=0"]
            hosts.host_exec(h["name"], update, check=False, timeout=120)
        except FabricopsError:
            continue  # a host that is not running: the source is in its root, the role reads it stale


# --- HGX B200: NVSwitch management ports ------------------------------------------------------

#: NVSwitch management functions ("LPF", VPD SMDL=SW_MNG) an HGX B200 baseboard shows the host: four in
#: the siderolabs/extensions#893 and #895 logs of HGX/DGX B200 (mlx5_0..3 on a DGX B200).
NVSWITCH_MGMT_PORTS = 4


def nvlink5_hgx(host: dict[str, Any]) -> bool:
    """An HGX board of NVLink 5 GPUs behind NVSwitches (B200/B300), not an NVL72 tray (whose switches are
    in the NVLink switch trays and managed there)."""
    g = host.get("gpus") or {}
    return (g.get("count", 0) > 0 and g.get("nvlink_gen") == 5 and g.get("topology") == "nvswitch"
            and not host.get("nvlink_domain"))


def mgmt_ports(host: dict[str, Any]) -> list[dict[str, Any]]:
    """The host's NVSwitch management ports: devices numbered after its HCAs, port GUIDs derived from
    its index (ConnectX-7 GUID prefix e09d73, as in the DGX B200 capture of siderolabs/extensions)."""
    first = len(host.get("hcas") or [])
    return [{"device": f"mlx5_{first + k}", "port": 1,
             "guid": f"0xe09d730300{int(host.get('index', 0)) & 0xff:02x}{k:04x}"}
            for k in range(NVSWITCH_MGMT_PORTS)]


def mark_nvlink5_hosts(lab: dict[str, Any]) -> None:
    """hardware.json of every HGX B200/B300 host: its NVSwitch management ports (emul/nvlsm.py) and a fabric
    manager it must run (nvidia-smi's fabric state follows it, emul/services.py ``fabric_state``).
    From :func:`prepare`, i.e. after every (re)start, which rewrites hardware.json."""
    for h in (lab.get("topology") or {}).get("hosts") or []:
        if nvlink5_hgx(h) and _hw_file(h["name"]).is_file():
            _update_hw(h["name"], {"fabric_manager": {"required": True},
                                   "nvswitch_mgmt_ports": mgmt_ports(h)})


# --- hosts ------------------------------------------------------------------------------------

def install_into_root(root: Path) -> None:
    """Module front-ends in /usr/local/sbin and the SM path unit (enabled), into a host root."""
    sbin = root / "usr/local/sbin"
    sbin.mkdir(parents=True, exist_ok=True)
    for tool in (*MODULE_TOOLS, "emulated-hw-sm-sync", DRIVER_TOOL):
        target = sbin / tool
        target.write_bytes(wrapper(tool, "the fabricops lab (emulated kernel modules)"))
        target.chmod(0o755)
    units = root / "etc/systemd/system"
    units.mkdir(parents=True, exist_ok=True)
    for unit in SM_UNITS:
        (units / unit).write_bytes((DATA / unit).read_bytes())
    wants = units / "paths.target.wants"
    wants.mkdir(exist_ok=True)
    link = wants / "emulated-hw-sm.path"
    if not link.is_symlink():
        link.symlink_to("/etc/systemd/system/emulated-hw-sm.path")
    # the emulated NVIDIA driver's load at every boot: /proc/devices lists nvidia-caps-imex-channels
    # and channel0 exists only if modprobe.d asks the driver for it (emul/imex.py driver_load)
    (units / DRIVER_UNIT).write_bytes((DATA / DRIVER_UNIT).read_bytes())
    boot = units / "multi-user.target.wants"
    boot.mkdir(exist_ok=True)
    link = boot / DRIVER_UNIT
    if not link.is_symlink():
        link.symlink_to(f"/etc/systemd/system/{DRIVER_UNIT}")


def _hw_file(name: str) -> Path:
    return paths.host_dir(name) / "hw" / "hardware.json"


def _update_hw(name: str, changes: dict[str, Any]) -> None:
    path = _hw_file(name)
    hw = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            hw.pop(key, None)
        else:
            hw[key] = value
    path.write_text(json.dumps(hw, indent=2, sort_keys=True) + "\n")


def sm_wire_dir() -> Path:
    return paths.fabric_dir() / "sm"


def attach_host(name: str, *, subnet_manager: str | None = "hosts",
                fabric_manager_required: bool = False) -> None:
    """Give a running host the current emulated software and the fabric-services flags."""
    from fabricops_lab import hosts

    root = paths.host_dir(name) / "root"
    if not root.is_dir():
        raise FabricopsError(f"{name}: no such lab host (is the lab up?)")
    target = root / hosts.EMUL_TARGET
    if (target / "emul").exists():
        shutil.rmtree(target / "emul")
    shutil.copytree(paths.EMUL_DIR, target / "emul", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy2(paths.EMUL_DIR / "hwctl.py", target / "hwctl.py")
    install_into_root(root)
    sminfo = root / "usr/sbin/sminfo"  # infiniband-diags' sminfo, until emul/tools.py lists it (hook)
    if (root / "usr/bin/ibstat").exists() and not sminfo.exists():
        sminfo.write_bytes(wrapper("sminfo", "MLNX_OFED infiniband-diags"))
        sminfo.chmod(0o755)
    wire = sm_wire_dir()
    (wire / "heartbeat").mkdir(parents=True, exist_ok=True)
    mount = ("mountpoint -q /var/lib/emulated-fabric/sm || { mount --bind /var/lib/emulated-fabric/sm "
             "/var/lib/emulated-fabric/sm && mount -o remount,bind,rw /var/lib/emulated-fabric/sm; }")
    hosts.host_exec(name, ["sh", "-c", mount])
    _update_hw(name, {"subnet_manager": subnet_manager,
                      "fabric_manager": {"required": True} if fabric_manager_required else None})
    hosts.host_exec(name, ["systemctl", "daemon-reload"])
    hosts.host_exec(name, ["systemctl", "enable", "--now", "emulated-hw-sm.path"])
    hosts.host_exec(name, ["/usr/local/sbin/emulated-hw-sm-sync"])


def detach_host(name: str) -> None:
    """Back to the default: the switch runs the SM, the fabric manager is not modelled."""
    from fabricops_lab import hosts

    _update_hw(name, {"subnet_manager": None, "fabric_manager": None})
    hosts.host_exec(name, ["/usr/local/sbin/emulated-hw-sm-sync"], check=False)


def reset_subnet(subnet: str) -> None:
    """Forget that a subnet was swept (as after a fabric power cycle); only with no SM running."""
    path = sm_wire_dir() / f"{subnet}.json"
    if path.exists():
        data = json.loads(path.read_text())
        if data.get("sms"):
            raise FabricopsError(f"subnet {subnet} still has SMs registered: {', '.join(data['sms'])}")
        path.unlink()


def install_opensm(name: str, version: str | None = None) -> None:
    """Install the opensm package into a running host with dpkg, as mlnxofedinstall does once
    ``ofed_repo`` ships it (until then the lab's MLNX_OFED lacks it)."""
    from fabricops_lab import hosts

    version = version or ofed_repo.DEFAULT_VERSION
    deb_dir = paths.host_dir(name) / "root" / "var" / "cache" / "fabricops-opensm"  # /tmp is a tmpfs
    deb_dir.mkdir(parents=True, exist_ok=True)
    deb = ofed_repo.build_deb(opensm_deb(version), deb_dir, ofed_repo.deb_arch())
    hosts.host_exec(name, ["dpkg", "-i", f"/var/cache/fabricops-opensm/{deb.name}"])


def set_driver_version(name: str, version: str | None) -> None:
    """Fault ``driver-version VERSION``: the driver was updated and the fabric manager repository
    lags (None: back to the lab's driver). Resync the host afterwards."""
    _update_hw(name, {"driver_version": version or "550.54.15"})

