"""The lab's signed RPM repositories, for hosts of the ``rpm`` variant (issue 37 point 5;
docs/lab-fidelity.md, "Host variants").

The packages are the lab's apt ones: :func:`from_deb` takes an ``ofed_repo.Deb`` (its files, modes and
conffiles, the one description of a lab package) and names and lays it out as the RHEL package is named and
laid out; :func:`build_rpm` makes a real RPM of it with ``rpmbuild`` (no automatic Requires / Provides: the
host's rpmdb knows none of its Debian base system), :func:`sign` signs it with ``rpmsign --addsign``,
:func:`build_repo` runs ``createrepo_c``, signs ``repodata/repomd.xml`` (``repo_gpgcheck``) and writes the
public key and a ``.repo`` stanza for ``/etc/yum.repos.d``.

Done: the fabric manager and IMEX packages (:func:`fabric_rpms`), as NVIDIA's CUDA rhel9 repository names
them. Not done yet: MLNX_OFED, DOCA-Host and MFT RPMs (their packages carry maintainer scripts, which
:func:`from_deb` refuses rather than run with Debian's arguments).

Controller tools: ``rpm`` (rpmbuild, rpmsign) and ``createrepo-c`` from ``scripts/setup.sh --rpm``; gnupg.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fabricops.errors import FabricopsError
from fabricops_lab import ofed_repo, paths

KEY_UID = "fabricops lab RPM repository <lab-rpm-repo@fabricops.invalid>"
KEY_FILE = "RPM-GPG-KEY-fabricops-lab"
#: NVIDIA's CUDA repository for RHEL 9 as its own cuda-rhel9.repo names it (the lab serves the fabric
#: manager and IMEX where a real host gets them)
FABRIC_REPO_ID = "cuda-rhel9-x86_64"
#: Debian architecture -> RPM architecture
RPM_ARCH = {"amd64": "x86_64", "arm64": "aarch64"}
SOURCE_DATE_EPOCH = "1700000000"


@dataclass(frozen=True)
class Rpm:
    name: str
    version: str
    release: str
    summary: str
    files: dict[str, tuple[bytes, int]]  # absolute path in the package -> (content, mode)
    config: tuple[str, ...] = ()  # %config(noreplace)
    arch: str = "x86_64"

    @property
    def nevra(self) -> str:
        return f"{self.name}-{self.version}-{self.release}.{self.arch}"

    @property
    def filename(self) -> str:
        return f"{self.nevra}.rpm"


def rhel_name(deb_name: str) -> str:
    """The RHEL package name of a lab Debian package. CUDA's RPM repositories name the fabric manager
    ``nvidia-fabric-manager`` with no branch in the name (``nvidia-fabric-manager-550.90.07-1.x86_64.rpm``
    in developer.download.nvidia.com/compute/cuda/repos/rhel7/x86_64; Amazon Linux 2023's release notes
    list ``nvidia-fabric-manager-570.133.20-1`` beside ``nvidia-imex-570-570.133.20-1``), while IMEX keeps
    its branch (``nvidia-imex-570``), as in Debian. Everything else keeps its Debian name."""
    if deb_name.startswith("nvidia-fabricmanager-") and deb_name.rsplit("-", 1)[1].isdigit():
        return "nvidia-fabric-manager"
    return deb_name


def rhel_path(rel: str) -> str:
    """Where RHEL puts a file the Debian package has under REL: systemd units and everything else in
    /lib are under /usr/lib (RHEL packages own no /lib path; /lib is a link to usr/lib on both)."""
    rel = rel.lstrip("/")
    if rel.startswith("lib/"):
        rel = "usr/" + rel
    return "/" + rel


def from_deb(deb: ofed_repo.Deb, arch: str = "x86_64") -> Rpm:
    """The RPM of a lab Debian package: its RHEL name, version and release (``<upstream>-<release>``),
    its files where RHEL puts them and its conffiles as %config(noreplace)."""
    if deb.scripts:
        raise FabricopsError(
            f"{deb.package}: maintainer scripts ({', '.join(sorted(deb.scripts))}) are not ported to RPM "
            "scriptlets (rpm passes counts, dpkg verbs): the lab has no RPM of it yet"
        )
    if deb.depends:
        raise FabricopsError(f"{deb.package}: Depends ({deb.depends}) has no RPM mapping in the lab yet")
    version, _, release = deb.version.rpartition("-")
    if not version:
        version, release = deb.version, "1"
    if ":" in version:
        raise FabricopsError(f"{deb.package}: an epoch ({deb.version}) has no RPM mapping in the lab yet")
    files = {rhel_path(rel): body for rel, body in deb.files.items()}
    config = tuple(rhel_path(c) for c in deb.conffiles)
    missing = [c for c in config if c not in files]
    if missing:
        raise FabricopsError(f"{deb.package}: conffiles not in the package: {', '.join(missing)}")
    return Rpm(rhel_name(deb.package), version, release, deb.description, files, config, arch)


def fabric_rpms(arch: str = "x86_64") -> list[Rpm]:
    """The fabric manager and IMEX packages of the lab's apt repository (fabric_services.fm_debs /
    imex_debs, every FM_VERSIONS entry), as RPMs."""
    from fabricops_lab import fabric_services  # imports ofed_repo, which this module uses

    return [from_deb(d, arch) for d in fabric_services.fm_debs() + fabric_services.imex_debs()]


def _quote(path: str) -> str:
    """A path in a spec's %files: rpm reads glob characters and spaces specially; lab paths have none."""
    if any(c in path for c in " \t\n*?[]{}%\"'\\"):
        raise FabricopsError(f"a lab RPM path with a character %files would read specially: {path!r}")
    return path


def spec(rpm: Rpm) -> str:
    """The spec rpmbuild builds RPM from: the staged tree (SOURCES/root) copied as is, every file
    listed with its mode, owner root, conffiles %config(noreplace). ``AutoReqProv: no``: rpmbuild's
    dependency generators would add Requires (``/usr/bin/python3``, sonames) that a host whose rpmdb
    holds no base system never satisfies."""
    lines = [
        f"Name: {rpm.name}",
        f"Version: {rpm.version}",
        f"Release: {rpm.release}",
        f"Summary: {rpm.summary}",
        "License: LicenseRef-fabricops-lab-emulated",
        "URL: https://fabricops.invalid/lab",
        f"BuildArch: {rpm.arch}",
        "AutoReqProv: no",
        "",
        "%description",
        f"{rpm.summary}.",
        " ".join(line.strip() for line in ofed_repo.EMULATED_NOTE.splitlines()),
        "",
        "%install",
        "cp -a %{_sourcedir}/root/. %{buildroot}/",
        "",
        "%files",
    ]
    for path in sorted(rpm.files):
        mode = rpm.files[path][1]
        prefix = "%config(noreplace) " if path in rpm.config else ""
        lines.append(f"{prefix}%attr({mode:04o},root,root) {_quote(path)}")
    return "\n".join(lines) + "\n"


def _rpm_tool(name: str) -> str:
    tool = shutil.which(name)
    if tool is None:
        raise FabricopsError(
            f"{name} is not installed on the lab controller: run scripts/setup.sh --rpm (Debian's rpm and "
            "createrepo-c packages build the lab's RPM repositories)"
        )
    return tool


def _macros(topdir: Path) -> list[str]:
    defines = {
        "_topdir": str(topdir),
        # reproducible: file mtimes and the build time from SOURCE_DATE_EPOCH
        "use_source_date_epoch_as_buildtime": "1",
        "clamp_mtime_to_source_date_epoch": "1",
        "_buildhost": "lab.fabricops.invalid",
        # no post-install processing (strip, byte-compiling, build-id links): the payloads are scripts
        "__os_install_post": "%{nil}",
        "_build_id_links": "none",
        "debug_package": "%{nil}",
    }
    out: list[str] = []
    for k, v in defines.items():
        out += ["--define", f"{k} {v}"]
    return out


def build_rpm(rpm: Rpm, out_dir: Path) -> Path:
    """Build RPM with rpmbuild into OUT_DIR; return its path (``<nevra>.rpm``)."""
    rpmbuild = _rpm_tool("rpmbuild")
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fo-rpm-") as tmp:
        top = Path(tmp)
        root = top / "SOURCES" / "root"
        root.mkdir(parents=True)
        for path, (content, mode) in rpm.files.items():
            p = root / path.lstrip("/")
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(content)
            p.chmod(mode)
        spec_file = top / "SPECS" / f"{rpm.name}.spec"
        spec_file.parent.mkdir()
        spec_file.write_text(spec(rpm))
        env = dict(os.environ, SOURCE_DATE_EPOCH=os.environ.get("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH),
                   LC_ALL="C")
        cmd = [rpmbuild, "-bb", "--target", f"{rpm.arch}-linux", *_macros(top), str(spec_file)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        built = top / "RPMS" / rpm.arch / rpm.filename
        if proc.returncode != 0 or not built.exists():
            raise FabricopsError(
                f"rpmbuild could not build {rpm.nevra}: {(proc.stderr or proc.stdout)[-400:]}")
        target = out_dir / rpm.filename
        shutil.copyfile(built, target)
    return target


def signing_home() -> Path:
    return paths.STATE_DIR / "rpm-signing"


def signing_key(home: Path | None = None) -> tuple[Path, str]:
    """The lab's RPM signing key in HOME (created once, no passphrase: a lab key); return (home,
    fingerprint). RSA 3072, not the apt mirrors' ed25519: RSA is what every rpm a RHEL 9 host may run
    verifies (NVIDIA's and Rocky's own repository keys are RSA)."""
    home = home or signing_home()
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o700)

    def fingerprint() -> str | None:
        proc = ofed_repo._gpg(home, "--with-colons", "--list-secret-keys", KEY_UID, text=True)
        for line in proc.stdout.splitlines():
            if line.startswith("fpr:"):
                return line.split(":")[9]
        return None

    with ofed_repo._agent(home):
        fpr = fingerprint()
        if fpr is None:
            proc = ofed_repo._gpg(home, "--quick-generate-key", KEY_UID, "rsa3072", "sign", "never",
                                  text=True)
            fpr = fingerprint()
            if proc.returncode != 0 or fpr is None:
                raise FabricopsError(f"gpg could not create the lab's RPM key: {proc.stderr.strip()[-300:]}")
    return home, fpr


def sign(rpm_files: list[Path], home: Path | None = None) -> None:
    """``rpmsign --addsign`` every file with the lab's key (an RSA/SHA256 header signature)."""
    rpmsign = _rpm_tool("rpmsign")
    home = home or signing_home()
    with ofed_repo._agent(home):
        home, fpr = signing_key(home)
        gpg = shutil.which("gpg")
        if gpg is None:
            raise FabricopsError("gpg is not installed on the lab controller: install the gnupg package")
        cmd = [rpmsign, "--addsign",
               "--define", f"__gpg {gpg}",  # Debian's rpm names gpg2
               "--define", f"_gpg_path {ofed_repo._short(home)}",
               "--define", f"_gpg_name {fpr}",
               "--define", "_gpg_digest_algo sha256",
               "--define", "_gpg_sign_cmd_extra_args --batch --pinentry-mode loopback",
               *map(str, rpm_files)]
        proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise FabricopsError(f"rpmsign failed: {(proc.stderr or proc.stdout).strip()[-400:]}")


def export_key(dest: Path, home: Path | None = None) -> str:
    """Write the public key, ASCII-armoured (what ``rpm --import`` and a .repo's gpgkey take), to DEST;
    return its fingerprint."""
    home = home or signing_home()
    with ofed_repo._agent(home):
        home, fpr = signing_key(home)
        proc = ofed_repo._gpg(home, "--armor", "--export", fpr, text=True)
    if proc.returncode != 0 or "BEGIN PGP PUBLIC KEY BLOCK" not in proc.stdout:
        raise FabricopsError(f"gpg could not export the lab's RPM key: {proc.stderr.strip()[-300:]}")
    dest.write_text(proc.stdout)
    return fpr


def repo_file(repo_id: str, name: str, baseurl: str, repo_gpgcheck: bool = True) -> str:
    """A ``/etc/yum.repos.d`` stanza for the repository at BASEURL (its key beside repodata/)."""
    base = baseurl if baseurl.endswith("/") else baseurl + "/"
    return (
        f"[{repo_id}]\n"
        f"name={name}\n"
        f"baseurl={base}\n"
        "enabled=1\n"
        "gpgcheck=1\n"
        f"repo_gpgcheck={1 if repo_gpgcheck else 0}\n"
        f"gpgkey={base}{KEY_FILE}\n"
    )


def build_repo(out: Path, rpms: list[Rpm], repo_id: str, name: str, baseurl: str,
               home: Path | None = None) -> Path:
    """A signed RPM repository in OUT: ``Packages/*.rpm`` (built and signed), ``repodata/`` by
    createrepo_c with ``repomd.xml.asc`` (a detached armoured signature, what dnf's repo_gpgcheck
    reads), the public key as KEY_FILE and ``<repo_id>.repo``; return the .repo file."""
    createrepo = _rpm_tool("createrepo_c")
    pkgs = out / "Packages"
    built = [build_rpm(r, pkgs) for r in rpms]
    sign(built, home)
    proc = subprocess.run([createrepo, "--general-compress-type", "gz", "--revision", SOURCE_DATE_EPOCH,
                           "--set-timestamp-to-revision", "--quiet", str(out)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise FabricopsError(f"createrepo_c failed: {(proc.stderr or proc.stdout).strip()[-400:]}")
    home = home or signing_home()
    repomd = out / "repodata" / "repomd.xml"
    with ofed_repo._agent(home):
        home, fpr = signing_key(home)
        proc = ofed_repo._gpg(
            home, "--local-user", fpr, "--digest-algo", "SHA256", "--armor", "--detach-sign",
            "-o", str(repomd) + ".asc", str(repomd), text=True)
    if proc.returncode != 0:
        raise FabricopsError(f"gpg could not sign {repomd}: {proc.stderr.strip()[-300:]}")
    export_key(out / KEY_FILE, home)
    repo = out / f"{repo_id}.repo"
    repo.write_text(repo_file(repo_id, name, baseurl))
    return repo


def build_fabric_repo(out: Path, baseurl: str, home: Path | None = None, arch: str = "x86_64") -> Path:
    """The fabric manager / IMEX repository (:func:`fabric_rpms`) in OUT, served at BASEURL."""
    return build_repo(out, fabric_rpms(arch), FABRIC_REPO_ID,
                      "fabricops lab: NVIDIA fabric manager and IMEX (emulated, el9)", baseurl, home)


# --- served on the lab network (fabric_services.prepare) ------------------------------------------

#: where the fabric repository is served under the lab's HTTP server (ofed_repo.serve: repo_dir()), as
#: NVIDIA's CUDA repository lays out its RHEL 9 one (``compute/cuda/repos/rhel9/x86_64/``)
SERVED_PATH = "rpm/cuda/rhel9"


def wanted(lab: dict) -> bool:
    """Whether the lab's topology has a host of the ``rpm`` variant: only then is the RPM repository
    built (the default rack has none, so CI neither pays for it nor needs the rpm tools)."""
    hosts = (lab.get("topology") or {}).get("hosts") or []
    return any((h.get("variant") or "default") == "rpm" for h in hosts)


def _digest(rpms: list[Rpm], fpr: str) -> str:
    import hashlib

    h = hashlib.sha256(fpr.encode() + b"\0")
    for r in sorted(rpms, key=lambda r: r.nevra):
        h.update(r.nevra.encode() + b"\0" + spec(r).encode() + b"\0")
        for path in sorted(r.files):
            content, mode = r.files[path]
            h.update(f"{path}\0{mode:o}\0".encode() + hashlib.sha256(content).digest())
    return h.hexdigest()


def prepare(lab: dict, arch: str = "x86_64") -> dict:
    """Build (when its packages, their data or the key changed) the signed fabric manager / IMEX RPM
    repository under the lab's HTTP server (``<repo_dir>/rpm/cuda/rhel9/<arch>/``) and return what the
    inventory hands the ``rpm`` hosts: ``{"repo_url", "repo_key_url", "repo_key_sha256", "repo_id",
    "packages"}``. Call after ``ofed_repo.prepare`` (whose rebuild clears ``repo_dir()``)."""
    import hashlib
    import json

    base = f"http://{ofed_repo.CONTROLLER_IP}:{ofed_repo.HTTP_PORT}/{SERVED_PATH}/{arch}/"
    out = paths.repo_dir() / SERVED_PATH / arch
    rpms = fabric_rpms(arch)
    _home, fpr = signing_key()
    digest = _digest(rpms, fpr)
    manifest_path = out / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = None
    signed = (out / "repodata" / "repomd.xml.asc").is_file()
    if not manifest or manifest.get("digest") != digest or not signed:
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        build_repo(out, rpms, FABRIC_REPO_ID, "fabricops lab: NVIDIA fabric manager and IMEX (emulated, el9)",
                   base)
        manifest = {"digest": digest, "packages": sorted(r.nevra for r in rpms)}
        manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    key_sha256 = hashlib.sha256((out / KEY_FILE).read_bytes()).hexdigest()
    return {"repo_url": base, "repo_key_url": base + KEY_FILE, "repo_key_sha256": key_sha256,
            "repo_id": FABRIC_REPO_ID, "packages": manifest["packages"]}


# --- the driver's dnf source on NVL72 trays of the rpm variant -------------------------------------

#: Where a driver installed from NVIDIA's CUDA rhel9 repository leaves its source on an EL 9 host
#: (``dnf config-manager --add-repo .../rhel9/x86_64/cuda-rhel9.repo`` writes the file under the repo's
#: id): the nvidia_imex role installs nvidia-imex-<branch> from the repositories dnf has, as on a real tray.
DRIVER_REPO = f"etc/yum.repos.d/{FABRIC_REPO_ID}.repo"
#: the repository's key as the driver's install left it on the host (EL keeps keys in /etc/pki/rpm-gpg)
DRIVER_KEY = f"etc/pki/rpm-gpg/{KEY_FILE}"


def driver_trays(lab: dict) -> list[dict]:
    """The topology's NVL72 trays (hosts with an ``nvlink_domain``) of the ``rpm`` variant."""
    hosts = (lab.get("topology") or {}).get("hosts") or []
    return [h for h in hosts if h.get("nvlink_domain") and (h.get("variant") or "default") == "rpm"]


def install_driver_source(lab: dict, served: dict) -> list[str]:
    """On every NVL72 tray of the ``rpm`` variant: the driver's dnf source, SERVED's repository (what
    :func:`prepare` returns; its .repo as the lab serves it: gpgcheck, repo_gpgcheck, gpgkey beside
    repodata/), and the state the driver's install from it leaves: the key under /etc/pki/rpm-gpg and
    imported into the rpmdb (``rpm --import``) and dnf's metadata cache made with the repository key
    accepted (``dnf -y makecache``), the counterpart of fabric_services.install_driver_source's apt
    source and lists on a Debian tray. Returns the trays written. HGX hosts get nothing (the fabric
    manager role brings its own source)."""
    from fabricops_lab import hosts

    repo = paths.repo_dir() / SERVED_PATH / served["repo_url"].rstrip("/").rsplit("/", 1)[1]
    text = (repo / f"{served['repo_id']}.repo").read_text()
    done = []
    for h in driver_trays(lab):
        root = paths.host_dir(h["name"]) / "root"
        if not (root / "etc").is_dir():
            continue
        (root / DRIVER_REPO).parent.mkdir(parents=True, exist_ok=True)
        (root / DRIVER_REPO).write_text(
            "# the NVIDIA driver's repository (fabricops lab: emulated CUDA rhel9 repository)\n" + text)
        (root / DRIVER_KEY).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(repo / KEY_FILE, root / DRIVER_KEY)
        done.append(h["name"])
        steps = (["rpm", "--import", f"/{DRIVER_KEY}"],
                 ["dnf", "-q", "-y", "makecache", "--repo", served["repo_id"]])
        for step in steps:
            try:
                proc = hosts.host_exec(h["name"], step, check=False, timeout=300)
            except FabricopsError:
                break  # a host that is not running: the source is in its root, dnf reads it at first use
            if proc.returncode != 0:
                raise FabricopsError(f"{h['name']}: {' '.join(step)} failed: "
                                     f"{(proc.stderr or proc.stdout or '').strip()[-300:]}")
    return done
