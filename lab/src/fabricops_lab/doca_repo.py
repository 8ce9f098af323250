"""The lab's emulated DOCA-Host apt repositories (docs/lab-ofed.md, "DOCA-Host mirror, DKMS and
Secure Boot").

NVIDIA publishes DOCA-Host as flat apt repositories at
``https://linux.mellanox.com/public/repo/doca/<version>/<os>/<arch>/`` (e.g. ``.../doca/2.9.1-2/
ubuntu24.04/x86_64/``, a DGX OS install note found through the code index). The lab serves the
same shape under the MLNX_OFED HTTP server: ``http://198.51.100.1:8080/doca/<ver>/debian12/<arch>/``,
signed with the lab key (:func:`ofed_repo.sign_repo`).

Each release carries the DOCA-OFED userspace built the way :mod:`fabricops_lab.ofed_repo` builds
MLNX_OFED's (the same emulated tools; ``mft`` too once ``ofed_repo.packages`` has it), and differs
where DOCA-Host differs:

- the kernel part is **only** ``mlnx-ofed-kernel-dkms`` (sources + ``dkms.conf``; its postinst runs
  Debian's ``/usr/lib/dkms/common.postinst``, which builds and installs for the running and the
  newest kernel with headers), no prebuilt ``mlnx-ofed-kernel-modules``; DOCA 3.2 made DKMS the
  only way on every OS ("As of DOCA 3.2.0, NVIDIA will leverage DKMS ...", DOCA 3.2.1 General
  Support), Ubuntu/Debian used it before;
- the ``dkms`` package (Debian 12's ``3.0.10-8+deb12u1``: ``/usr/sbin/dkms``, ``common.postinst``,
  the kernel hook ``/etc/kernel/postinst.d/dkms``); a real host gets it from Debian, the emulated
  mirror carries it so the emulated one is what runs;
- ``ofed-scripts``' ``ofed_info -s`` prints ``OFED-internal-<DOCA-OFED version>:`` (the DOCA form,
  e.g. ``OFED-internal-24.10-1.1.4.0.200:`` after ``apt install doca-ofed`` from DOCA 2.9.1-2);
- profile meta-packages ``doca-ofed``, ``doca-roce``, ``doca-networking``, ``doca-all`` whose
  ``Depends`` pin the release's packages (DOCA Profiles, docs.nvidia.com/doca/archive/2-9-1/
  DOCA+Profiles: doca-ofed is "MLNX_OFED-like", doca-roce the RoCE subset with MFT and the firmware
  updater; doca-networking/doca-all hold more DOCA libraries the lab does not model: here they
  depend on the doca-ofed set).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from fabricops.errors import FabricopsError
from fabricops_lab import ofed_repo, paths
from fabricops_lab.emul import tools as emul_tools

TEMPLATE_DIR = Path(__file__).resolve().parent / "data" / "doca"
SUBDIR = "doca"
OS_DIR = "debian12"

#: DOCA release -> its DOCA-OFED version. 2.9.1 (2024 LTS U1) ships DOCA-OFED 24.10-1.1.4.0 (its
#: ofed_info after `apt install doca-ofed`: OFED-internal-24.10-1.1.4...); 3.1.0 ships 25.07-0.9.7.0
#: (Mellanox/network-operator#1681 "update OFED version to doca3.1.0-25.07-0.9.7.0-0").
RELEASES: dict[str, str] = {"2.9.1": "24.10-1.1.4.0", "3.1.0": "25.07-0.9.7.0"}
DEFAULT_RELEASE = "3.1.0"

DKMS_DEB_VERSION = "3.0.10-8+deb12u1"
DKMS_MODULE = "mlnx-ofed-kernel"
#: kernel modules mlnx-ofed-kernel's dkms.conf builds (BUILT_MODULE_NAME, location in the tree)
KERNEL_MODULES: tuple[tuple[str, str], ...] = (
    ("mlx_compat", "compat"),
    ("ib_core", "drivers/infiniband/core"),
    ("ib_uverbs", "drivers/infiniband/core"),
    ("ib_umad", "drivers/infiniband/core"),
    ("rdma_cm", "drivers/infiniband/core"),
    ("rdma_ucm", "drivers/infiniband/core"),
    ("ib_ipoib", "drivers/infiniband/ulp/ipoib"),
    ("mlx5_core", "drivers/net/ethernet/mellanox/mlx5/core"),
    ("mlx5_ib", "drivers/infiniband/hw/mlx5"),
    ("mlxfw", "drivers/net/ethernet/mellanox/mlxfw"),
)

#: packages taken as built for MLNX_OFED (same names and version scheme in DOCA-OFED)
SHARED = ("mlnx-tools", "mlnx-ofed-kernel-utils", "rdma-core", "ibverbs-utils", "infiniband-diags",
          "perftest", "opensm", "mlnx-fw-updater", "mft")
PROFILES: dict[str, tuple[str, ...]] = {
    "doca-ofed": ("ofed-scripts", "mlnx-tools", "mlnx-ofed-kernel-utils", "mlnx-ofed-kernel-dkms",
                  "rdma-core", "ibverbs-utils", "infiniband-diags", "perftest", "opensm", "mlnx-fw-updater",
                  "mft"),
    "doca-roce": ("ofed-scripts", "mlnx-tools", "mlnx-ofed-kernel-utils", "mlnx-ofed-kernel-dkms",
                  "rdma-core", "ibverbs-utils", "perftest", "mlnx-fw-updater", "mft"),
}
PROFILES["doca-networking"] = PROFILES["doca-ofed"]
PROFILES["doca-all"] = PROFILES["doca-ofed"]


def _template(name: str) -> bytes:
    return (TEMPLATE_DIR / name).read_bytes()


def dkms_version(ofed_version: str) -> str:
    """mlnx-ofed-kernel's DKMS version: 24.10-1.1.4.0 -> 24.10.OFED.24.10.1.1.4.1 (the DKMS tree of a
    DOCA 24.10-3.2.5 host: /var/lib/dkms/mlnx-ofed-kernel/24.10.OFED.24.10.3.2.5.1/)."""
    major, rest = ofed_repo._split(ofed_version)
    return f"{major}.OFED.{major}.{rest.rsplit('.', 1)[0]}.1"


def ofed_info_release(ofed_version: str) -> str:
    return f"OFED-internal-{ofed_version}"


def dkms_conf(ofed_version: str) -> str:
    lines = [f'PACKAGE_NAME="{DKMS_MODULE}"', f'PACKAGE_VERSION="{dkms_version(ofed_version)}"',
             'MAKE[0]="make"', 'AUTOINSTALL="yes"']
    for i, (name, loc) in enumerate(KERNEL_MODULES):
        lines += [f'BUILT_MODULE_NAME[{i}]="{name}"', f'BUILT_MODULE_LOCATION[{i}]="{loc}/"',
                  f'DEST_MODULE_LOCATION[{i}]="/updates/dkms"']
    head = "# emulated mlnx-ofed-kernel dkms.conf (fabricops lab): nothing is compiled\n"
    return head + "\n".join(lines) + "\n"


def _dkms_deb() -> ofed_repo.Deb:
    files = {
        "usr/sbin/dkms": (ofed_repo._wrapper("dkms"), 0o755),
        "usr/lib/dkms/common.postinst": (_template("common.postinst"), 0o755),
        "usr/lib/dkms/dkms_autoinstaller": (_template("dkms_autoinstaller"), 0o755),
        "etc/kernel/postinst.d/dkms": (_template("kernel-postinst-dkms"), 0o755),
        "var/lib/dkms/.keep": (b"", 0o644),
    }
    return ofed_repo.Deb("dkms", DKMS_DEB_VERSION, "", "Dynamic Kernel Module System (DKMS)", files, {},
                         section="kernel")


def packages(doca_version: str, kernel: str) -> list[ofed_repo.Deb]:
    """Every package of one DOCA-Host release (meta-packages last)."""
    ofed_version = RELEASES[doca_version]
    base = {d.package: d for d in ofed_repo.packages(ofed_version, kernel)}
    vers = ofed_repo.package_versions(ofed_version, kernel)
    scripts = base["ofed-scripts"]
    files = {k: v for k, v in scripts.files.items() if k != "usr/sbin/ofed_uninstall.sh"}
    files["usr/share/emulated-ofed/release"] = (f"{ofed_info_release(ofed_version)}\n".encode(), 0o644)
    debs = [ofed_repo.Deb("ofed-scripts", scripts.version, "", "DOCA-OFED utilities (ofed_info)", files, {})]
    debs += [base[p] for p in SHARED if p in base]  # mft: when ofed_repo.packages has it (fw-lab hook)
    kver = dkms_version(ofed_version)
    src = f"usr/src/{DKMS_MODULE}-{kver}"
    postinst = _template("kernel-dkms.postinst").replace(b"@NAME@", DKMS_MODULE.encode()).replace(
        b"@VERSION@", kver.encode())
    prerm = _template("kernel-dkms.prerm").replace(b"@NAME@", DKMS_MODULE.encode()).replace(
        b"@VERSION@", kver.encode())
    # ofed_repo.Deb has no Conflicts field: the control line rides after Depends (one field per line)
    debs.append(ofed_repo.Deb(
        "mlnx-ofed-kernel-dkms", f"{kver}-1",
        f"dkms, mlnx-ofed-kernel-utils (>= {vers['mlnx-ofed-kernel-utils']})\n"
        "Conflicts: mlnx-ofed-kernel-modules",
        "DKMS support for mlnx-ofed kernel modules",
        {f"{src}/dkms.conf": (dkms_conf(ofed_version).encode(), 0o644),
         f"{src}/Makefile": (b"# emulated: dkms writes the modules itself\n", 0o644),
         f"{src}/README": (b"Emulated mlnx-ofed-kernel sources (fabricops lab).\n", 0o644)},
        {"postinst": postinst, "prerm": prerm}, section="kernel"))
    debs.append(_dkms_deb())
    have = {d.package: d.version for d in debs}
    for profile, members in PROFILES.items():
        deps = ", ".join(f"{p} (= {have[p]})" for p in members if p in have)
        debs.append(ofed_repo.Deb(profile, f"{doca_version}-1", deps,
                                  f"DOCA-Host {profile} profile (meta package)", {}, {},
                                  section="metapackages"))
    return debs


#: dpkg architecture -> NVIDIA's DOCA-Host ``<arch>`` directory (fabricops.platforms.ARCH_PARTS: the
#: product's table, which chooses the same directory from a host's facts)
DOCA_ARCH = {"amd64": "x86_64", "arm64": "arm64-sbsa"}


def repo_rel(doca_version: str, darch: str | None = None) -> str:
    """``doca/<ver>/debian12/<arch>`` for dpkg architecture ``darch`` (default: the controller's)."""
    darch = darch or ofed_repo.deb_arch()
    return f"{SUBDIR}/{doca_version}/{OS_DIR}/{DOCA_ARCH.get(darch, ofed_repo.machine_arch(darch))}"


def cache_key(releases: tuple[str, ...], kernel: str) -> str:
    h = hashlib.sha256()
    for p in sorted(TEMPLATE_DIR.rglob("*")):
        if p.is_file():
            h.update(p.name.encode() + b"\0" + p.read_bytes())
    h.update(Path(__file__).read_bytes())
    h.update(ofed_repo.cache_key(tuple(RELEASES[r] for r in releases), kernel, ofed_repo.DISTRO).encode())
    h.update(json.dumps(emul_tools.TOOLS, sort_keys=True).encode())
    h.update(json.dumps([list(releases), kernel]).encode())
    return h.hexdigest()


def build(out: Path, releases: tuple[str, ...] = tuple(RELEASES),
          kernel: str | None = None, arches: tuple[str, ...] = ()) -> dict[str, Any]:
    """Build (or reuse) ``out/doca/<ver>/debian12/<arch>/`` for each release; return the manifest
    ``{"key", "kernel", "versions": {VER: {"repo", "ofed_version", "dkms_version", "packages"}}}``
    for the controller's architecture, and ``"by_arch": {DARCH: {VER: {...}}}`` for each other dpkg
    architecture in ``arches`` (``arm64``: ``.../debian12/arm64-sbsa/``), as ofed_repo.build caches."""
    kernel = kernel or ofed_repo.default_kernel()
    for r in releases:
        if r not in RELEASES:
            raise FabricopsError(f"{r!r} is not a DOCA release the lab builds (one of {', '.join(RELEASES)})")
    key = cache_key(tuple(releases), kernel)
    top = out / SUBDIR
    manifest_path = top / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = {}
    primary = ofed_repo.deb_arch()
    foreign = [a for a in dict.fromkeys(arches) if a != primary]
    cached = list(manifest.get("by_arch") or {})
    every = [manifest.get("versions", {}), *(manifest.get("by_arch") or {}).values()]
    if manifest.get("key") == key and set(foreign) <= set(cached) and all(
            (out / v["repo"] / "Packages").is_file() for vs in every for v in vs.values()):
        return manifest
    if manifest.get("key") == key:
        foreign = list(dict.fromkeys([*cached, *foreign]))
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".doca-build-", dir=out))
    try:
        result: dict[str, Any] = {"key": key, "kernel": kernel, "versions": {}}
        if foreign:
            result["by_arch"] = {a: {} for a in foreign}
        for r in releases:
            debs = packages(r, kernel)
            for arch in (primary, *foreign):
                repo = staging / repo_rel(r, arch)
                repo.mkdir(parents=True)
                for deb in debs:
                    ofed_repo.build_deb(deb, repo, arch)
                ofed_repo.write_index(repo, label=f"DOCA {r}", arch=arch)
                facts = {"repo": repo_rel(r, arch), "ofed_version": RELEASES[r],
                         "dkms_version": dkms_version(RELEASES[r]),
                         "packages": {d.package: d.version for d in debs}}
                if arch == primary:
                    result["versions"][r] = facts
                else:
                    result["by_arch"][arch][r] = facts
        (staging / SUBDIR / "manifest.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        if top.exists():
            shutil.rmtree(top)
        (staging / SUBDIR).rename(top)
        return result
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def prepare(lab: dict[str, Any]) -> dict[str, Any]:
    """Build or reuse the DOCA repositories next to MLNX_OFED's (call after ``ofed_repo.prepare``,
    whose rebuild clears ``repo_dir()``; the same HTTP server serves them); sign them; return the
    ``fabricops_doca`` facts: ``{"repo_key_url", "repo_key_sha256", "default_version", "os",
    "versions": {VER: {"repo_url", "ofed_version", "ofed_info", "dkms_module", "dkms_version",
    "profiles"}}}`` (controller's architecture), plus ``"by_arch": {DARCH: {VER: {"repo_url"}}}``
    for a topology's other architectures. ``lab["doca_build"]`` may override ``versions`` and
    ``default_version``."""
    cfg = lab.get("doca_build") or {}
    releases = tuple(cfg.get("versions") or RELEASES)
    default = cfg.get("default_version") or (DEFAULT_RELEASE if DEFAULT_RELEASE in releases else releases[-1])
    if default not in releases:
        raise FabricopsError(f"doca default_version {default} is not one of {', '.join(releases)}")
    out = paths.repo_dir()
    arches = ofed_repo.topology_arches(lab.get("topology"))
    manifest = build(out, releases, (lab.get("ofed_build") or {}).get("built_for_kernel"), arches)
    key_sha256 = ofed_repo.export_key(out / ofed_repo.KEY_FILE)
    by_arch = {a: manifest["by_arch"][a] for a in arches[1:]}
    for builds in (manifest["versions"], *by_arch.values()):
        for v in builds.values():
            ofed_repo.sign_repo(out / v["repo"])
    base = f"http://{ofed_repo.CONTROLLER_IP}:{ofed_repo.HTTP_PORT}"
    extra = {"by_arch": {a: {r: {"repo_url": f"{base}/{v['repo']}/"} for r, v in b.items()}
                         for a, b in by_arch.items()}} if by_arch else {}
    return {
        "repo_key_url": f"{base}/{ofed_repo.KEY_FILE}",
        "repo_key_sha256": key_sha256,
        "default_version": default,
        "os": OS_DIR,
        "versions": {
            r: {"repo_url": f"{base}/{v['repo']}/", "ofed_version": v["ofed_version"],
                "ofed_info": f"{ofed_info_release(v['ofed_version'])}:", "dkms_module": DKMS_MODULE,
                "dkms_version": v["dkms_version"], "profiles": sorted(PROFILES)}
            for r, v in manifest["versions"].items()
        },
        **extra,
    }
