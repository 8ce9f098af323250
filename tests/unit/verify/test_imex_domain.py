"""IMEX on GB200/GB300 NVL72 compute trays (issue 38 point 3): the per-domain verdict from every tray's
`nvidia-imex-ctl -N -j` (fabricops.verify.imex_domain.judge / phase) and the per-host IMEX channel check
(fabricops.verify.hostchecks). The views are built in the shape of tests/fixtures/nvidia-imex-ctl-json."""

from __future__ import annotations

import json

from captures import read_fixture

from fabricops.parsers import parse
from fabricops.verify import hostchecks, imex_domain
from fabricops.verify.expect import host_expect
from fabricops.verify.result import ERROR, FAIL, PASS

TRAYS = {f"tray{i:02d}": f"10.0.0.{11 + i}" for i in range(4)}
PROC_DEVICES = (
    "Character devices:\n  1 mem\n195 nvidia\n234 nvidia-caps-imex-channels\n\nBlock devices:\n  8 sd\n"
)


def view(me: str, members=TRAYS, down=(), state="UP", broken=()) -> dict:
    """`nvidia-imex-ctl -N -j` as tray ``me`` prints it: every node of nodes_config.cfg, its own
    connections; nodes in ``down`` UNAVAILABLE and not connected; ``broken`` (a, b) pairs not connected."""
    nodes = {}
    for i, (h, a) in enumerate(members.items()):
        conns = {}
        for j, (p, pa) in enumerate(members.items()):
            bad = p in down or h in down or (h, p) in broken or (p, h) in broken
            conns[str(j)] = {"host": pa, "status": "INVALID" if bad else "CONNECTED", "changed": True}
        nodes[str(i)] = {
            "status": "UNAVAILABLE" if h in down else "READY",
            "host": a,
            "connections": conns if h == me else {},
            "changed": True,
            "version": "570.172",
            "hostName": "",
        }
    return {"nodes": nodes, "timestamp": "5/22/2025 19:46:40.891", "status": state}


def reports(members=TRAYS, **kw) -> dict:
    return {h: parse("nvidia-imex-ctl-json", json.dumps(view(h, members, **kw))) for h in members}


def test_healthy_domain_passes_with_its_members_and_no_down():
    (r,) = imex_domain.judge("nvl72-a", TRAYS, reports())
    assert r.status == PASS and r.check == "imex_domain" and r.category == "gpus"
    assert r.device == "nvl72-a" and r.host == "tray00,tray01,tray02,tray03"
    assert r.component.kind == "fabric" and r.component.name == "nvl72-a"
    assert r.details["domain"] == "nvl72-a" and r.details["down"] == []
    assert "every node READY and connected" in r.message


def test_one_tray_down_is_named_from_its_peers_views():
    got = reports(down=("tray02",), state="DEGRADED")
    got["tray02"] = "`nvidia-imex-ctl -N -j` failed: Connection refused"  # its own daemon is dead
    (r,) = imex_domain.judge("nvl72-a", TRAYS, got)
    assert r.status == FAIL and r.details["down"] == ["tray02"]
    assert r.message.startswith("NVLink domain nvl72-a (4 nodes): tray02 (10.0.0.13) down: IMEX UNAVAILABLE")
    assert "Connection refused" in r.message and "domain state DEGRADED" in r.message
    assert r.details["links"] == [] and r.action and r.cause


def test_an_unreachable_tray_that_no_peer_sees_is_down():
    got = reports(down=("tray03",))
    got["tray03"] = "host unreachable (ssh: timed out)"
    (r,) = imex_domain.judge("nvl72-a", TRAYS, got)
    assert r.status == FAIL and r.details["down"] == ["tray03"] and "ssh: timed out" in r.message


def test_a_tray_not_in_this_run_is_judged_by_its_peers():
    got = reports(down=("tray01",))
    del got["tray01"]
    (r,) = imex_domain.judge("nvl72-a", TRAYS, got)
    assert r.status == FAIL and r.details["down"] == ["tray01"] and "not read in this run" in r.message
    (ok,) = imex_domain.judge("nvl72-a", TRAYS, {h: v for h, v in reports().items() if h != "tray01"})
    assert ok.status == PASS and "3 of 4 nodes" in ok.message


def test_a_broken_link_between_two_healthy_trays():
    (r,) = imex_domain.judge("nvl72-a", TRAYS, reports(broken={("tray00", "tray01")}))
    assert r.status == FAIL and r.details["down"] == []
    assert r.details["links"] == ["tray00->tray01", "tray01->tray00"]
    assert "not connected: tray00 -> tray01, tray01 -> tray00" in r.message


def test_a_node_list_that_differs_from_the_inventory():
    other = dict(TRAYS, tray03="10.0.0.99")
    got = reports()
    got["tray00"] = parse("nvidia-imex-ctl-json", json.dumps(view("tray00", other)))
    (r,) = imex_domain.judge("nvl72-a", TRAYS, got)
    assert r.status == FAIL
    assert "tray00's node list lacks tray03 (10.0.0.14) and lists 10.0.0.99" in r.message


def test_unreadable_views_are_errors_never_a_pass():
    (r,) = imex_domain.judge(
        "nvl72-a", TRAYS, dict.fromkeys(TRAYS, "input is not nvidia-imex-ctl-json output")
    )
    assert r.status == ERROR and "could not run" in r.message and r.details["down"] == sorted(TRAYS)
    (r,) = imex_domain.judge("nvl72-a", TRAYS, {})
    assert r.status == ERROR
    # one tray's view unreadable while its peers see it connected: no verdict on it, fail closed
    got = reports()
    got["tray01"] = "`nvidia-imex-ctl -N -j` failed: exit 255"
    (r,) = imex_domain.judge("nvl72-a", TRAYS, got)
    assert r.status == ERROR and "tray01: `nvidia-imex-ctl -N -j` failed: exit 255" in r.message
    assert r.details["down"] == ["tray01"]


def test_read_fails_closed():
    assert imex_domain.read(None).endswith("was not run (no data)")
    assert "exit 255" in imex_domain.read({"rc": 255, "stdout": "", "stderr": ""})
    assert "not nvidia-imex-ctl-json" in imex_domain.read({"rc": 0, "stdout": "", "stderr": ""})
    ok = imex_domain.read(
        {"rc": 0, "stdout": read_fixture("nvidia-imex-ctl-json", "dcgm_spec_sample_degraded.json")}
    )
    assert ok.status == "DEGRADED"


# --- from the inventory: HostExpect.imex, the host phase's commands, phase() and the channel ------


def hostvars(host: str, **extra) -> dict:
    return {
        "fabricops_hardware_profile": "gb200-nvl72",
        "fabricops_nvlink_domain": "nvl72-a",
        "ansible_host": TRAYS[host],
        **extra,
    }


def raw_for(host: str, channel: str = "character special file|ea|0|666") -> dict:
    return {
        imex_domain.KEY: {"rc": 0, "stdout": json.dumps(view(host)), "stderr": ""},
        "imex_channel": {"rc": 0, "stdout": channel + "\n", "stderr": ""},
        "proc_devices": {"rc": 0, "stdout": PROC_DEVICES, "stderr": ""},
    }


def test_phase_judges_each_domain_from_the_inventory():
    expects = {h: host_expect(h, hostvars(h)) for h in TRAYS}
    raws = {h: raw_for(h) for h in TRAYS}
    (r,) = imex_domain.phase(expects, raws)
    assert r.status == PASS and r.details["members"] == TRAYS
    raws["tray02"] = {}  # collected nothing: fail closed
    (r,) = imex_domain.phase(expects, raws)
    assert r.status == ERROR and "tray02: nvidia-imex-ctl -N -j was not run" in r.message
    (r,) = imex_domain.phase(expects, {h: raw_for(h) for h in TRAYS}, unreached={"tray02": "ssh: timed out"})
    assert r.status == ERROR and "host unreachable (ssh: timed out)" in r.message  # its peers see it up
    no_domain = {"tray00": host_expect("tray00", hostvars("tray00", fabricops_nvlink_domain=""))}
    (r,) = imex_domain.phase(no_domain, {})
    assert r.status == ERROR and "fabricops_nvlink_domain is not set" in r.message


def test_commands_and_channel_check_on_an_imex_tray():
    e = host_expect("tray00", hostvars("tray00", nvidia_imex_config_path="/etc/imex 2/config.cfg"))
    cmds = hostchecks.commands(e)
    assert cmds["imex_domain"] == "nvidia-imex-ctl -N -j -c '/etc/imex 2/config.cfg'"
    assert cmds["proc_devices"] == "cat /proc/devices" and "stat -c" in cmds["imex_channel"]
    got = [r for r in hostchecks.evaluate(e, raw_for("tray00"), "gpus") if r.check.startswith("imex")]
    assert [(r.check, r.status, r.device) for r in got] == [("imex_channel", PASS, "channel0")]


def test_a_missing_channel_fails_with_the_remedy():
    e = host_expect("tray00", hostvars("tray00"))
    (r,) = [
        r
        for r in hostchecks.evaluate(e, raw_for("tray00", channel="absent"), "gpus")
        if r.check == "imex_channel"
    ]
    assert r.status == FAIL
    assert "channel0 is missing" in r.message and "NVreg_CreateImexChannel0=1" in r.message
    assert "mknod /dev/nvidia-caps-imex-channels/channel0 c 234 0" in r.message
    assert "re-run the nvidia_imex role" in r.action
    wrong = raw_for("tray00", channel="character special file|ea|0|600")
    (r,) = [r for r in hostchecks.evaluate(e, wrong, "gpus") if r.check == "imex_channel"]
    assert r.status == FAIL and "mode 0600" in r.message
    no_driver = raw_for("tray00")
    no_driver["proc_devices"]["stdout"] = "Character devices:\n195 nvidia\n"
    (r,) = [r for r in hostchecks.evaluate(e, no_driver, "gpus") if r.check == "imex_channel"]
    assert r.status == FAIL and "registers no nvidia-caps-imex-channels" in r.message


def test_an_unreadable_channel_is_an_error():
    e = host_expect("tray00", hostvars("tray00"))
    for broken in ({"rc": 127, "stdout": "", "stderr": "sh: stat: not found"}, {"rc": 0, "stdout": ""}, None):
        raw = raw_for("tray00")
        if broken is None:
            del raw["imex_channel"]
        else:
            raw["imex_channel"] = broken
        (r,) = [r for r in hostchecks.evaluate(e, raw, "gpus") if r.check == "imex_channel"]
        assert r.status == ERROR and "could not run" in r.message


def test_dra_managed_trays_get_the_channel_check_and_the_same_domain_read():
    e = host_expect("tray00", hostvars("tray00", nvidia_imex_managed_by="dra"))
    assert e.imex["managed_by"] == "dra"
    cmds = hostchecks.commands(e)
    assert {"imex_domain", "imex_channel", "proc_devices"} <= set(cmds)
    (r,) = [r for r in hostchecks.evaluate(e, raw_for("tray00"), "gpus") if r.check == "imex_channel"]
    assert r.status == PASS and r.details["managed_by"] == "dra"


def test_no_imex_checks_off_an_imex_platform():
    e = host_expect("gpu01", {"fabricops_hardware_profile": "hgx-h100-ndr", "fabricops_nvlink_domain": "x"})
    assert e.imex is None
    assert not {"imex_domain", "imex_channel", "proc_devices"} & set(hostchecks.commands(e))
    res = hostchecks.evaluate(e, raw_for("tray00"), "gpus")
    assert not [r for r in res if r.check.startswith("imex")]
    assert imex_domain.phase({"gpu01": e}, {"gpu01": raw_for("tray00")}) == []


def test_the_checks_can_be_skipped_per_host():
    e = host_expect("tray00", hostvars("tray00", fabricops_verify_skip=["imex_domain", "imex_channel"]))
    assert not {"imex_domain", "imex_channel"} & set(hostchecks.commands(e))
    assert imex_domain.phase({"tray00": e}, {"tray00": raw_for("tray00")}) == []


def test_a_ready_tray_that_no_peer_reaches_is_down_not_three_broken_links():
    """Its own daemon READY, the network to it cut: every peer sees it INVALID, it sees no one."""
    cut = {("tray03", h) for h in TRAYS if h != "tray03"}
    (r,) = imex_domain.judge("nvl72-a", TRAYS, reports(broken=cut))
    assert r.status == FAIL and r.details["down"] == ["tray03"] and r.details["links"] == []
    assert "tray03 (10.0.0.14) down: not connected as seen by tray00: INVALID" in r.message
