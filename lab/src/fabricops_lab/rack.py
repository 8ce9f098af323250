"""``fabricops lab up|down|status``: the whole emulated rack.

``up`` is safe to run again: with the same topology already up it reconciles (restarts a host that
went down, restarts dead switches, rewrites the inventory only if it differs) and otherwise changes
nothing; with a different topology up it refuses. ``down`` removes every process, mount, namespace,
link and file the lab made, in parallel, and keeps the image cache.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import shutil
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fabricops.errors import FabricopsError
from fabricops_lab import hardware, hosts, image, inventory, network, paths, preflight, slurm, topology

log = logging.getLogger("fabricops_lab")

PARALLEL = 16


def _service(name: str):
    """fabricops_lab.<name> (switches, ofed_repo, faults) when it exists, else None."""
    try:
        return importlib.import_module(f"fabricops_lab.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"fabricops_lab.{name}":
            return None
        raise


def _pmap(fn, items: list, workers: int = PARALLEL) -> list:
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(fn, items))


def _pmap_settled(fn, items: list) -> list[tuple[Any, Exception | None]]:
    def wrap(item):
        try:
            return fn(item), None
        except Exception as exc:
            return None, exc

    return _pmap(wrap, items)


# --- up ---------------------------------------------------------------------------------------


def resolve_topology(topology_file: str | None, n_hosts: int | None) -> dict[str, Any]:
    """--topology NAME|FILE (topology-NAME.yml from the data dir, or a path), --hosts N scales it."""
    return topology.resolve(topology_file, n_hosts)


def _leftovers() -> bool:
    return (
        (paths.STATE_DIR / "hosts").exists()
        or network.netns_exists(network.FABRIC_NS)
        or network.link_exists(network.MGMT_BRIDGE)
    )


def up(
    topology_file: str | None = None, n_hosts: int | None = None, inventory_dir: str | Path | None = None
) -> dict[str, Any]:
    preflight.check()
    topo = resolve_topology(topology_file, n_hosts)
    inv_dir = Path(inventory_dir) if inventory_dir else paths.default_inventory_dir()
    if paths.lab_json().exists():
        lab = paths.load_lab()
        if lab.get("topology") != topo:
            raise FabricopsError(
                f"a lab with another topology ({lab.get('name')}, {len(lab.get('hosts', {}))} hosts) is up; "
                "run fabricops lab down first"
            )
        return reconcile(lab, inv_dir)
    if _leftovers():
        log.warning("cleaning up what an interrupted lab left behind")
        down()
    preflight.check_capacity(len(topo["hosts"]))
    return create(topo, inv_dir)


def fact_cache_dir() -> Path | None:
    """The file-based fact cache Ansible would use from here (ansible.cfg as Ansible finds it:
    ANSIBLE_CONFIG, ./ansible.cfg, ~/.ansible.cfg; a relative path is relative to the working
    directory, as Ansible reads it); None for a memory cache or when Ansible cannot say."""
    try:
        from ansible.config.manager import ConfigManager

        manager = ConfigManager()
        plugin = str(manager.get_config_value("CACHE_PLUGIN") or "")
        connection = manager.get_config_value("CACHE_PLUGIN_CONNECTION")
    except Exception as exc:  # Ansible's own config errors: the lab still comes up
        log.debug("no fact cache to clear: %s", exc)
        return None
    if plugin.rsplit(".", 1)[-1] not in ("jsonfile", "yaml", "pickle") or not connection:
        return None
    return Path(os.path.expandvars(os.path.expanduser(str(connection)))).absolute()


def forget_cached_facts(names: list[str]) -> list[Path]:
    """Remove the cached facts of the lab's hosts and switches: a rack booted fresh under the same
    names is not the rack they were gathered from, and with ``gathering = smart`` Ansible would take
    them for the new one for the cache's lifetime (a second converge then found what the first had
    skipped). Only files named for those names (``<host>`` or ``..._<host>``), only in the cache."""
    cache = fact_cache_dir()
    if cache is None or not cache.is_dir():
        return []
    wanted = set(names)
    gone = []
    for f in cache.iterdir():
        if f.is_file() and not f.is_symlink() and (f.name in wanted or f.name.rpartition("_")[2] in wanted):
            with contextlib.suppress(OSError):
                f.unlink()
                gone.append(f)
    if gone:
        log.info("forgot %d cached fact file(s) of the lab's hosts in %s", len(gone), cache)
    return gone


def create(topo: dict[str, Any], inv_dir: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    lower = image.ensure_image()
    timings["image_s"] = round(time.monotonic() - t0, 2)
    paths.STATE_DIR.mkdir(parents=True, exist_ok=True)
    lab: dict[str, Any] = {
        "name": topo["name"],
        "topology": topo,
        "hosts": {},
        "switches": {},
        "repo": {},
        "inventory_dir": str(inv_dir.resolve()),
        "image": image.recipe_sha(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    paths.save_lab(lab)  # from here on, `down` knows what to clean
    try:
        _bring_up(lab, topo, lower, timings, t0)
    except BaseException:
        log.error(
            "lab up failed; run fabricops lab down to remove what was made (logs in %s)",
            paths.STATE_DIR / "hosts",
        )
        raise
    write_inventory(lab, inv_dir)
    names = [h["name"] for h in topo["hosts"]] + [sw["name"] for sw in topo.get("switches", [])]
    forget_cached_facts([*names, slurm.CONTROLLER])
    timings["total_s"] = round(time.monotonic() - t0, 2)
    lab["timings"] = timings
    paths.save_lab(lab)
    log.info(
        "lab %s is up: %d hosts in %.1f s (boot+ssh %.1f s)",
        topo["name"],
        len(topo["hosts"]),
        timings["total_s"],
        timings.get("hosts_s", 0),
    )
    return lab


def _write_fabric(topo: dict[str, Any]) -> None:
    fab = paths.fabric_dir()
    (fab / "switches").mkdir(parents=True, exist_ok=True)
    (fab / "sm" / "heartbeat").mkdir(parents=True, exist_ok=True)  # bound rw into hosts (SM wire)
    (fab / "flows").mkdir(parents=True, exist_ok=True)  # bound rw into hosts (the flow ledger)
    (fab / "cabling.json").write_text(json.dumps(hardware.cabling_json(topo), indent=2) + "\n")
    for h in topo["hosts"]:
        d = fab / "hosts" / h["name"]
        d.mkdir(parents=True, exist_ok=True)
        (d / "addresses.json").write_text(json.dumps(hardware.addresses_json(topo, h), indent=2) + "\n")
    for sw in topo["switches"]:
        f = fab / "switches" / f"{sw['name']}.json"
        if not f.exists():  # the switch emulator rewrites it with its running state
            ports = {p: {"link": "up"} for p in sw["ports"]}
            f.write_text(json.dumps({"name": sw["name"], "os": sw["os"], "ports": ports}, indent=2) + "\n")


def write_known_hosts(lab: dict[str, Any]) -> None:
    keys: dict[str, tuple[str, int, str]] = {}
    for name, info in (lab.get("switches") or {}).items():
        pub = _switch_pubkey(name, info)
        if pub:
            keys[name] = ((info.get("mgmt_ip") or ""), int(info.get("port") or 22), pub)
    # the Slurm head node (fabricops_lab.slurm), by name and address like a host
    keys[slurm.CONTROLLER] = (slurm.CONTROLLER_IP, 22, hosts.ensure_host_key(slurm.CONTROLLER))
    lines = inventory.known_hosts_lines(lab["topology"], keys)
    target = paths.ssh_dir() / "known_hosts"
    target.write_text("\n".join(lines) + "\n")


def _switch_pubkey(name: str, info: dict[str, Any]) -> str | None:
    for cand in (info.get("host_key_pub"), str(paths.switch_dir(name) / "host_key.pub")):
        if cand and Path(cand).exists():
            return Path(cand).read_text().strip()
    key = paths.switch_dir(name) / "host_key"
    if key.exists():
        proc = network.run(["ssh-keygen", "-y", "-f", str(key)], check=False)
        if proc.returncode == 0:
            return proc.stdout.strip()
    return None


def _start_host(
    topo: dict[str, Any], host: dict[str, Any], lower: Path, pubkey: str, keep_hw: bool = False
) -> dict[str, Any]:
    hw_file = paths.host_dir(host["name"]) / "hw" / "hardware.json"
    saved = hw_file.read_text() if keep_hw and hw_file.exists() else None
    info = hosts.prepare_host(topo, host, lower, pubkey)
    if saved is not None:
        hw_file.write_text(saved)
    slurm.install(paths.host_dir(host["name"]) / "root", "slurmd")  # MUNGE key, slurmd enabled
    network.create_host_netns(topo, host, info["hardware"])
    nspawn = hosts.start_host(host)
    leader = hosts.find_leader(nspawn)
    return {
        "mgmt_ip": host["mgmt_ip"],
        "leader_pid": leader,
        "nspawn_pid": nspawn,
        "machine": f"fo-{host['name']}",
        "netns": network.host_netns(host["name"]),
        "hwctl": info["hwctl"],
    }


def _bring_up(lab: dict[str, Any], topo: dict[str, Any], lower: Path, timings: dict, t0: float) -> None:
    key = hosts.ensure_lab_key()
    pubkey = key.with_suffix(".pub").read_text()
    hosts.ensure_rack_key()  # once, before the hosts are prepared in parallel (in-rack SSH)
    slurm.ensure_munge_key()  # once, for the same reason (every container gets this one key)
    _write_fabric(topo)
    network.ensure_mgmt_bridge()
    network.ensure_fabric(topo["switches"], topo.get("links"))
    write_known_hosts(lab)
    t1 = time.monotonic()
    with ThreadPoolExecutor(max_workers=1) as one:  # the Slurm head node boots beside the hosts
        head = one.submit(slurm.start_controller, topo, lower, pubkey)
        results = _pmap_settled(lambda h: _start_host(topo, h, lower, pubkey), topo["hosts"])
    for h, (res, _err) in zip(topo["hosts"], results, strict=True):
        if res:
            lab["hosts"][h["name"]] = res
    paths.save_lab(lab)
    lab["slurm"] = {"controller": head.result()}
    paths.save_lab(lab)
    errors = [f"{h['name']}: {err}" for h, (_r, err) in zip(topo["hosts"], results, strict=True) if err]
    if errors:
        raise FabricopsError("hosts did not start: " + "; ".join(errors))
    waited = _pmap(lambda h: hosts.wait_ssh(h), [*topo["hosts"], slurm.controller_host()])
    timings["hosts_s"] = round(time.monotonic() - t1, 2)
    for h, seconds in zip(topo["hosts"], waited, strict=False):  # until it answered SSH, all started
        lab["hosts"][h["name"]]["ssh_s"] = round(seconds, 2)
    _sync_hardware(lab, topo["hosts"])
    t2 = time.monotonic()
    _start_services(lab)
    timings["services_s"] = round(time.monotonic() - t2, 2)
    t3 = time.monotonic()
    slurm.start(lab, fresh=True)  # slurmctld, slurmd everywhere, every node idle (or one sentence)
    timings["slurm_s"] = round(time.monotonic() - t3, 2)


def _sync_hardware(lab: dict[str, Any], host_list: list[dict[str, Any]]) -> None:
    if not (paths.EMUL_DIR / "hwctl.py").exists():
        log.warning("emul/hwctl.py is not there yet: hosts run without the emulated sysfs")
        return
    results = _pmap_settled(lambda h: hosts.resync_hardware(h["name"]), host_list)
    for h, (_res, err) in zip(host_list, results, strict=True):
        if err:
            log.warning("%s: hwctl sync failed: %s", h["name"], err)


def _start_services(lab: dict[str, Any]) -> None:
    switches = _service("switches")
    if switches is None:
        log.warning("fabricops_lab.switches is not there yet: no emulated switches")
    else:
        lab["switches"] = switches.start(lab) or {}
        paths.save_lab(lab)
        write_known_hosts(lab)
    repo = _service("ofed_repo")
    if repo is None:
        log.warning("fabricops_lab.ofed_repo is not there yet: no emulated MLNX_OFED repository")
    else:
        facts = repo.prepare(lab) or {}
        lab["ofed"] = facts
        lab["repo"] = {
            "url": facts.get("url") or facts.get("repo_url") or "http://198.51.100.1:8080/",
            "pid": facts.get("pid"),
        }
        paths.save_lab(lab)
        # The fabric manager repository lives next to MLNX_OFED's (same HTTP server); after
        # ofed_repo.prepare, whose rebuild clears repo_dir(). It starts no process of its own.
        fabric_services = _service("fabric_services")
        if fabric_services is not None:
            lab["fabric_manager"] = fabric_services.prepare(lab)
            # the same packages as a signed RPM repository, only for a topology with an `rpm` host
            # (rpm_repo.wanted: CI's rack has none, so it neither builds it nor needs the rpm tools)
            rpm_repo = _service("rpm_repo")
            if rpm_repo is not None and rpm_repo.wanted(lab):
                lab["fabric_manager"]["rpm"] = rpm_repo.prepare(lab)
                # an rpm NVL72 tray's driver source: the same repository through dnf (nvidia_imex)
                rpm_repo.install_driver_source(lab, lab["fabric_manager"]["rpm"])
            paths.save_lab(lab)
        # NIC firmware images under the same served directory (docs/lab-device-contract.md, "NIC
        # firmware (MFT)"); after ofed_repo.prepare for the same reason.
        firmware_images = _service("firmware_images")
        if firmware_images is not None:
            lab["nic_firmware"] = firmware_images.prepare(lab)
            paths.save_lab(lab)
        # DOCA-Host repositories (doca/<ver>/debian12/<arch>/), same server, also after
        # ofed_repo.prepare (docs/lab-ofed.md, "DOCA-Host mirror, DKMS and Secure Boot")
        doca_repo = _service("doca_repo")
        if doca_repo is not None:
            lab["doca"] = doca_repo.prepare(lab)
            paths.save_lab(lab)


def write_inventory(lab: dict[str, Any], inv_dir: Path) -> bool:
    return inventory.write(lab, inv_dir, lab.get("ofed") or None)


def reconcile(lab: dict[str, Any], inv_dir: Path) -> dict[str, Any]:
    topo = lab["topology"]
    changed: list[str] = []
    network.ensure_mgmt_bridge()
    network.ensure_fabric(topo["switches"], topo.get("links"))
    down_hosts = [h for h in topo["hosts"] if not host_is_up(lab, h)]
    pubkey = (paths.ssh_dir() / "id_ed25519.pub").read_text()
    if down_hosts:
        lower = image.ensure_image()
        hosts.ensure_rack_key()
        slurm.ensure_munge_key()

        def restart(h):
            hosts.stop_host(h["name"], hosts.nspawn_pid_of(h["name"]), hosts.stop_timeout(h.get("arch")))
            network.destroy_host_netns(h)
            return _start_host(topo, h, lower, pubkey, keep_hw=True)

        for h, res in zip(down_hosts, _pmap(restart, down_hosts), strict=True):
            lab["hosts"][h["name"]] = res
            changed.append(f"restarted {h['name']}")
        paths.save_lab(lab)
        _pmap(lambda h: hosts.wait_ssh(h), down_hosts)
        _sync_hardware(lab, down_hosts)
    changed += slurm.reconcile(lab, image.ensure_image, pubkey)
    paths.save_lab(lab)
    switches = _service("switches")
    running = lab.get("switches") or {}
    dead = [n for n, i in running.items() if i.get("pid") and not hosts.alive(i["pid"])]
    if switches is not None and (dead or not running):
        _start_services(lab)
        changed.append("restarted switches / repository")
    if str(inv_dir.resolve()) != lab.get("inventory_dir"):
        lab["inventory_dir"] = str(inv_dir.resolve())
    if write_inventory(lab, inv_dir):
        changed.append(f"rewrote {inv_dir}")
    paths.save_lab(lab)
    if changed:
        log.info("lab %s was up; %s", lab["name"], ", ".join(changed))
    else:
        log.info("lab %s is already up (%d hosts); nothing changed", lab["name"], len(topo["hosts"]))
    lab["changed"] = changed
    return lab


def host_is_up(lab: dict[str, Any], host: dict[str, Any]) -> bool:
    try:
        hosts.leader_of(host["name"], lab)
    except FabricopsError:
        return False
    return _port_open(host["mgmt_ip"], 22)


def _port_open(ip: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=timeout):
            return True
    except OSError:
        return False


# --- down -------------------------------------------------------------------------------------


def down() -> list[str]:
    """Stop and remove everything the lab made; returns what was removed (for the log)."""
    done: list[str] = []
    try:
        lab = paths.load_lab()
    except FabricopsError:
        lab = None
    if lab:
        for svc_name in ("switches", "ofed_repo"):
            svc = _service(svc_name)
            if svc is not None:
                try:
                    svc.stop(lab)
                    done.append(svc_name)
                except Exception as exc:
                    log.warning("%s.stop failed: %s", svc_name, exc)
    names = set(lab["hosts"]) if lab else set()
    topo = lab["topology"] if lab else None
    if topo:
        names |= {h["name"] for h in topo["hosts"]}
    hosts_root = paths.STATE_DIR / "hosts"
    if hosts_root.is_dir():
        names |= {p.name for p in hosts_root.iterdir() if p.is_dir()}
    names_l = sorted(names)
    arch = {h["name"]: h.get("arch") for h in (topo or {}).get("hosts", [])}
    _pmap(lambda n: hosts.stop_host(n, hosts.nspawn_pid_of(n), hosts.stop_timeout(arch.get(n))), names_l)
    if names_l:
        done.append(f"{len(names_l)} hosts")
    slurm.remove()  # the head node's netns and veth (its container stopped with the hosts above)
    network.teardown(topo)
    for p in (
        Path("/run/systemd/nspawn/propagate").glob("fo-*")
        if Path("/run/systemd/nspawn/propagate").is_dir()
        else []
    ):
        shutil.rmtree(p, ignore_errors=True)
    if lab and lab.get("inventory_dir"):
        inventory.remove(Path(lab["inventory_dir"]))
    for rel in ("hosts", "fabric", "ssh", "switches", "slurm", "lab.json", "lab.tmp", "faults.json"):
        p = paths.STATE_DIR / rel
        if p.is_dir():
            still = [m for m in _mounts_under(p)]
            if still:
                log.warning("still mounted under %s: %s", p, ", ".join(still))
                continue
            shutil.rmtree(p, ignore_errors=True)
        elif p.exists():
            p.unlink()
    with contextlib.suppress(OSError):
        paths.STATE_DIR.rmdir()  # only when nothing else (e.g. the repo cache) is left
    return done


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path).rstrip("/") + "/"
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(prefix)]


# --- status -----------------------------------------------------------------------------------


def status() -> dict[str, Any]:
    lab = paths.load_lab()
    topo = lab["topology"]
    out: dict[str, Any] = {
        "name": lab["name"],
        "state_dir": str(paths.STATE_DIR),
        "inventory_dir": lab.get("inventory_dir"),
        "hosts": {},
        "switches": {},
        "repo": lab.get("repo") or {},
        "slurm": {
            "controller": slurm.CONTROLLER,
            "state": "up" if lab.get("slurm") and slurm.controller_is_up() else "down",
            "mgmt_ip": slurm.CONTROLLER_IP,
        },
    }

    def one(h):
        info = lab["hosts"].get(h["name"], {})
        up_ = host_is_up(lab, h)
        data = {
            "state": "up" if up_ else "down",
            "mgmt_ip": h["mgmt_ip"],
            "leader_pid": info.get("leader_pid"),
            "machine": info.get("machine"),
            "addresses": {},
        }
        for hca in h["hcas"]:
            for p in hca["ports"]:
                data["addresses"][p["netdev"]] = f"{p['address']}/{p['prefix']}" if p.get("address") else None
        return data

    for h, data in zip(topo["hosts"], _pmap(one, topo["hosts"]), strict=True):
        out["hosts"][h["name"]] = data
    running = lab.get("switches") or {}
    for sw in topo["switches"]:
        info = running.get(sw["name"], {})
        ip = info.get("mgmt_ip") or sw["mgmt_ip"]
        port = int(info.get("port") or 22)
        if not info.get("pid"):
            state = "not emulated" if sw["os"] == "ib" else "down"
        else:
            state = "up" if hosts.alive(info.get("pid")) and _port_open(ip, port) else "down"
        out["switches"][sw["name"]] = {
            "state": state,
            "os": sw["os"],
            "model": sw["model"],
            "mgmt_ip": ip,
            "port": port,
        }
    return out


def format_status(st: dict[str, Any]) -> str:
    lines = [
        f"lab {st['name']}  (state {st['state_dir']}, inventory {st['inventory_dir']})",
        "",
        f"{'HOST':<10} {'STATE':<6} {'MGMT':<15} DATA",
    ]
    for name, h in st["hosts"].items():
        data = ", ".join(f"{nd}={a}" if a else nd for nd, a in h["addresses"].items())
        lines.append(f"{name:<10} {h['state']:<6} {h['mgmt_ip']:<15} {data}")
    lines += ["", f"{'SWITCH':<14} {'STATE':<13} {'OS':<8} {'MGMT':<15} MODEL"]
    for name, s in st["switches"].items():
        lines.append(f"{name:<14} {s['state']:<13} {s['os']:<8} {s['mgmt_ip']:<15} {s['model']}")
    if st.get("slurm"):
        s = st["slurm"]
        lines += ["", f"Slurm head node: {s['controller']} {s['state']} {s['mgmt_ip']} (slurmctld)"]
    if st.get("repo", {}).get("url"):
        lines += ["", f"MLNX_OFED repository: {st['repo']['url']}"]
    return "\n".join(lines)
