"""``ip -j addr show`` (iproute2): the live addresses the ipoib role compares with its plan."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.ipoib import host_interfaces, pending_changes, primary_ipv4
from fabricops.parsers import ip_addr, parse

IPOIB_HOST = read_fixture("ip-addr", "factrs-ipoib-host.json")
SECONDARY = read_fixture("ip-addr", "debian12-iproute2-6.1-secondary.json")
# `ip -j link show` on an HGX host (facebookresearch/gcm gcm/tests/health_checks_tests/
# test_check_ibstat.py, the first link of pass_ib_interfaces): a link with no addr_info at all
IP_LINK = ('[{"ifindex":7,"ifname":"ibp12s0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":2044,'
           '"qdisc":"mq","operstate":"UP","linkmode":"DEFAULT","group":"default","txqlen":256,'
           '"link_type":"infiniband","address":"00:00:10:29:fe:80:00:00:00:00:00:00:0c:42:a1:03:00:0b:cc:d6"}]')


def test_real_ipoib_host():
    rec = ip_addr.parse(IPOIB_HOST)
    ib0 = rec.link("ib0")
    assert (ib0.link_type, ib0.mtu, ib0.operstate) == ("infiniband", 2044, "UP")
    assert ib0.ipv4_primary.cidr == "172.20.8.245/21"
    eno = rec.link("eno1np0")
    assert [a.family for a in eno.addresses] == ["inet", "inet6"]
    assert eno.ipv4_primary.cidr == "128.223.192.245/21"  # not the inet6 link-local one
    assert primary_ipv4(IPOIB_HOST) == {"ib0": "172.20.8.245/21", "eno1np0": "128.223.192.245/21"}


def test_secondary_is_not_the_primary_and_a_link_without_address_is_listed():
    rec = parse("ip-addr", SECONDARY)
    port = rec.link("ibp26s0")
    assert [(a.local, a.secondary) for a in port.addresses] == [("192.0.2.11", False), ("192.0.2.99", True)]
    assert rec.link("ibp60s0").addresses == []
    assert primary_ipv4(SECONDARY) == {"lo": "127.0.0.1/8", "ibp60s0": None, "ibp26s0": "192.0.2.11/24"}


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("", "empty input"),
        ("1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN\n"
         "    inet 127.0.0.1/8 scope host lo\n", "text form"),
        (IP_LINK, "no addr_info"),
        ("[]", "no links"),
        ('{"ifname": "lo"}', "another tool"),
        ('[{"ifname":"ib0","addr_info":[]},{"ifname":"ib0","addr_info":[]}]', "printed twice"),
        ('[{"ifname":"ib0","addr_info":[{"family":"inet","local":"10.0.0.1","prefixlen":33}]}]', "prefixlen"),
        ('[{"ifname":"ib0","addr_info":[{"family":"inet","prefixlen":24}]}]', "not a name"),
        ('[{"ifname":"ib0\\n/etc/passwd","addr_info":[]}]', "not a name"),
        ('[{"ifname":"ib0","addr_info":{}}]', "not a list"),
        (SECONDARY[: len(SECONDARY) // 2], "invalid JSON"),
    ],
)
def test_refused(text, detail):
    with pytest.raises(ParseError, match=detail):
        ip_addr.parse(text)


def test_empty_link_objects_are_skipped():
    rec = ip_addr.parse('[{},{"ifname":"lo","addr_info":[]}]')
    assert [lk.ifname for lk in rec.links] == ["lo"]


def _interfaces():
    from unit.test_ipoib_plan import FACTS, PLAN

    return host_interfaces("gpu03", plan=PLAN, host_index=13, facts=FACTS), FACTS["netdevs"]


def _ip(entries):
    import json

    return json.dumps([{"ifname": name, "addr_info": [
        {"family": "inet", "local": a.split("/")[0], "prefixlen": int(a.split("/")[1]), **extra}
        for a, extra in addrs]} for name, addrs in entries.items()])


def test_pending_from_the_live_addresses():
    ifaces, netdevs = _interfaces()
    netdevs = dict(netdevs, **{"ibp60s0.8010": {"mode": "connected", "mtu": 65520}})
    live = {"lo": [("127.0.0.1/8", {})], "ibp26s0": [("198.18.0.13/16", {})],
            "ibp60s0.8010": [("198.19.0.13/24", {})]}
    assert pending_changes(ifaces, netdevs, addresses=primary_ipv4(_ip(live))) == []
    # the planned address only as a secondary: the primary one is what counts
    live["ibp26s0"] = [("198.18.0.14/16", {}), ("198.18.0.13/16", {"secondary": True})]
    live["ibp60s0.8010"] = []
    assert pending_changes(ifaces, netdevs, addresses=primary_ipv4(_ip(live))) == [
        {"name": "ibp26s0", "reasons": ["address 198.18.0.14/16 -> 198.18.0.13/16"]},
        {"name": "ibp60s0.8010", "reasons": ["address none -> 198.19.0.13/24"]},
    ]
    # the addresses, when given, replace gathered facts (which may be a fact cache's)
    stale = {"ibp26s0": {"ipv4": {"address": "198.18.0.13", "prefix": "16"}}}
    assert pending_changes(ifaces, netdevs, stale, primary_ipv4(_ip(live)))[0]["name"] == "ibp26s0"


def _filter():
    path = Path(__file__).resolve().parents[3] / "plugins" / "filter" / "fabricops.py"
    spec = importlib.util.spec_from_file_location("fabricops_filter_ip_addr_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.FilterModule().filters()["ipoib_pending"]


def test_filter_takes_host_read_result_and_fails_closed():
    pending = _filter()
    ifaces, netdevs = _interfaces()
    live = _ip({"ibp26s0": [("198.18.0.14/16", {})]})
    got = pending(ifaces, netdevs, ip_addr={"rc": 0, "stdout": live, "stderr": ""})
    assert {"name": "ibp26s0", "reasons": ["address 198.18.0.14/16 -> 198.18.0.13/16"]} in got
    with pytest.raises(AnsibleFilterError, match=r"exited 127 \(sh: 1: ip: not found\)"):
        pending(ifaces, netdevs, ip_addr={"rc": 127, "stdout": "", "stderr": "sh: 1: ip: not found"})
    with pytest.raises(AnsibleFilterError, match=r"cannot read the live addresses: .*text form"):
        pending(ifaces, netdevs, ip_addr={"rc": 0, "stdout": "1: lo: <LOOPBACK> mtu 65536", "stderr": ""})
    with pytest.raises(AnsibleFilterError, match="empty input"):
        pending(ifaces, netdevs, ip_addr={"rc": 0, "stdout": "", "stderr": ""})
