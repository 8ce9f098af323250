"""Lab hosts: overlay root, systemd-nspawn boot, commands inside, stop.

A host is ``systemd-nspawn -b`` on an overlay (lower = cached image, upper/work in the host dir)
joined to its pre-made network namespace ``fo-<host>``. Its PID 1 ("leader") is the nspawn child
whose comm is ``systemd``; :func:`host_exec` enters all of the leader's namespaces with nsenter.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from fabricops.errors import FabricopsError
from fabricops_lab import fabric_services, foreign_arch, hardware, network, paths
from fabricops_lab.emul import firmware
from fabricops_lab.procs import alive

log = logging.getLogger(__name__)

EMUL_TARGET = "usr/lib/emulated-hw"
WRAPPER_TEMPLATE = paths.DATA_DIR / "tool-wrapper.py.in"
STOP_TIMEOUT = 6.0


# --- SSH material ---------------------------------------------------------------------------


def ensure_lab_key() -> Path:
    d = paths.ssh_dir()
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    key = d / "id_ed25519"
    if not key.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fabricops-lab", "-f", str(key)], check=True
        )
    return key


def ensure_host_key(name: str) -> str:
    """The host's SSH host key (kept in the host dir so known_hosts is written before boot)."""
    d = paths.host_dir(name) / "ssh"
    d.mkdir(parents=True, exist_ok=True)
    key = d / "ssh_host_ed25519_key"
    if not key.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{name}", "-f", str(key)], check=True
        )
    return (d / "ssh_host_ed25519_key.pub").read_text().strip()


def ensure_rack_key() -> Path:
    """The rack-internal key pair (one per lab, kept with the lab's other SSH material): every host
    has it as /root/.ssh/id_ed25519 and in authorized_keys, so mpirun's ssh launcher (and anything
    else a site runs host to host) reaches every host without a password, as on a real cluster."""
    d = paths.ssh_dir()
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    key = d / "rack_ed25519"
    if not key.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fabricops-lab-rack", "-f", str(key)],
            check=True,
        )
    return key


def rack_ssh_files(topo: dict[str, Any], rack_key: Path, controller_pub: str) -> dict[str, tuple[str, int]]:
    """/root/.ssh of a lab host: the rack key, authorized_keys (the controller's key and the rack
    key) and known_hosts naming every lab host by name and management address with its host key,
    so StrictHostKeyChecking stays at its default and BatchMode ssh still connects."""
    from fabricops_lab import inventory

    rack_pub = rack_key.with_suffix(".pub").read_text().strip()
    known = inventory.known_hosts_lines({"hosts": topo["hosts"]})
    return {
        "id_ed25519": (rack_key.read_text(), 0o600),
        "id_ed25519.pub": (rack_pub + "\n", 0o644),
        "authorized_keys": (f"{controller_pub.strip()}\n{rack_pub}\n", 0o600),
        "known_hosts": ("\n".join(known) + "\n", 0o644),
    }


def ssh_base_args(known_hosts: Path | None = None) -> list[str]:
    kh = known_hosts or paths.ssh_dir() / "known_hosts"
    return [
        "-i",
        str(paths.ssh_dir() / "id_ed25519"),
        "-o",
        f"UserKnownHostsFile={kh}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "LogLevel=ERROR",
        "-F",
        "/dev/null",
    ]


# --- the root filesystem ----------------------------------------------------------------------


def is_mounted(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


def mount_root(name: str, lower: Path) -> Path:
    hd = paths.host_dir(name)
    upper, work, root = hd / "upper", hd / "work", hd / "root"
    for d in (upper, work, root):
        d.mkdir(parents=True, exist_ok=True)
    if not is_mounted(root):
        network.run(
            [
                "mount",
                "-t",
                "overlay",
                f"fo-{name}",
                "-o",
                f"lowerdir={lower},upperdir={upper},workdir={work}",
                str(root),
            ]
        )
    return root


def unmount_root(name: str) -> None:
    root = paths.host_dir(name) / "root"
    if is_mounted(root) and subprocess.run(["umount", str(root)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(root)], capture_output=True)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    path.write_text(text)
    os.chmod(path, mode)


def etc_hosts(topo: dict[str, Any], name: str | None) -> str:
    lines = ["127.0.0.1\tlocalhost"]
    if name:
        lines.append(f"127.0.1.1\t{name}")
    lines += ["::1\tlocalhost ip6-localhost ip6-loopback", "", "# fabricops lab management network"]
    lines.append("198.51.100.1\tcontroller")
    lines += [f"{h['mgmt_ip']}\t{h['name']}" for h in topo["hosts"]]
    from fabricops_lab import slurm  # the Slurm head node, by name as a site's DNS has it

    lines.append(f"{slurm.CONTROLLER_IP}\t{slurm.CONTROLLER}")
    lines += [f"{s['mgmt_ip']}\t{s['name']}" for s in topo["switches"]]
    return "\n".join(lines) + "\n"


def interfaces_files(host: dict[str, Any]) -> dict[str, str]:
    """/etc/network/interfaces.d/ files the way the rack's provisioning writes them: management
    eth0 and the RoCE addresses (203.0.113.0/24, one /26 per rail). IPoIB is left to the ipoib role."""
    files = {"eth0": f"auto eth0\niface eth0 inet static\n    address {host['mgmt_ip']}/24\n"}
    for hca in host["hcas"]:
        for p in hca["ports"]:
            if p["link_layer"] == "Ethernet" and p.get("address"):
                files[p["netdev"]] = (
                    f"# RoCE rail {p['rail']} ({hca['name']} port {p['port']})\n"
                    f"auto {p['netdev']}\niface {p['netdev']} inet static\n"
                    f"    address {p['address']}/{p['prefix']}\n"
                )
    return files


def _static_addresses(host: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(netdev, address/prefix, comment) the rack's provisioning configures: management eth0 and
    the RoCE addresses (203.0.113.0/24, one /26 per rail). IPoIB is left to the ipoib role."""
    out = [("eth0", f"{host['mgmt_ip']}/24", "management")]
    for hca in host["hcas"]:
        for p in hca["ports"]:
            if p["link_layer"] == "Ethernet" and p.get("address"):
                out.append((p["netdev"], f"{p['address']}/{p['prefix']}",
                            f"RoCE rail {p['rail']} ({hca['name']} port {p['port']})"))
    return out


#: the netplan file the provisioning writes on a `netplan` host (Ubuntu Server's installer, subiquity,
#: names its file so), mode 0600 as netplan 0.106 wants
NETPLAN_FILE = "etc/netplan/00-installer-config.yaml"
#: NetworkManager's keyfile directory and the lab's configuration snippet
NM_CONNECTIONS = "etc/NetworkManager/system-connections"
NM_CONF = "etc/NetworkManager/conf.d/00-fabricops-lab.conf"


def network_files(host: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """The host's network configuration as the rack's provisioning writes it, in the host variant's
    own stack (image-recipe.yml, variants): path under the root -> (text, mode)."""
    variant = host.get("variant") or "default"
    addrs = _static_addresses(host)
    if variant == "netplan":
        lines = ["# written by the rack's provisioning (fabricops lab)", "network:", "  version: 2",
                 "  ethernets:"]
        for netdev, cidr, comment in addrs:
            lines += [f"    {netdev}:  # {comment}", "      dhcp4: false", f"      addresses: [{cidr}]"]
        return {NETPLAN_FILE: ("\n".join(lines) + "\n", 0o600)}
    if variant == "networkmanager":
        files = {
            # a server's NetworkManager makes no "Wired connection N" (DHCP) for an unconfigured port
            # (RHEL's kickstart and cloud images set it so): the fabric ports wait for their roles
            NM_CONF: ("# fabricops lab: provisioning configures each port\n[main]\nno-auto-default=*\n",
                      0o644),
        }
        for netdev, cidr, comment in addrs:
            files[f"{NM_CONNECTIONS}/{netdev}.nmconnection"] = (
                f"# {comment}, written by the rack's provisioning (fabricops lab)\n"
                f"[connection]\nid={netdev}\ntype=ethernet\ninterface-name={netdev}\n"
                "autoconnect=true\n\n"
                f"[ipv4]\nmethod=manual\naddress1={cidr}\n\n[ipv6]\nmethod=disabled\n",
                0o600,
            )
        return files
    stanzas = interfaces_files(host)
    return {f"etc/network/interfaces.d/{name}": (text, 0o644) for name, text in stanzas.items()}


def install_emulated_software(root: Path, arch: str = "amd64") -> bool:
    """Copy the emulated-hardware package and the emulated NVIDIA driver's nvidia-smi (ARCH: the
    host's Debian architecture, for what goes under a multiarch directory)."""
    target = root / EMUL_TARGET
    if (target / "emul").exists():
        shutil.rmtree(target / "emul")
    target.mkdir(parents=True, exist_ok=True)
    shutil.copytree(paths.EMUL_DIR, target / "emul", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    hwctl = paths.EMUL_DIR / "hwctl.py"
    have_hwctl = hwctl.exists()
    if have_hwctl:
        shutil.copy2(hwctl, target / "hwctl.py")
    wrapper = (
        WRAPPER_TEMPLATE.read_text().replace("@TOOL@", "nvidia-smi").replace("@VENDOR@", "NVIDIA driver")
    )
    _write(root / "usr/bin/nvidia-smi", wrapper, 0o755)
    # The mlx5 driver's statistics (per-priority PFC pause counters) as `ethtool -S` prints them for
    # the emulated NICs; /usr/local/sbin comes before /usr/sbin, and other netdevs get the real tool.
    wrapper = WRAPPER_TEMPLATE.read_text().replace("@TOOL@", "ethtool").replace("@VENDOR@", "mlx5 driver")
    _write(root / "usr/local/sbin/ethtool", wrapper, 0o755)
    # lldpd's client, as a provisioned server has it (the product does not install lldpd):
    # neighbours from the fabric's cabling as built (emul/fabricdisc.py)
    wrapper = WRAPPER_TEMPLATE.read_text().replace("@TOOL@", "lldpctl").replace("@VENDOR@", "lldpd package")
    _write(root / "usr/sbin/lldpctl", wrapper, 0o755)
    # pciutils' lspci for the emulated PCIe tree (emul/pci.py): /usr/local/bin is ahead of
    # /usr/bin (the image's real lspci) in every user's PATH, like the ethtool front-end above
    wrapper = WRAPPER_TEMPLATE.read_text().replace("@TOOL@", "lspci").replace("@VENDOR@", "pciutils")
    _write(root / "usr/local/bin/lspci", wrapper, 0o755)
    install_nccl(root, arch)
    # Emulated kernel modules (modprobe/lsmod/rmmod/modinfo) and the HCA's answer to the subnet manager
    # (emulated-hw-sm.path): docs/fabric-services.md, "The lab".
    fabric_services.install_into_root(root)
    return have_hwctl


#: the NCCL library's file name as a site installs it (libnccl2 package layout); its version is the name
NCCL_SONAME_FILE = "libnccl.so.2.23.4"


def nccl_lib(arch: str = "amd64") -> str:
    """Where libnccl2 puts the library on an ARCH host: its multiarch directory
    (usr/lib/x86_64-linux-gnu on amd64, usr/lib/aarch64-linux-gnu on arm64)."""
    return f"{foreign_arch.multiarch_lib(arch)}/{NCCL_SONAME_FILE}"


#: the NCCL library of an amd64 host
NCCL_LIB = nccl_lib("amd64")
#: emulated nccl-tests binaries (on PATH, as a site's build puts them) and Open MPI's launcher
NCCL_TOOLS = {"usr/local/bin/all_reduce_perf": "nccl-tests", "usr/local/bin/all_gather_perf": "nccl-tests",
              "usr/local/bin/reduce_scatter_perf": "nccl-tests", "usr/bin/mpirun": "Open MPI",
              f"{EMUL_TARGET}/bin/nccl-rank-info": "Open MPI (emulated remote side)"}


def install_nccl(root: Path, arch: str = "amd64") -> None:
    """SPEC-19 E and D: a stub libnccl.so.2.23.4 with its soname link (in ARCH's multiarch
    directory), and wrappers for mpirun, the three nccl-tests binaries and the helper mpirun runs on
    other hosts (docs/lab.md, "Multi-node NCCL in the lab")."""
    lib = root / nccl_lib(arch)
    _write(lib, "# emulated NCCL 2.23.4 (fabricops lab): the version is the file name\n")
    link = lib.with_name("libnccl.so.2")
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(lib.name, link)
    template = WRAPPER_TEMPLATE.read_text()
    for rel, vendor in NCCL_TOOLS.items():
        tool = Path(rel).name
        _write(root / rel, template.replace("@TOOL@", tool).replace("@VENDOR@", vendor), 0o755)


def prepare_host(
    topo: dict[str, Any], host: dict[str, Any], lower: Path, authorized_key: str
) -> dict[str, Any]:
    """Host dir, hardware.json, overlay root and the files a provisioned server has."""
    name = host["name"]
    hd = paths.host_dir(name)
    hw = hardware.hardware_json(topo, host)
    hw_dir = hd / "hw"
    hw_dir.mkdir(parents=True, exist_ok=True)
    _write(hw_dir / "hardware.json", json.dumps(hw, indent=2) + "\n")
    # the host (re)starts: a power cycle for its NICs' firmware (burned image runs, next-boot
    # settings apply; emul/firmware.py)
    firmware.power_cycle_dir(hw_dir / "firmware")
    ensure_host_key(name)
    variant = host.get("variant") or "default"
    arch = host.get("arch") or "amd64"
    if arch != "amd64" or variant != "default":
        from fabricops_lab import image

        if arch != "amd64":  # the architecture's own image (qemu-user registered: foreign_arch.py)
            lower = image.ensure_image(arch=arch)
        if variant != "default":  # the variant's layer over the image (image-recipe.yml, variants)
            lower = Path(f"{image.ensure_variant(variant, arch=arch)}:{lower}")
    root = mount_root(name, lower)
    etc = root / "etc"
    _write(etc / "hostname", f"{name}\n")
    _write(etc / "hosts", etc_hosts(topo, name))
    _write(etc / "machine-id", hardware.machine_id(name) + "\n", 0o444)
    for suffix, mode in (("", 0o600), (".pub", 0o644)):
        src = hd / "ssh" / f"ssh_host_ed25519_key{suffix}"
        _write(etc / "ssh" / f"ssh_host_ed25519_key{suffix}", src.read_text(), mode)
    (root / "root/.ssh").mkdir(mode=0o700, parents=True, exist_ok=True)
    for fname, (text, mode) in rack_ssh_files(topo, ensure_rack_key(), authorized_key).items():
        _write(root / "root/.ssh" / fname, text, mode)
    for rel, (text, mode) in network_files(host).items():
        _write(root / rel, text, mode)
    have_hwctl = install_emulated_software(root, arch)
    if arch != "amd64":
        qemu_user_dropins(root)
    install_kernel_files(root, str(hw.get("kernel") or hardware.kernel_release()), hw_dir)
    return {"hardware": hw, "hwctl": have_hwctl}


#: a drop-in the lab gives a foreign-architecture host's units that load credentials
QEMU_DROPIN = "fabricops-qemu-user.conf"
QEMU_DROPIN_TEXT = (
    "# fabricops lab: this host's programs run under qemu-user, where systemd 252's credential set-up\n"
    "# fails (\"Failed at step CREDENTIALS spawning ...: Invalid argument\"); the unit loads none\n"
    "[Service]\nLoadCredential=\n"
)


def qemu_user_dropins(root: Path) -> list[str]:
    """Reset ``LoadCredential=`` on the units of ROOT's image that have it (systemd-tmpfiles-setup,
    -setup-dev, -sysctl, -sysusers...): under qemu-user their start fails at systemd's CREDENTIALS step,
    and the host would boot ``degraded`` without /tmp and /run's tmpfiles. Nothing of what the lab's
    hosts pass is a credential (no ``systemd.set_credential``). Returns the units given a drop-in."""
    done: list[str] = []
    for d in ("usr/lib/systemd/system", "lib/systemd/system"):  # merged /usr: the same directory
        units = root / d
        if (root / d.split("/")[0]).is_symlink() or not units.is_dir():
            continue  # /lib -> usr/lib: read once, and never through a link out of ROOT
        for unit in sorted(units.glob("*.service")):
            if unit.name in done or unit.is_symlink() or not unit.is_file():
                continue
            if "\nLoadCredential=" in unit.read_text():
                _write(root / f"etc/systemd/system/{unit.name}.d/{QEMU_DROPIN}", QEMU_DROPIN_TEXT)
                done.append(unit.name)
    return done


def install_kernel_files(root: Path, kernel: str, hw_dir: Path) -> None:
    """SPEC-20 C: the running kernel installed with its headers (/boot/vmlinuz-K, /lib/modules/K,
    build -> /usr/src/linux-headers-K), shim's mokutil (emulated, state in hw/secureboot.json), and a
    MOK enrollment queued before this boot completed (MokManager): docs/lab-ofed.md, "DOCA-Host
    mirror, DKMS and Secure Boot"."""
    from fabricops_lab.emul import kernels, mokutil

    kernels.install(root, kernel, headers=True)
    wrapper = WRAPPER_TEMPLATE.read_text().replace("@TOOL@", "mokutil").replace("@VENDOR@", "mokutil package")
    _write(root / "usr/bin/mokutil", wrapper, 0o755)
    mokutil.boot(hw_dir / "secureboot.json")


# --- boot / stop ----------------------------------------------------------------------------


def nspawn_argv(host: dict[str, Any]) -> list[str]:
    name = host["name"]
    hd = paths.host_dir(name)
    return [
        "systemd-nspawn",
        "--boot",
        "--quiet",
        "--directory",
        str(hd / "root"),
        "--machine",
        f"fo-{name}",
        "--hostname",
        name,
        f"--network-namespace-path={network.NETNS_DIR / network.host_netns(name)}",
        "--capability=CAP_NET_ADMIN",
        f"--bind={hd / 'hw'}:/var/lib/emulated-hw",
        f"--bind-ro={paths.fabric_dir()}:/var/lib/emulated-fabric",
        # the subnet managers' shared wire: the one writable part of the fabric directory
        f"--bind={paths.fabric_dir() / 'sm'}:/var/lib/emulated-fabric/sm",
        # the flow ledger: each perftest client writes its run there, so runs that share a cable
        # share its bandwidth and the switch port counters see the bytes (docs/lab-fidelity.md)
        f"--bind={paths.fabric_dir() / 'flows'}:/var/lib/emulated-fabric/flows",
        # IMEX peers: each running nvidia-imex's record and heartbeat (emul/imex.py), read by the
        # nvidia-imex-ctl of every node of its NVLink domain
        f"--bind={paths.fabric_dir() / 'imex'}:/var/lib/emulated-fabric/imex",
        "--register=no",
        "--keep-unit",
        "--console=read-only",
        "--resolv-conf=off",
        "--timezone=off",
        "--link-journal=no",
    ]


def start_host(host: dict[str, Any], argv: list[str] | None = None) -> int:
    """Start the host's nspawn (ARGV, default :func:`nspawn_argv`) in its own process group, logging
    to the host dir; returns its pid."""
    hd = paths.host_dir(host["name"])
    # the flow ledger bind needs its source (a lab made before the ledger existed, restarted host)
    (paths.fabric_dir() / "flows").mkdir(parents=True, exist_ok=True)
    (paths.fabric_dir() / "imex" / "heartbeat").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, SYSTEMD_NSPAWN_API_VFS_WRITABLE="network", SYSTEMD_COLORS="0")
    with open(hd / "console.log", "ab") as log_f:
        proc = subprocess.Popen(
            argv or nspawn_argv(host),
            stdin=subprocess.DEVNULL,
            stdout=log_f,
            stderr=subprocess.STDOUT,
            cwd=str(hd),
            env=env,
            start_new_session=True,
        )
    (hd / "nspawn.pid").write_text(f"{proc.pid}\n")
    return proc.pid


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def find_leader(nspawn_pid: int, timeout: float = 20.0) -> int:
    """PID 1 of the container: the nspawn child whose comm is ``systemd``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(nspawn_pid):
            break
        for child in _children(nspawn_pid):
            if _comm(child) == "systemd":
                return child
        time.sleep(0.05)
    raise FabricopsError(f"systemd-nspawn (pid {nspawn_pid}) did not boot systemd; see its console.log")


#: seconds a host has to answer SSH after its start, and to power off, per architecture: a
#: foreign-architecture host (arm64 under qemu-user) boots and stops several times slower
SSH_TIMEOUT = {"amd64": 60.0, "arm64": 300.0}
STOP_TIMEOUTS = {"amd64": STOP_TIMEOUT, "arm64": 20.0}


def stop_timeout(arch: str | None) -> float:
    return STOP_TIMEOUTS.get(arch or "amd64", STOP_TIMEOUT)


def wait_ssh(host: dict[str, Any], timeout: float | None = None) -> float:
    """Wait until the host accepts the lab key over SSH; returns the seconds it took."""
    if timeout is None:
        timeout = SSH_TIMEOUT.get(host.get("arch") or "amd64", 60.0)
    started = time.monotonic()
    deadline = started + timeout
    ip = host["mgmt_ip"]
    last = ""
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((ip, 22), timeout=1.0) as s:
                s.settimeout(2.0)
                banner = s.recv(64)
            if not banner.startswith(b"SSH-"):
                raise OSError("no SSH banner")
        except OSError as exc:
            last = str(exc)
            time.sleep(0.1)
            continue
        proc = subprocess.run(
            ["ssh", *ssh_base_args(), "-o", "ConnectTimeout=3", f"root@{ip}", "true"],
            capture_output=True,
            text=True,
        )
        if proc.returncode == 0:
            return time.monotonic() - started
        last = proc.stderr.strip()
        time.sleep(0.2)
    raise FabricopsError(f"{host['name']} ({ip}) did not answer SSH within {timeout:.0f} s: {last}")


def stop_host(name: str, nspawn_pid: int | None, timeout: float = STOP_TIMEOUT) -> None:
    """Orderly shutdown (SIGTERM -> the container's systemd powers off); SIGKILL after TIMEOUT."""
    if nspawn_pid and alive(nspawn_pid):
        leader = next((c for c in _children(nspawn_pid) if _comm(c) == "systemd"), None)
        if leader:
            _unmount_emulated_sysfs(leader)
            if _under_qemu(leader):
                _halt_from_inside(leader)
        with contextlib.suppress(ProcessLookupError):
            os.kill(nspawn_pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while alive(nspawn_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(nspawn_pid):
            log.warning("%s did not shut down within %.0f s; killing it", name, timeout)
            for pid in (leader, nspawn_pid):
                if pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(nspawn_pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while alive(nspawn_pid) and time.monotonic() < deadline:
                time.sleep(0.1)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(nspawn_pid, os.WNOHANG)
    unmount_root(name)


def _under_qemu(pid: int) -> bool:
    """Whether PID runs a foreign-architecture program (its executable is a qemu-user interpreter)."""
    try:
        return Path(os.readlink(f"/proc/{pid}/exe")).name.startswith("qemu-")
    except OSError:
        return False


def _halt_from_inside(leader: int) -> None:
    """Ask a qemu-user host's systemd to halt with its own ``kill`` (SIGRTMIN+3, what nspawn sends).

    qemu-user does not map host real-time signals one to one onto the guest's (it keeps some for
    itself), so the SIGRTMIN+3 nspawn sends from outside does not reach the guest systemd as a halt
    (measured: the arm64 host ran on until the SIGKILL). Sent by the guest's kill, through qemu, it
    arrives as sent: the host halts in about 3 s."""
    subprocess.run(
        ["nsenter", "-t", str(leader), "-m", "-u", "-i", "-n", "-p", "-r", "-w", "--",
         "/usr/bin/kill", "-s", "RTMIN+3", "1"],
        capture_output=True, timeout=10,
    )


def _unmount_emulated_sysfs(leader: int) -> None:
    """Take the emulated sysfs overlays off before shutdown: an overlay on /sys hides the
    container's cgroup mounts, and its systemd then cannot run systemd-halt (shutdown hangs)."""
    script = (
        "awk '$1==\"emulated-hw\" {print $2}' /proc/self/mounts | sort -r "
        '| while read m; do umount -l "$m"; done'
    )
    subprocess.run(
        ["nsenter", "-t", str(leader), "-m", "-p", "--", "sh", "-c", script], capture_output=True, timeout=10
    )


def nspawn_pid_of(name: str) -> int | None:
    try:
        return int((paths.host_dir(name) / "nspawn.pid").read_text())
    except (OSError, ValueError):
        return None


def leader_of(name: str, lab: dict[str, Any] | None = None) -> int:
    """The host's current PID 1 (checked: the recorded one, else found again from nspawn)."""
    lab = lab or paths.load_lab()
    info = lab["hosts"].get(name)
    if info is None:
        raise FabricopsError(f"{name} is not a host of the lab (hosts: {', '.join(lab['hosts'])})")
    pid = info.get("leader_pid")
    if pid and _comm(pid) == "systemd" and alive(pid):
        return pid
    nspawn = nspawn_pid_of(name)
    if nspawn and alive(nspawn):
        return find_leader(nspawn, timeout=2)
    raise FabricopsError(f"{name} is down; run fabricops lab up")


def host_exec(
    name: str,
    argv: list[str],
    input: str | None = None,
    check: bool = True,
    timeout: float = 60,
    leader: int | None = None,
) -> subprocess.CompletedProcess:
    """Run ARGV inside a lab host (all of its namespaces, its root, a login-like environment); LEADER
    is the container's PID 1 when it is not a host of lab.json (the Slurm controller)."""
    leader = leader or leader_of(name)
    cmd = [
        "nsenter",
        "-t",
        str(leader),
        "-m",
        "-u",
        "-i",
        "-n",
        "-p",
        "-C",
        "-r",
        "-w",
        "--",
        "env",
        "-i",
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME=/root",
        "LANG=C.UTF-8",
        *argv,
    ]
    proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()[-300:]
        raise FabricopsError(f"{name}: {' '.join(argv)} exited {proc.returncode}: {detail}")
    return proc


def resync_hardware(name: str) -> subprocess.CompletedProcess:
    """Re-render the host's emulated sysfs from hardware.json (``hwctl.py sync`` inside the host)."""
    return host_exec(name, ["python3", f"/{EMUL_TARGET}/hwctl.py", "sync"])


def memory_kib(name: str) -> dict[str, int]:
    """Memory of the host's processes: PSS and RSS sums (KiB) over PID 1 and its descendants."""
    leader = leader_of(name)
    todo, seen = [leader], set()
    pss = rss = 0
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1])
                elif line.startswith("Rss:"):
                    rss += int(line.split()[1])
        except OSError:
            continue
        todo += _children(pid)
    return {"pss_kib": pss, "rss_kib": rss, "processes": len(seen)}
