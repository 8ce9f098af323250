"""The ipoib role's netplan backend (issue 37 point 2): the backend chosen from the host's reads, the
rendered netplan file on the role's plans, and every rendered file validated by the real
``netplan generate --root-dir`` of Debian's netplan.io (scripts/setup.sh installs it). At role level,
without the lab: the role's own expressions choose netplan for an Ubuntu 24.04 server's reads and refuse a
host with no backend; a real play on localhost writes the file only under a temporary directory
(``ipoib_netplan_file``), never this machine's /etc/netplan, and never runs ``netplan apply``."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml

from fabricops import ipoib
from fabricops.facts import build_facts

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "ipoib"
NETPLAN = shutil.which("netplan") or ("/usr/sbin/netplan" if Path("/usr/sbin/netplan").exists() else None)
needs_netplan = pytest.mark.skipif(NETPLAN is None, reason="needs netplan.io (scripts/setup.sh installs it)")


def _port():
    return {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)",
            "link_layer": "InfiniBand", "lid": "0x5", "sm_lid": "0x1", "gids": []}


FACTS = build_facts({
    "infiniband": {"mlx5_0": {"netdevs": ["ibp26s0"], "ports": {"1": _port()}},
                   "mlx5_1": {"netdevs": ["ibp60s0"], "ports": {"1": _port()}}},
    "net": {"ibp26s0": {"type": "32", "mtu": "4092", "operstate": "up", "mode": "datagram"},
            "ibp60s0": {"type": "32", "mtu": "65520", "operstate": "up", "mode": "connected"}},
})
TWO = {"networks": {"compute": {"device": "mlx5_0", "prefix": "198.18.0.0/16"},
                    "storage": {"device": "ibp60s0", "prefix": "198.19.0.0/24", "mode": "connected"}}}


def _ifaces(plan, **kw):
    return ipoib.host_interfaces("gpu03", plan=plan, host_index=13, facts=FACTS, **kw)


# -- what the role's preflight reads (host_read results), per kind of host -------------------------

def _cmd(stdout="", rc=0, stderr=""):
    return {"rc": rc, "stdout": stdout, "stderr": stderr, "stdout_lines": stdout.splitlines()}


def _read(*, nm="SubState=dead", renderer=None, netplan=False, netplan_dir=None, ifup=False):
    """A host_read result as the role registers it: ``renderer`` None = netplan not installed (rc 2)."""
    return {
        "commands": {
            "nm": _cmd(nm),
            "netplan_get": (_cmd(stderr="[Errno 2] No such file or directory: b'netplan'", rc=2)
                                 if renderer is None else renderer),
        },
        "stats": {
            "ifup": {"stat": {"exists": ifup, "path": "/sbin/ifup"}},
            "netplan": {"stat": {"exists": netplan, "path": "/usr/sbin/netplan"}},
            "netplan_dir": {"stat": {"exists": bool(netplan_dir if netplan_dir is not None else netplan),
                                     "isdir": bool(netplan_dir if netplan_dir is not None else netplan),
                                     "path": "/etc/netplan"}},
        },
    }


#: Ubuntu 24.04 Server: netplan 1.0 over systemd-networkd, no NetworkManager unit (systemctl show of a
#: missing unit prints SubState=dead), no ifupdown; cloud-init's 50-cloud-init.yaml sets no renderer
UBUNTU24_SERVER = _read(netplan=True, renderer=_cmd(
    "network:\n  version: 2\n  ethernets:\n    enp1s0:\n"
    "      match:\n        macaddress: \"52:54:00:12:34:56\"\n"
    "      dhcp4: true\n      set-name: \"enp1s0\"\n"))
NM_RENDERER = _cmd("network:\n  version: 2\n  renderer: NetworkManager\n")
#: Ubuntu 24.04 Desktop: NetworkManager running, netplan's renderer NetworkManager
#: (01-network-manager-all.yaml)
UBUNTU24_DESKTOP = _read(nm="SubState=running", netplan=True, renderer=NM_RENDERER)
#: the lab's Debian 12 hosts: ifupdown, no NetworkManager, no netplan
DEBIAN12_LAB = _read(ifup=True)


@pytest.mark.parametrize(("read", "backend"), [
    (UBUNTU24_SERVER, "netplan"),
    (_read(netplan=True, renderer=_cmd("network:\n  version: 2\n  renderer: networkd\n")), "netplan"),
    (UBUNTU24_DESKTOP, "networkmanager"),
    (DEBIAN12_LAB, "ifupdown"),
    (_read(netplan=True, renderer=_cmd(""), ifup=True), "netplan"),  # netplan + networkd wins over ifup
    (_read(netplan=True, renderer=NM_RENDERER, ifup=True), "ifupdown"),  # NM renderer, NM not running
    (_read(netplan=True, netplan_dir=False, renderer=_cmd("")), "none"),  # no /etc/netplan
    (_read(netplan=True, renderer=_cmd(rc=1, stderr="Error in network definition: bad")), "none"),
    (_read(netplan=True, renderer=_cmd("")), "netplan"),  # an empty /etc/netplan: netplan get prints nothing
    (_read(netplan=True, renderer=_cmd("- not\n- netplan\n")), "none"),
    (_read(), "none"),
], ids=["ubuntu24-server", "renderer-networkd", "ubuntu24-desktop", "debian12-lab", "netplan-and-ifupdown",
        "netplan-nm-renderer-not-running", "no-etc-netplan", "netplan-get-fails", "empty-etc-netplan",
        "netplan-get-garbage", "nothing"])
def test_the_backend_is_chosen_from_the_host(read, backend):
    assert ipoib.choose_backend(read) == backend


def test_no_backend_is_refused_in_one_sentence_naming_what_was_found():
    msg = ipoib.backend_refusal("gpu03", _read(), [])
    assert msg == (
        "gpu03: no network backend for IPoIB: NetworkManager is not running, no netplan (/usr/sbin/netplan), "
        "and ifupdown (/sbin/ifup) is not installed; the ipoib role writes NetworkManager keyfiles, "
        "a netplan "
        "file (networkd renderer) or ifupdown stanzas"
    )
    nm_renderer = ipoib.backend_refusal("gpu03", _read(netplan=True, renderer=NM_RENDERER), [])
    assert "netplan renders to NetworkManager, which is not running" in nm_renderer
    broken = ipoib.backend_refusal("gpu03", _read(netplan=True, renderer=_cmd(rc=1, stderr="x\nbad key")), [])
    assert "`netplan get` failed (bad key)" in broken
    for ok in (UBUNTU24_SERVER, UBUNTU24_DESKTOP, DEBIAN12_LAB):
        assert ipoib.backend_refusal("gpu03", ok, _ifaces(TWO)) == ""


def test_pkey_children_are_refused_on_netplan_only():
    with_child = _ifaces({"networks": {"storage": {"device": "mlx5_1", "prefix": "198.19.0.0/24",
                                                   "pkey": "0x0010"}}})
    msg = ipoib.backend_refusal("gpu03", UBUNTU24_SERVER, with_child)
    assert msg.startswith("gpu03: netplan has no P_Key child interface type, so the netplan backend cannot "
                          "create ibp60s0.8010; create P_Key children with NetworkManager")
    assert "\n" not in msg
    assert ipoib.backend_refusal("gpu03", UBUNTU24_DESKTOP, with_child) == ""
    assert ipoib.backend_refusal("gpu03", DEBIAN12_LAB, with_child) == ""
    with pytest.raises(ipoib.IpoibPlanError, match="netplan has no P_Key child"):
        ipoib.netplan_yaml(with_child)


# -- the rendered file --------------------------------------------------------------------------------

def test_datagram_and_connected_interfaces_with_their_mtu_and_address():
    text = ipoib.netplan_yaml(_ifaces(TWO))
    assert text.startswith(ipoib.NETPLAN_HEADER)
    assert yaml.safe_load(text) == {"network": {"version": 2, "ethernets": {
        "ibp26s0": {"renderer": "networkd", "addresses": ["198.18.0.13/16"], "dhcp4": False, "dhcp6": False,
                    "mtu": 4092, "infiniband-mode": "datagram", "optional": True},
        "ibp60s0": {"renderer": "networkd", "addresses": ["198.19.0.13/24"], "dhcp4": False, "dhcp6": False,
                    "mtu": 65520, "infiniband-mode": "connected", "optional": True},
    }}}


def test_mtu_defaults_and_no_address_and_the_same_text_twice():
    ifaces = ipoib.host_interfaces("gpu03", interfaces=[{"device": "ibp26s0", "mtu": 2044}], facts=FACTS)
    doc = ipoib.netplan_document(ifaces)
    assert doc["network"]["ethernets"]["ibp26s0"] == {
        "renderer": "networkd", "dhcp4": False, "dhcp6": False, "mtu": 2044, "infiniband-mode": "datagram",
        "optional": True}
    assert ipoib.netplan_yaml(_ifaces(TWO)) == ipoib.netplan_yaml(list(reversed(_ifaces(TWO))))
    assert ipoib.netplan_document([]) == {"network": {"version": 2, "ethernets": {}}}


def _generate(tmp_path: Path, text: str) -> tuple[subprocess.CompletedProcess, Path]:
    root = tmp_path / "root"
    (root / "etc" / "netplan").mkdir(parents=True)
    target = root / "etc" / "netplan" / "60-fabricops-ipoib.yaml"
    target.write_text(text)
    target.chmod(0o600)
    proc = subprocess.run([NETPLAN, "generate", "--root-dir", str(root)], capture_output=True, text=True,
                          timeout=60)
    return proc, root / "run" / "systemd" / "network"


PLANS = {
    "datagram": {"networks": {"ibp26s0": "198.18.0.0/16"}},
    "connected-65520": {"networks": {"ibp26s0": {"prefix": "198.18.0.0/16", "mode": "connected"}}},
    "connected-9000": {"networks": {"ibp26s0": {"prefix": "198.18.0.0/16", "mode": "connected",
                                                "mtu": 9000}}},
    "datagram-2044": {"networks": {"ibp26s0": {"prefix": "198.18.0.0/16", "mtu": 2044}}},
    "two-interfaces": TWO,
}


@needs_netplan
@pytest.mark.parametrize("name", sorted(PLANS))
def test_every_rendered_file_passes_netplan_generate(tmp_path, name):
    ifaces = _ifaces(PLANS[name])
    proc, out = _generate(tmp_path, ipoib.netplan_yaml(ifaces))
    assert proc.returncode == 0, proc.stderr
    for iface in ifaces:
        network = (out / f"10-netplan-{iface['name']}.network").read_text()
        assert f"Name={iface['name']}" in network
        assert f"MTUBytes={iface['mtu']}" in network
        assert f"Address={iface['address']}" in network
        assert f"[IPoIB]\nMode={iface['mode']}" in network  # netplan >= 0.105 renders infiniband-mode


@needs_netplan
def test_an_interface_without_address_passes_too(tmp_path):
    ifaces = ipoib.host_interfaces("gpu03", interfaces=[{"device": "ibp60s0", "mode": "connected"}],
                                   facts=FACTS)
    proc, out = _generate(tmp_path, ipoib.netplan_yaml(ifaces))
    assert proc.returncode == 0, proc.stderr
    assert "Address=" not in (out / "10-netplan-ibp60s0.network").read_text()


@needs_netplan
@pytest.mark.parametrize(("breakage", "says"), [
    (("infiniband-mode: connected", "infiniband-mode: reliable"), "infiniband-mode"),
    (("198.18.0.13/16", "198.18.0.300/16"), "198.18.0.300"),
    (("mtu: 4092", "mtu: [4092]"), "mtu"),
], ids=["bad-mode", "bad-address", "bad-mtu"])
def test_a_wrong_file_fails_netplan_generate_with_its_reason(tmp_path, breakage, says):
    text = ipoib.netplan_yaml(_ifaces(TWO)).replace("infiniband-mode: datagram",
                                                    "infiniband-mode: connected", 1)
    old, new = breakage
    assert old in text
    proc, _out = _generate(tmp_path, text.replace(old, new, 1))
    assert proc.returncode != 0
    assert says in proc.stderr, proc.stderr


# -- role level: the role's own expressions and a play on localhost -------------------------------

def _filters() -> dict:
    """plugins/filter/fabricops.py's filters under their collection names (it imports the package lazily)."""
    spec = importlib.util.spec_from_file_location("fabricops_filter_shim",
                                                  ROOT / "plugins" / "filter" / "fabricops.py")
    shim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shim)
    return {f"fabricops.fabric.{k}": v for k, v in shim.FilterModule().filters().items()}


def _task(file: str, name_start: str) -> dict:
    tasks = yaml.safe_load((ROLE / "tasks" / file).read_text())
    return next(t for t in tasks if t["name"].startswith(name_start))


def _render(expr: str, **ctx):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update(_filters())
    env.filters["to_json"] = json.dumps
    return env.from_string(expr).render(**ctx)


def test_the_roles_expressions_choose_netplan_for_ubuntu_24_04_and_refuse_a_host_with_nothing():
    pytest.importorskip("ansible")
    choose = _task("preflight.yml", "Choose the configuration backend")
    expr = choose["vars"]["__ipoib_choice"].replace("}}", " | to_json }}")
    ctx = {"inventory_hostname": "gpu03", "__ipoib_interfaces": _ifaces(TWO)}
    got = json.loads(_render(expr, __ipoib_read=UBUNTU24_SERVER, **ctx))
    assert got == {"name": "netplan", "refusal": ""}
    assert choose["ansible.builtin.set_fact"]["__ipoib_backend"] == "{{ __ipoib_choice.name }}"
    none = json.loads(_render(expr, __ipoib_read=_read(), **ctx))
    assert none["name"] == "none" and none["refusal"].startswith("gpu03: no network backend for IPoIB")
    gate = _task("preflight.yml", "Refuse a host with no backend")
    assert gate["ansible.builtin.assert"]["that"][0] == "__ipoib_backend_refusal | length == 0"
    msg = _render(gate["ansible.builtin.assert"]["fail_msg"], __ipoib_backend_refusal=none["refusal"],
                  __ipoib_no_source_msg="unused")
    assert msg == none["refusal"]
    main = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    assert any(t.get("ansible.builtin.include_tasks", {}).get("file") == "configure_{{ __ipoib_backend }}.yml"
               for t in main)
    assert (ROLE / "tasks" / "configure_netplan.yml").exists()


def _play(tmp_path: Path, netplan_file: Path, extra: list[str]) -> subprocess.CompletedProcess:
    facts = {"distribution": "Debian", "distribution_major_version": "12", "distribution_version": "12.7",
             "os_family": "Debian", "architecture": "x86_64", "fabric": FACTS}
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"fake_os_facts": {"facts": facts}, "check_mode": False},
        {"ansible.builtin.include_role": {"name": "fabricops.fabric.ipoib"},
         "vars": {"ipoib_plan": TWO, "ipoib_host_index": 13, "ipoib_netplan_file": str(netplan_file)}},
    ]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_CACHE_PLUGIN="memory", PYTHONPATH=str(ROOT / "src"),
               ANSIBLE_LIBRARY=str(Path(__file__).with_name("platforms_library")))
    return subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", *extra,
                           str(tmp_path / "play.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _status(proc, task: str) -> str:
    """The first result line's word (ok, changed, skipping, fatal) after the task's header."""
    lines = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("TASK [") and f": {task}]" in line)
    return next(line.split(":")[0] for line in lines[start + 1:] if line.split(":")[0] in
                ("ok", "changed", "skipping", "fatal"))


def _recap(proc) -> str:
    return next(line for line in proc.stdout.splitlines() if line.startswith("localhost ") and "ok=" in line)


@needs_netplan
@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="needs ansible-playbook")
@pytest.mark.skipif(Path("/sbin/ifup").exists() or Path("/run/NetworkManager").exists(),
                    reason="this machine's own backend would be chosen, not netplan")
def test_the_role_on_localhost_writes_only_under_a_temporary_root(tmp_path):
    """netplan is installed here with an empty /etc/netplan (netplan's default renderer: networkd), so the
    role picks the netplan backend; ``ipoib_netplan_file`` points under tmp_path. Check mode shows the diff
    and writes nothing; a real run validates and writes the file (0600); a second run changes nothing. No
    ``ipoib_allow_restart``: ``netplan apply`` never runs (and the fake facts say the live links match)."""
    etc_netplan = sorted(os.listdir("/etc/netplan")) if Path("/etc/netplan").is_dir() else None
    target = tmp_path / "etc" / "netplan" / "60-fabricops-ipoib.yaml"
    target.parent.mkdir(parents=True)
    check = _play(tmp_path, target, ["--check", "--diff"])
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]
    assert "changed=1" in _recap(check), check.stdout[-3000:]
    assert "+    ibp60s0:" in check.stdout and "+      infiniband-mode: connected" in check.stdout
    assert not target.exists()
    first = _play(tmp_path, target, [])
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert _status(first, "Run netplan generate on the scratch root") == "ok"
    assert "changed=1" in _recap(first), first.stdout[-3000:]
    assert target.read_text() == ipoib.netplan_yaml(_ifaces(TWO))
    assert target.stat().st_mode & 0o777 == 0o600
    again = _play(tmp_path, target, ["--diff"])
    assert again.returncode == 0, again.stdout[-3000:]
    assert "changed=0" in _recap(again), again.stdout[-3000:]
    assert _status(again, "Run netplan generate on the scratch root") == "skipping"  # nothing to validate
    assert "netplan apply" not in first.stdout.replace("netplan apply pending", "")
    assert (sorted(os.listdir("/etc/netplan")) if Path("/etc/netplan").is_dir() else None) == etc_netplan
