"""Lab host variants (issue 37 point 5): the recipe's layers, the topology's ``variant`` and the network
configuration each variant's provisioning writes in its own stack. The provisioning's netplan file is
validated by the real ``netplan generate`` (Debian's netplan.io, scripts/setup.sh installs it), as the
netplan host's boot would read it."""

from __future__ import annotations

import configparser
import copy
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fabricops_lab import hosts, image, topology

NETPLAN = shutil.which("netplan") or ("/usr/sbin/netplan" if Path("/usr/sbin/netplan").exists() else None)


def _host(variant: str | None) -> dict:
    topo = topology.load()
    host = copy.deepcopy(topo["hosts"][0])
    if variant is not None:
        host["variant"] = variant
    return host


def test_the_recipe_names_the_variants_and_each_installs_its_stack_without_ifupdown():
    recipe = image.load_recipe()
    assert image.variants(recipe) == ("default", "netplan", "networkmanager", "rpm")
    assert "ifupdown" in recipe["packages"]  # the default variant is the image itself
    netplan, nm = recipe["variants"]["netplan"], recipe["variants"]["networkmanager"]
    assert {"netplan.io", "udev"} <= set(netplan["install"]) and "network-manager" not in netplan["install"]
    assert netplan["enable"] == ["systemd-networkd.service"]
    assert nm["install"] == ["network-manager"] and nm["enable"] == ["NetworkManager.service"]
    for spec in (netplan, nm):
        assert spec["purge"] == ["ifupdown"] and "etc/network/interfaces" in spec["remove"]


def test_the_default_rack_has_one_netplan_host_and_ifupdown_elsewhere():
    variants = {h["name"]: h["variant"] for h in topology.load()["hosts"]}
    assert variants == {"gpu01": "default", "gpu02": "default", "gpu03": "netplan", "gpu04": "default"}


def test_a_topology_naming_an_unknown_variant_is_refused_with_the_choices():
    raw = yaml.safe_load(topology.DEFAULT_TOPOLOGY.read_text())
    raw["hosts"][0]["variant"] = "sles"
    with pytest.raises(topology.TopologyError) as err:
        topology.normalise(raw)
    assert "hosts[0].variant" in str(err.value)
    assert "'sles' is not host variant (one of default, netplan, networkmanager, rpm)" in str(err.value)


def test_an_unknown_variant_layer_is_refused_before_anything_is_built(monkeypatch):
    monkeypatch.setattr(image, "ensure_image", lambda *a, **k: pytest.fail("built the image"))
    with pytest.raises(Exception, match=r"no host variant 'sles'.*fix the topology"):
        image.ensure_variant("sles")


def test_default_hosts_get_ifupdown_stanzas():
    files = hosts.network_files(_host(None))
    assert set(files) == {"etc/network/interfaces.d/eth0", "etc/network/interfaces.d/enp170s0f0np0",
                          "etc/network/interfaces.d/enp170s0f1np1"}
    text, mode = files["etc/network/interfaces.d/eth0"]
    assert "iface eth0 inet static\n    address 198.51.100.11/24" in text and mode == 0o644


def test_a_netplan_host_gets_one_netplan_file_with_management_and_roce_addresses_and_no_ipoib():
    files = hosts.network_files(_host("netplan"))
    assert list(files) == ["etc/netplan/00-installer-config.yaml"]
    text, mode = files["etc/netplan/00-installer-config.yaml"]
    assert mode == 0o600  # netplan 0.106 warns about a file others can read
    doc = yaml.safe_load(text)
    assert doc["network"]["version"] == 2 and "renderer" not in doc["network"]  # networkd, the default
    eths = doc["network"]["ethernets"]
    assert eths == {
        "eth0": {"dhcp4": False, "addresses": ["198.51.100.11/24"]},
        "enp170s0f0np0": {"dhcp4": False, "addresses": ["203.0.113.1/26"]},
        "enp170s0f1np1": {"dhcp4": False, "addresses": ["203.0.113.65/26"]},
    }


@pytest.mark.skipif(NETPLAN is None, reason="needs netplan.io (scripts/setup.sh installs it)")
def test_the_netplan_file_is_what_netplan_generate_renders_for_networkd(tmp_path):
    text, mode = hosts.network_files(_host("netplan"))["etc/netplan/00-installer-config.yaml"]
    f = tmp_path / "etc/netplan/00-installer-config.yaml"
    f.parent.mkdir(parents=True)
    f.write_text(text)
    f.chmod(mode)
    proc = subprocess.run([NETPLAN, "generate", "--root-dir", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    network = (tmp_path / "run/systemd/network/10-netplan-enp170s0f1np1.network").read_text()
    assert "Name=enp170s0f1np1" in network and "Address=203.0.113.65/26" in network
    assert (tmp_path / "run/systemd/network/10-netplan-eth0.network").exists()
    assert not list((tmp_path / "run/systemd/network").glob("*ibp*"))  # IPoIB: the ipoib role's


def test_a_networkmanager_host_gets_keyfiles_and_no_auto_default():
    files = hosts.network_files(_host("networkmanager"))
    conf, mode = files.pop("etc/NetworkManager/conf.d/00-fabricops-lab.conf")
    parsed = configparser.ConfigParser()
    parsed.read_string(conf)
    assert parsed["main"]["no-auto-default"] == "*" and mode == 0o644
    assert set(files) == {f"etc/NetworkManager/system-connections/{n}.nmconnection"
                          for n in ("eth0", "enp170s0f0np0", "enp170s0f1np1")}
    for path, (text, mode) in files.items():
        assert mode == 0o600  # NetworkManager ignores a keyfile others can read
        key = configparser.ConfigParser()
        key.read_string(text)
        name = Path(path).name.removesuffix(".nmconnection")
        assert dict(key["connection"]) == {"id": name, "type": "ethernet", "interface-name": name,
                                           "autoconnect": "true"}
        assert key["ipv4"]["method"] == "manual"
    key = configparser.ConfigParser()
    key.read_string(files["etc/NetworkManager/system-connections/eth0.nmconnection"][0])
    assert key["ipv4"]["address1"] == "198.51.100.11/24"
