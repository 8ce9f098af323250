"""Emulated ``dkms`` (Debian 12's dkms 3.0.10) and the DKMS rules the emulated modprobe/modinfo
follow. Stdlib only; every path is under ``devstate.root()`` (``EMUL_ROOT`` in unit tests).

Nothing is compiled: "building" writes, for each ``BUILT_MODULE_NAME`` of the module's
``/usr/src/<module>-<version>/dkms.conf``, a small JSON file with the real ``.ko`` name that records
what modinfo needs (module, version, kernel, signer, sig_key). The layout and the messages are
dkms 3.0.10's (dkms-project/dkms tag v3.0.10, ``dkms.in``; docs/lab-ofed.md "DOCA-Host mirror, DKMS
and Secure Boot"):

- ``add``: ``/var/lib/dkms/<m>/<v>/source -> /usr/src/<m>-<v>`` ("Creating symlink ..."); the source
  directory must exist (die 2) and the pair must not be added already (die 3).
- ``build``: headers = ``/lib/modules/<k>/build/include`` exists (``_check_kernel_dir``), else
  "Error! Your kernel headers for kernel K cannot be found at /lib/modules/K/build or
  /lib/modules/K/source." and exit 1 (``prepare_kernel``: ``die 1`` in 3.0.10; dkms 3.1+ exits 21).
  Signing (``prepare_signing``): the sign-file of the kernel's kbuild/headers; the key
  ``/var/lib/dkms/mok.key`` and certificate ``/var/lib/dkms/mok.pub`` are generated on first use
  ("Certificate or key are missing, generating self signed certificate for MOK...", CN "DKMS module
  signing key"). Built modules land in ``/var/lib/dkms/<m>/<v>/<k>/<arch>/module/``.
- ``install``: builds first when needed; needs ``/lib/modules/<k>`` (die 6); copies the modules to
  ``/lib/modules/<k>/updates/dkms/`` (Debian's DEST_MODULE_LOCATION override) and marks the kernel
  with the ``/var/lib/dkms/<m>/kernel-<k>-<arch>`` link that ``status`` reads as "installed".
- ``autoinstall``: every module with ``AUTOINSTALL="yes"``, its newest version, not yet installed;
  any failure: "One or more modules failed to install during autoinstall." exit 11.
- ``remove``/``uninstall``/``unbuild``: as dkms prints them; ``status``: the 3.x line format.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from . import devstate

DKMS_TREE = "var/lib/dkms"
SOURCE_TREE = "usr/src"
INSTALL_TREE = "lib/modules"
DEST = "/updates/dkms"
MOK_KEY = "/var/lib/dkms/mok.key"
MOK_PUB = "/var/lib/dkms/mok.pub"
SIGNER = "DKMS module signing key"
VERSION = "3.0.10"


class Die(Exception):
    def __init__(self, code: int, *lines: str):
        super().__init__(lines[0] if lines else "")
        self.code = code
        self.lines = lines


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _error(*lines: str) -> None:
    """dkms ``error()``: an empty line, then "Error! " and each string on its own line, on stderr."""
    sys.stderr.write("\nError! " + "\n".join(lines) + "\n")
    sys.stderr.flush()


def p(rel: str) -> Path:
    return devstate.path(rel)


def running_kernel() -> str:
    """``uname -r`` (``EMUL_KERNEL`` stands in for it in unit tests only)."""
    return os.environ.get("EMUL_KERNEL") or os.uname().release


def machine() -> str:
    return os.environ.get("EMUL_ARCH") or os.uname().machine


# --- kernels and dkms.conf --------------------------------------------------------------------

def in_root(path: Path) -> Path:
    """Follow a symlink the way the host sees it: an absolute target is under EMUL_ROOT too."""
    if path.is_symlink():
        target = os.readlink(path)
        return p(target) if target.startswith("/") else path.parent / target
    return path


def headers_present(kernel: str) -> bool:
    """dkms' _check_kernel_dir: /lib/modules/K/build/include exists."""
    return (in_root(p(f"{INSTALL_TREE}/{kernel}/build")) / "include").exists()


def installed_kernels() -> list[str]:
    """Kernels with a /boot/vmlinuz-K and /lib/modules/K (what autoinstall hooks see)."""
    boot = p("boot")
    if not boot.is_dir():
        return []
    return sorted(f.name[len("vmlinuz-"):] for f in boot.glob("vmlinuz-*")
                  if p(f"{INSTALL_TREE}/{f.name[len('vmlinuz-'):]}").is_dir())


_CONF_LINE = re.compile(r'^([A-Z_]+)(?:\[(\d+)\])?=(?:"([^"]*)"|(\S*))\s*$')


def read_conf(path: Path) -> dict[str, Any]:
    """The subset of dkms.conf the emulation uses: scalars and indexed arrays."""
    conf: dict[str, Any] = {"BUILT_MODULE_NAME": {}, "BUILT_MODULE_LOCATION": {}, "DEST_MODULE_NAME": {}}
    for line in path.read_text().splitlines():
        m = _CONF_LINE.match(line.strip())
        if not m:
            continue
        key, idx, quoted, bare = m.groups()
        value = quoted if quoted is not None else bare
        if idx is not None:
            conf.setdefault(key, {})[int(idx)] = value
        else:
            conf[key] = value
    return conf


def modules_of(conf: dict[str, Any]) -> list[tuple[str, str]]:
    """[(built module name, location in the build dir)] in index order."""
    names = conf.get("BUILT_MODULE_NAME") or {}
    locs = conf.get("BUILT_MODULE_LOCATION") or {}
    dest = conf.get("DEST_MODULE_NAME") or {}
    return [(dest.get(i) or names[i], (locs.get(i) or "").strip("/")) for i in sorted(names)]


def source_dir(module: str, version: str) -> Path:
    return p(f"{SOURCE_TREE}/{module}-{version}")


def tree(module: str, version: str | None = None) -> Path:
    return p(f"{DKMS_TREE}/{module}" + (f"/{version}" if version else ""))


def is_added(module: str, version: str) -> bool:
    src = tree(module, version) / "source"
    return src.is_symlink() or src.is_dir()


def conf_of(module: str, version: str) -> dict[str, Any]:
    path = in_root(tree(module, version) / "source") / "dkms.conf"
    if not path.is_file():
        path = source_dir(module, version) / "dkms.conf"
    if not path.is_file():
        raise Die(4, "Could not locate dkms.conf file.", f"File: {path} does not exist.")
    return read_conf(path)


def built_dir(module: str, version: str, kernel: str, arch: str) -> Path:
    return tree(module, version) / kernel / arch / "module"


def is_built(module: str, version: str, kernel: str, arch: str) -> bool:
    d = built_dir(module, version, kernel, arch)
    if not d.is_dir():
        return False
    return all((d / f"{name}.ko").is_file() for name, _ in modules_of(conf_of(module, version)))


def _kernel_link(module: str, kernel: str, arch: str) -> Path:
    return tree(module) / f"kernel-{kernel}-{arch}"


def is_installed(module: str, version: str, kernel: str, arch: str) -> bool:
    link = _kernel_link(module, kernel, arch)
    return is_built(module, version, kernel, arch) and link.is_symlink() and \
        os.readlink(link) == f"{version}/{kernel}/{arch}"


def added() -> list[tuple[str, str]]:
    base = p(DKMS_TREE)
    if not base.is_dir():
        return []
    out = []
    for mdir in sorted(base.iterdir()):
        if not mdir.is_dir():
            continue
        for vdir in sorted(mdir.iterdir()):
            if vdir.is_dir() and not vdir.is_symlink() and is_added(mdir.name, vdir.name):
                out.append((mdir.name, vdir.name))
    return out


# --- signing ----------------------------------------------------------------------------------

def _sign_file(kernel: str) -> str:
    major_minor = kernel.rsplit(".", 1)[0] if "." in kernel else kernel
    candidate = f"/usr/lib/linux-kbuild-{major_minor}/scripts/sign-file"
    if not p(candidate).is_file():
        candidate = f"/lib/modules/{kernel}/build/scripts/sign-file"
    return candidate


def mok_fingerprint() -> str | None:
    """sha1 of /var/lib/dkms/mok.pub as modinfo prints sig_key (AB:CD:...), None without a key."""
    try:
        digest = hashlib.sha1(p(MOK_PUB).read_bytes()).hexdigest().upper()
    except OSError:
        return None
    return ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


def _prepare_signing(kernel: str) -> bool:
    sign_file = _sign_file(kernel)
    _out(f"Sign command: {sign_file}")
    if not p(sign_file).is_file():
        _out(f"Binary {sign_file} not found, modules won't be signed")
        return False
    _out(f"Signing key: {MOK_KEY}")
    _out(f"Public certificate (MOK): {MOK_PUB}")
    if not p(MOK_KEY).is_file() or not p(MOK_PUB).is_file():
        _out("Certificate or key are missing, generating self signed certificate for MOK...")
        p(MOK_KEY).parent.mkdir(parents=True, exist_ok=True)
        seed = os.urandom(16).hex()
        p(MOK_KEY).write_text(f"-----BEGIN PRIVATE KEY-----\nemulated {seed}\n-----END PRIVATE KEY-----\n")
        p(MOK_KEY).chmod(0o600)
        # DER in reality; here a marker whose hash is the key's identity (mokutil, modinfo sig_key)
        p(MOK_PUB).write_bytes(f"emulated X.509 CN={SIGNER} {seed}\n".encode())
    return True


# --- actions ----------------------------------------------------------------------------------

def do_add(module: str, version: str) -> None:
    if is_added(module, version):
        raise Die(3, f"DKMS tree already contains: {module}-{version}",
                  "You cannot add the same module/version combo more than once.")
    src = source_dir(module, version)
    if not src.is_dir():
        raise Die(2, "Could not find module source directory.",
                  f"Directory: /{SOURCE_TREE}/{module}-{version} does not exist.")
    if not (src / "dkms.conf").is_file():
        raise Die(4, "Could not locate dkms.conf file.", f"File: /{SOURCE_TREE}/{module}-{version}/dkms.conf "
                  "does not exist.")
    _out(f"Creating symlink /{DKMS_TREE}/{module}/{version}/source -> /{SOURCE_TREE}/{module}-{version}")
    (tree(module, version) / "build").mkdir(parents=True, exist_ok=True)
    os.symlink(f"/{SOURCE_TREE}/{module}-{version}", tree(module, version) / "source")


def do_build(module: str, version: str, kernel: str, arch: str, force: bool = False) -> None:
    if not is_added(module, version):
        do_add(module, version)
    if is_built(module, version, kernel, arch):
        if not force:
            _out(f"Module {module}/{version} already built for kernel {kernel} ({arch}), skip. "
                 "You may override by specifying --force.")
            return
        do_unbuild(module, version, kernel, arch, quiet=True)
    conf = conf_of(module, version)
    signing = _prepare_signing(kernel)
    if not headers_present(kernel):
        raise Die(1, f"Your kernel headers for kernel {kernel} cannot be found at "
                  f"/lib/modules/{kernel}/build or /lib/modules/{kernel}/source.",
                  f"Please install the linux-headers-{kernel} package or use the --kernelsourcedir option to "
                  "tell DKMS where it's located.")
    _out()
    _out("Building module:")
    _out("Cleaning build area...")
    jobs = os.cpu_count() or 1
    make = (conf.get("MAKE") or {}).get(0, "make") if isinstance(conf.get("MAKE"), dict) else "make"
    _out(f"{make.replace('make', f'make -j{jobs} KERNELRELEASE={kernel}', 1)}...")
    out = built_dir(module, version, kernel, arch)
    out.mkdir(parents=True, exist_ok=True)
    (out.parent / "log").mkdir(exist_ok=True)
    (out.parent / "log" / "make.log").write_text(
        f"DKMS make.log for {module}-{version} for kernel {kernel} ({arch})\nemulated: nothing compiled\n")
    fpr = mok_fingerprint() if signing else None
    for name, loc in modules_of(conf):
        if signing:
            where = f"/{DKMS_TREE}/{module}/{version}/build/" + (f"{loc}/" if loc else "")
            _out(f"Signing module {where}{name}.ko")
        meta = {"emulated_kernel_module": name, "dkms_module": module, "version": version, "kernel": kernel,
                "signer": SIGNER if fpr else None, "sig_key": fpr, "sig_hashalgo": "sha512" if fpr else None}
        (out / f"{name}.ko").write_text(json.dumps(meta, sort_keys=True) + "\n")
    _out("Cleaning build area...")


def do_install(module: str, version: str, kernel: str, arch: str, force: bool = False) -> None:
    if is_installed(module, version, kernel, arch) and not force:
        _out(f"Module {module}/{version} already installed on kernel {kernel} ({arch}), skip. "
             "You may override by specifying --force.")
        return
    if not is_built(module, version, kernel, arch):
        do_build(module, version, kernel, arch)
    if not p(f"{INSTALL_TREE}/{kernel}").is_dir():
        raise Die(6, f"The directory /{INSTALL_TREE}/{kernel} doesn't exist.",
                  "You cannot install a module onto a non-existant kernel.")
    dest = p(f"{INSTALL_TREE}/{kernel}{DEST}")
    dest.mkdir(parents=True, exist_ok=True)
    for name, _ in modules_of(conf_of(module, version)):
        _out()
        _out(f"{name}.ko:")
        _out("Running module version sanity check.")
        _out(" - Original module")
        _out("   - No original module exists within this kernel")
        _out(" - Installation")
        _out(f"   - Installing to /{INSTALL_TREE}/{kernel}{DEST}/")
        shutil.copyfile(built_dir(module, version, kernel, arch) / f"{name}.ko", dest / f"{name}.ko")
    link = _kernel_link(module, kernel, arch)
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(f"{version}/{kernel}/{arch}", link)
    _out("depmod...")


def do_uninstall(module: str, version: str, kernel: str, arch: str) -> None:
    if not is_installed(module, version, kernel, arch):
        return
    _out(f"Module {module}-{version} for kernel {kernel} ({arch}).")
    _out("Before uninstall, this module version was ACTIVE on this kernel.")
    for name, _ in modules_of(conf_of(module, version)):
        _out()
        _out(f"{name}.ko:")
        _out(" - Uninstallation")
        _out(f"   - Deleting from: /{INSTALL_TREE}/{kernel}{DEST}/")
        (p(f"{INSTALL_TREE}/{kernel}{DEST}") / f"{name}.ko").unlink(missing_ok=True)
        _out(" - Original module")
        _out("   - No original module was found for this module on this kernel.")
        _out("   - Use the dkms install command to reinstall any previous module version.")
    _kernel_link(module, kernel, arch).unlink(missing_ok=True)
    _out()
    _out("depmod...")


def do_unbuild(module: str, version: str, kernel: str, arch: str, quiet: bool = False) -> None:
    """``dkms unbuild``: uninstall when installed, then drop the build; the module stays added."""
    if not quiet:
        do_uninstall(module, version, kernel, arch)
    kdir = tree(module, version) / kernel
    if (kdir / arch).is_dir():
        shutil.rmtree(kdir / arch)
    if kdir.is_dir() and not any(kdir.iterdir()):
        kdir.rmdir()


def do_remove(module: str, version: str, kernels: list[tuple[str, str]]) -> None:
    for kernel, arch in kernels:
        do_unbuild(module, version, kernel, arch)
    vdir = tree(module, version)
    others = [d for d in vdir.iterdir() if d.is_dir() and not d.is_symlink() and d.name != "build"]
    if not others:
        _out(f"Deleting module {module}-{version} completely from the DKMS tree.")
        shutil.rmtree(vdir)
    mdir = tree(module)
    if mdir.is_dir() and not [d for d in mdir.iterdir() if not d.name.startswith("kernel-")]:
        shutil.rmtree(mdir)


def built_kernels(module: str, version: str) -> list[tuple[str, str]]:
    vdir = tree(module, version)
    out = []
    for kdir in sorted(vdir.iterdir()) if vdir.is_dir() else []:
        if kdir.is_dir() and not kdir.is_symlink() and kdir.name not in ("build", "source", "log"):
            out += [(kdir.name, a.name) for a in sorted(kdir.iterdir()) if a.is_dir()]
    return out


def status_lines(module: str | None = None, version: str | None = None,
                 kernel: str | None = None) -> list[str]:
    lines = []
    for m, v in added():
        if (module and m != module) or (version and v != version):
            continue
        found = False
        for k, a in built_kernels(m, v):
            if kernel and k != kernel:
                continue
            if not is_built(m, v, k, a):
                continue
            found = True
            state = "installed" if is_installed(m, v, k, a) else "built"
            extra = ""
            if state == "installed":
                for name, _ in modules_of(conf_of(m, v)):
                    built = built_dir(m, v, k, a) / f"{name}.ko"
                    inst = p(f"{INSTALL_TREE}/{k}{DEST}") / f"{name}.ko"
                    if not inst.is_file() or inst.read_bytes() != built.read_bytes():
                        extra = " (WARNING! Diff between built and installed module!)"
                        break
            lines.append(f"{m}/{v}, {k}, {a}: {state}{extra}")
        if not found:
            lines.append(f"{m}/{v}: added")
    return lines


def autoinstall(kernel: str, arch: str) -> int:
    newest: dict[str, str] = {}
    for m, v in added():
        try:
            conf = conf_of(m, v)
        except Die:
            continue
        if str(conf.get("AUTOINSTALL", "")).lower() != "yes":
            continue
        if m not in newest or _vkey(v) > _vkey(newest[m]):
            newest[m] = v
    failed = False
    for m, v in sorted(newest.items()):
        if any(is_installed(m, ver, kernel, arch) for mm, ver in added() if mm == m):
            continue
        try:
            do_install(m, v, kernel, arch)
        except Die as exc:
            _error(*exc.lines)
            failed = True
    if failed:
        raise Die(11, "One or more modules failed to install during autoinstall.",
                  "Refer to previous errors for more information.")
    return 0


def _vkey(v: str) -> list[Any]:
    return [(0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"[.\-~+]", v)]


# --- what modprobe/modinfo see (emul/services.py) ---------------------------------------------

def provider(name: str) -> tuple[str, str] | None:
    """(dkms module, version) whose dkms.conf builds kernel module ``name``; None when no DKMS
    source in /usr/src declares it."""
    src = p(SOURCE_TREE)
    if not src.is_dir():
        return None
    for conf_path in sorted(src.glob("*/dkms.conf")):
        try:
            conf = read_conf(conf_path)
        except OSError:
            continue
        if any(n == name for n, _ in modules_of(conf)):
            return str(conf.get("PACKAGE_NAME") or ""), str(conf.get("PACKAGE_VERSION") or "")
    return None


def installed_module(name: str, kernel: str | None = None) -> dict[str, Any] | None:
    """The installed DKMS copy of ``name`` for ``kernel`` (default: running): its metadata."""
    f = p(f"{INSTALL_TREE}/{kernel or running_kernel()}{DEST}/{name}.ko")
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError):
        return None


PREBUILT = "usr/share/emulated-ofed/kernel"  # MLNX_OFED's mlnx-ofed-kernel-modules (prebuilt)


def refusal(name: str) -> str | None:
    """What the real modprobe prints when kernel module ``name`` of a DKMS stack cannot load for the
    running kernel; None when it can, or when it is not a DKMS stack's module (MLNX_OFED's
    prebuilt mlnx-ofed-kernel-modules, or no dkms.conf declares it): the old rules apply then.

    - no ``/lib/modules/<uname -r>/updates/dkms/<name>.ko``: ``modprobe: FATAL: Module NAME not found
      in directory /lib/modules/K`` (kmod, as in dkms issue captures, e.g. seflerZ/oneclick-gpu-pv#5);
    - Secure Boot on and the module unsigned or its signer's key not enrolled (MokList):
      ``modprobe: ERROR: could not insert 'NAME': Key was rejected by service`` (EKEYREJECTED; the
      kernel refuses unsigned and unknown-key modules alike when signatures are enforced;
      ertius.org/til/2025-11-18, quo/ithc-linux#22).
    """
    from . import mokutil

    if p(PREBUILT).exists() or provider(name) is None:
        return None
    kernel = running_kernel()
    meta = installed_module(name, kernel)
    if meta is None:
        return f"modprobe: FATAL: Module {name} not found in directory /lib/modules/{kernel}"
    if mokutil.secure_boot_on():
        key = meta.get("sig_key")
        if not key or not mokutil.is_enrolled(key):
            return f"modprobe: ERROR: could not insert '{name}': Key was rejected by service"
    return None


def stack_refusal() -> str | None:
    """The refusal for the HCA driver (mlx5_core, then ib_core): why openibd cannot load the stack."""
    for name in ("mlx5_core", "ib_core"):
        why = refusal(name)
        if why:
            return why
    return None


def modinfo_fields(name: str) -> dict[str, str] | bool | None:
    """modinfo's fields for a DKMS stack's module (False: not a DKMS stack's; None: not found)."""
    if p(PREBUILT).exists() or provider(name) is None:
        return False
    kernel = running_kernel()
    meta = installed_module(name, kernel)
    if meta is None:
        return None
    fields = {"filename": f"/lib/modules/{kernel}{DEST}/{name}.ko", "version": str(meta.get("version") or ""),
              "license": "Dual BSD/GPL", "name": name,
              "vermagic": f"{kernel} SMP preempt mod_unload modversions"}
    if meta.get("signer"):
        fields |= {"sig_id": "PKCS#7", "signer": str(meta["signer"]), "sig_key": str(meta["sig_key"]),
                   "sig_hashalgo": str(meta.get("sig_hashalgo") or "sha512")}
    return fields


# --- command line -----------------------------------------------------------------------------

USAGE = ("Usage: /usr/sbin/dkms [action] [options]\n"
         "  [action]  = { add | remove | build | unbuild | install | uninstall | autoinstall | status }\n"
         "  [options] = [-m module] [-v module-version] [-k kernel-version] [-a arch] [--all] [--force]")


def _parse(argv: list[str]) -> dict[str, Any]:
    opts: dict[str, Any] = {"action": None, "module": None, "version": None, "kernels": [], "arch": None,
                            "all": False, "force": False}
    it = iter(argv)
    for a in it:
        if a == "-m":
            opts["module"] = next(it, None)
        elif a == "-v":
            opts["version"] = next(it, None)
        elif a in ("-k", "--kernelver"):
            opts["kernels"].append(next(it, None) or "")
        elif a.startswith("--kernelver="):
            opts["kernels"].append(a.split("=", 1)[1])
        elif a == "-a" or a == "--arch":
            opts["arch"] = next(it, None)
        elif a == "--all":
            opts["all"] = True
        elif a == "--force":
            opts["force"] = True
        elif a in ("-q", "--quiet", "--no-depmod", "--no-prepare-kernel", "--no-clean-kernel", "--verbose"):
            continue
        elif a.startswith("-"):
            raise Die(1, f"Unknown option: {a}")
        elif opts["action"] is None:
            opts["action"] = a
        elif opts["module"] is None:
            opts["module"] = a
        else:
            raise Die(1, f"Unknown argument: {a}")
    m = opts["module"]
    if m and "/" in m:
        opts["module"], opts["version"] = m.split("/", 1)
    return opts


def _kernel_arches(opts: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for k in opts["kernels"] or [running_kernel()]:
        kernel, _, arch = k.partition("/")
        out.append((kernel, arch or opts["arch"] or machine()))
    return out


def main(argv: list[str]) -> int:
    try:
        opts = _parse(argv)
        action = opts["action"]
        if action is None:
            _out(USAGE)
            return 0
        if action == "status":
            kernel = opts["kernels"][0].partition("/")[0] if opts["kernels"] else None
            for line in status_lines(opts["module"], opts["version"], kernel):
                _out(line)
            return 0
        if action == "autoinstall":
            for kernel, arch in _kernel_arches(opts):
                autoinstall(kernel, arch)
            return 0
        if action not in ("add", "build", "install", "remove", "uninstall", "unbuild"):
            _error(f'Unknown action specified: "{action}"')
            _out(USAGE)
            return 0
        module, version = opts["module"], opts["version"]
        if not module or not version:
            raise Die(1, "Invalid number of arguments passed.",
                      f"Usage: {action} <module>/<module-version> or",
                      f"       {action} -m <module>/<module-version> or",
                      f"       {action} -m <module> -v <module-version>")
        if action == "add":
            do_add(module, version)
        elif action == "build":
            for kernel, arch in _kernel_arches(opts):
                do_build(module, version, kernel, arch, opts["force"])
        elif action == "install":
            for kernel, arch in _kernel_arches(opts):
                do_install(module, version, kernel, arch, opts["force"])
        else:
            if not is_added(module, version):
                raise Die(3, f"The module/version combo: {module}-{version} is not located in the DKMS tree.")
            kernels = built_kernels(module, version) if opts["all"] else _kernel_arches(opts)
            if action == "remove":
                do_remove(module, version, kernels)
            elif action == "uninstall":
                for kernel, arch in kernels:
                    do_uninstall(module, version, kernel, arch)
            else:
                for kernel, arch in kernels:
                    do_unbuild(module, version, kernel, arch)
        return 0
    except Die as exc:
        _error(*exc.lines)
        return exc.code
