"""The emulated NVUE engine is as strict as NVUE: its object model, releases, prompts and sudo."""

from __future__ import annotations

import json
import time

import pytest

from fabricops_lab.switchd.nvue import RELEASES, NvueSession, NvueSwitch
from fabricops_lab.switchd.nvue_api import NvueApi


def _sw(tmp_path, release="5.14", password="pw"):
    sw = NvueSwitch("leaf", [f"swp{n}" for n in range(1, 5)], tmp_path / release, None, release, password)
    return sw, NvueSession(sw)


def _out(sess, line):
    return sess.handle(line)[0]


ACCEPTED = [
    "nv set qos roce mode lossy",
    "nv set qos roce enable off",
    "nv set qos roce cable-length 50",
    "nv set qos pfc default-global switch-priority 3,5",
    "nv set qos pfc default-global tx enable",
    "nv set qos pfc default-global port-buffer 25000",
    "nv set qos congestion-control default-global traffic-class 4,5,7 min-threshold 40000",
    "nv set qos congestion-control default-global traffic-class 3 ecn enable",
    "nv set qos congestion-control default-global traffic-class 3 probability 80",
    "nv set qos mapping default-global trust both",
    "nv set qos mapping default-global dscp 46 switch-priority 6",
    "nv set qos mapping default-global pcp 3 switch-priority 3",
    "nv set qos egress-scheduler default-global traffic-class 6 mode strict",
    "nv set qos egress-queue-mapping default-global switch-priority 3 traffic-class 3",
    "nv set qos traffic-pool roce-lossless memory-percent 50",
    "nv set interface swp1-4 qos pfc-watchdog",
    "nv set interface swp2 link mtu 9000",
    "nv set interface swp2 link state down",
    "nv set router adaptive-routing enable on",
    "nv set system hostname leaf-2",
    "nv set system config auto-save enable off",
]

REFUSED = [
    ("nv set qos bogus thing 1", "Error: Unknown command: bogus"),
    ("nv set qos roce mode fast", "'fast' is not one of"),
    ("nv set qos roce turbo on", "Unknown command: turbo"),
    ("nv set qos pfc default-global switch-priority 9", "is not an integer in 0-7"),
    ("nv set qos pfc default-global rx maybe", "is not one of ['disable', 'enable']"),
    (
        "nv set qos congestion-control default-global traffic-class 8 ecn enable",
        "qos-tc-id: '8' is not valid",
    ),
    ("nv set qos congestion-control default-global traffic-class 3 min-threshold lots", "is not a size"),
    ("nv set qos congestion-control default-global traffic-class 3 probability 101", "0-100"),
    ("nv set qos mapping default-global trust everything", "is not one of"),
    ("nv set qos mapping default-global dscp 64 switch-priority 1", "qos-dscp-id: '64' is not valid"),
    ("nv set qos egress-scheduler default-global traffic-class 3 mode fair", "is not one of"),
    ("nv set qos egress-queue-mapping default-global switch-priority 3 traffic-class 8", "0-7"),
    ("nv set interface swp9 qos pfc-watchdog", "interface: 'swp9' does not exist"),
    ("nv set interface swp1 link mtu 100", "552-9216"),
    ("nv set interface swp1 qos pfc-watchdog extra", "Unknown command: extra"),
    ("nv set router adaptive-routing enable yes", "is not one of ['off', 'on']"),
    ("nv set router bgp autonomous-system 65000", "Unknown command: bgp"),
    ("nv set system config auto-save enable sometimes", "is not one of"),
    ("nv set vrf default router bgp enable on", "not supported by this switch"),
    ("nv set qos roce mode", "Missing value"),
]


def test_every_modelled_subtree_accepts_its_documented_paths(tmp_path):
    _, sess = _sw(tmp_path)
    for cmd in ACCEPTED:
        assert _out(sess, cmd) == "", cmd
    assert _out(sess, "nv config apply -y").startswith("applied [rev_id:")


@pytest.mark.parametrize(("cmd", "text"), REFUSED)
def test_unknown_paths_and_values_are_refused_and_stage_nothing(tmp_path, cmd, text):
    sw, sess = _sw(tmp_path)
    out = _out(sess, cmd)
    assert text in out and (out.startswith("Error:") or out.startswith("Usage:")), out
    assert sw.pending == {} and _out(sess, "nv config diff") == ""


def test_releases_and_auto_save(tmp_path):
    assert set(RELEASES) >= {"5.4", "5.14"}
    with pytest.raises(ValueError, match="unknown Cumulus Linux release"):
        NvueSwitch("x", [], tmp_path / "x", None, "4.4")
    old, s_old = _sw(tmp_path, "5.4")
    new, s_new = _sw(tmp_path, "5.14")
    for s in (s_old, s_new):
        _out(s, "nv set qos roce mode lossless")
        _out(s, "nv config apply -y")
    assert old.startup() == {} and new.startup() == new.applied  # 5.9+: apply saves
    assert "Cumulus Linux 5.4.0" in _out(s_old, "nv config show") and "5.14.0" in _out(
        s_new, "nv config show"
    )
    # the switch-side knob turns it off (5.14) / on (5.4)
    _out(s_new, "nv set system config auto-save enable off")
    _out(s_new, "nv config apply -y")  # this apply itself no longer saves
    _out(s_new, "nv set qos mapping default-global trust l2")
    _out(s_new, "nv config apply -y")
    assert "trust" not in json.dumps(new.startup())
    _out(s_old, "nv set system config auto-save enable on")
    _out(s_old, "nv config apply -y")
    assert old.startup() == old.applied


def test_confirm_under_auto_save_saves_only_when_confirmed(tmp_path):
    sw, sess = _sw(tmp_path)
    _out(sess, "nv set qos roce mode lossless")
    _out(sess, "nv config apply --confirm 1s -y")
    assert sw.startup() == {}  # not yet confirmed: not saved
    time.sleep(1.1)
    sw.check_confirm()
    assert sw.applied == {} and sw.startup() == {}  # rolled back, nothing saved
    _out(sess, "nv set qos roce mode lossless")
    _out(sess, "nv config apply --confirm 30s -y")
    assert _out(sess, "nv config apply --confirm-yes").startswith("applied")
    assert sw.startup() == sw.applied != {}


def test_apply_prompts_without_yes_when_nvue_warns(tmp_path):
    sw, sess = _sw(tmp_path)
    _out(sess, "nv set interface eth0 link mtu 1500")
    out = _out(sess, "nv config apply")
    assert "Warning: management interface config is changed" in out
    assert sess.prompt() == "Are you sure? [y/N] " and sw.applied == {}
    assert _out(sess, "n") == "Declined apply\n" and sw.applied == {}
    assert sess.prompt().endswith(":~$ ")
    assert "Declined" in _out(sess, "nv config apply --assume-no") and sw.applied == {}
    _out(sess, "nv config apply")
    assert _out(sess, "y").startswith("applied [rev_id:") and sw.applied["interface"]["eth0"]
    # a QoS change has no warning: no prompt (netmiko's save_config sends a bare `nv config apply`)
    _out(sess, "nv set qos roce mode lossless")
    assert _out(sess, "nv config apply").startswith("applied [rev_id:")


def test_json_everywhere_revisions_and_abbreviations(tmp_path):
    _, sess = _sw(tmp_path, "5.4")
    assert json.loads(_out(sess, "nv config diff -o json")) == []
    _out(sess, "nv set qos roce mode lossless")
    diff = json.loads(_out(sess, "nv config diff -o json"))
    assert diff == [{"set": {"qos": {"roce": {"enable": "on", "mode": "lossless"}}}}]
    assert json.loads(_out(sess, "nv sh qos roce --pending -o json"))["mode"] == "lossless"
    assert json.loads(_out(sess, "nv show qos --applied -o json")) == {}
    assert json.loads(_out(sess, "nv show qos --rev=pending -o json"))["roce"]["mode"] == "lossless"
    assert _out(sess, "nv conf app -y").startswith("applied [rev_id: 2]")
    assert json.loads(_out(sess, "nv config diff startup applied -o json"))[0]["set"]["qos"]
    assert json.loads(_out(sess, "nv config diff 1 2 -o json"))[0]["set"]["qos"]["roce"]["mode"] == "lossless"
    hist = json.loads(_out(sess, "nv config history -o json"))
    assert [h["state"] for h in hist.values()] == ["applied_and_saved", "applied"]
    _out(sess, "nv config save")
    assert json.loads(_out(sess, "nv config history -o json"))["2"]["state"] == "applied_and_saved"
    table = _out(sess, "nv config revision")
    assert table.splitlines()[0].split()[:3] == ["Rev", "ID", "State"] and "rev_2_apply_1" in table
    assert "Unknown command: s" in _out(sess, "nv s qos")  # ambiguous: set / show
    assert "Revision 'nope' not found" in _out(sess, "nv show qos --rev=nope")
    assert "does not exist" in _out(sess, "nv show qos bogus")
    assert "Invalid output format" in _out(sess, "nv show qos -o xml")


def test_fresh_switch_shows_empty_shapes(tmp_path):
    _, sess = _sw(tmp_path)
    for cmd in (
        "nv show interface",
        "nv show qos pfc",
        "nv show qos roce",
        "nv config diff",
        "nv show router",
    ):
        assert "Error" not in _out(sess, cmd), cmd
    assert json.loads(_out(sess, "nv show interface --applied -o json")) == {}
    assert set(json.loads(_out(sess, "nv show interface -o json"))) == {"swp1", "swp2", "swp3", "swp4"}
    assert json.loads(_out(sess, "nv show qos congestion-control -o json")) == {}


def test_sudo_like_a_cumulus_host(tmp_path):
    _, sess = _sw(tmp_path)
    assert _out(sess, "sudo -s") == "" and sess.prompt() == "[sudo] password for cumulus: "
    assert sess.wants_password  # the server turns echo off for this line
    assert _out(sess, "bad") == "\nSorry, try again.\n"
    assert _out(sess, "bad") == "\nSorry, try again.\n"
    assert _out(sess, "bad") == "\nsudo: 3 incorrect password attempts\n"
    assert sess.prompt() == "cumulus@leaf:mgmt:~$ "
    _out(sess, "sudo -s")
    _out(sess, "pw")
    assert sess.prompt() == "root@leaf:mgmt:/home/cumulus# " and _out(sess, "whoami") == "root\n"
    assert _out(sess, "exit") == "exit\n" and not sess.closed  # back to the user's shell
    assert _out(sess, "whoami") == "cumulus\n"
    assert _out(sess, "sudo whoami") == "root\n"  # cached credentials: no second prompt
    _, s2 = _sw(tmp_path / "k", password=None)  # a key-only switch: no password can succeed
    _out(s2, "sudo -s")
    assert "Sorry" in _out(s2, "")


def test_rest_changeset_merges_onto_what_is_applied_then(tmp_path):
    sw, sess = _sw(tmp_path)
    api = NvueApi(sw)
    rid = next(iter(api.create_revision("cumulus")))
    api.patch(["qos", "roce"], rid, {"mode": "lossless"})
    _out(sess, "nv set qos mapping default-global trust l2")  # someone applies on the CLI meanwhile
    _out(sess, "nv config apply -y")
    api.patch_revision(rid, {"state": "apply", "auto-prompt": {"ays": "ays_yes"}})
    assert sw.applied["qos"]["mapping"]["default-global"]["trust"] == "l2"  # kept
    assert sw.applied["qos"]["roce"]["mode"] == "lossless"
    assert api.revision(rid)["state"] == "applied_and_saved"


def test_topology_picks_a_release_per_cumulus_switch():
    import yaml

    from fabricops_lab import switches, topology

    raw = yaml.safe_load(topology.DEFAULT_TOPOLOGY.read_text())
    cum = next(s for s in raw["switches"] if s["os"] == "cumulus")
    cum["release"] = "5.4"
    topo = topology.normalise(raw)
    sw = next(s for s in topo["switches"] if s["name"] == cum["name"])
    assert sw["release"] == "5.4"
    cmd = switches.switchd_command(
        sw,
        {"mgmt_ip": "10.0.0.9", "host_key": "k", "password_file": "p", "state_dir": "s", "fabric_file": "f"},
    )
    assert cmd[cmd.index("--release") + 1] == "5.4" and cmd[cmd.index("--api-port") + 1] == "8765"
    cum["release"] = "4.4"
    with pytest.raises(topology.TopologyError, match="release"):
        topology.normalise(raw)


def test_parser_reads_the_json_diff_like_the_yaml_one(tmp_path):
    from fabricops.parsers.nvue import parse_config_diff

    _, sess = _sw(tmp_path)
    assert parse_config_diff(_out(sess, "nv config diff -o json")).empty
    _out(sess, "nv set qos pfc default-global switch-priority 3")
    as_json = parse_config_diff(_out(sess, "nv config diff -o json"))
    as_yaml = parse_config_diff(_out(sess, "nv config diff"))
    assert not as_json.empty and as_json.changes == as_yaml.changes and as_json.set == as_yaml.set


def test_a_rest_revision_stores_values_as_the_cli_does(tmp_path):
    """The same change made over the API (JSON numbers) and on the CLI (typed words) is the same
    revision: a lab run over REST and one over the CLI leave the same startup configuration."""
    cli_sw, sess = _sw(tmp_path / "cli")
    _out(sess, "nv set qos egress-queue-mapping default-global switch-priority 4 traffic-class 4")
    _out(sess, "nv set qos congestion-control default-global traffic-class 4 probability 100")
    _out(sess, "nv set qos mapping default-global dscp 34 switch-priority 4")
    _out(sess, "nv config apply -y")
    api_sw, _ = _sw(tmp_path / "api")
    api = NvueApi(api_sw)
    rid = next(iter(api.create_revision("cumulus")))
    api.patch(["qos"], rid, {
        "egress-queue-mapping": {"default-global": {"switch-priority": {"4": {"traffic-class": 4}}}},
        "congestion-control": {"default-global": {"traffic-class": {"4": {"probability": 100}}}},
        "mapping": {"default-global": {"dscp": {"34": {"switch-priority": "4"}}}},
    })
    api.patch_revision(rid, {"state": "apply", "auto-prompt": {"ays": "ays_yes"}})
    assert api_sw.applied == cli_sw.applied and api_sw.startup() == cli_sw.startup() != {}
