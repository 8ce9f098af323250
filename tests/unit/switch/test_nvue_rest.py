"""roce_switch over the NVUE REST API (``roce_switch_transport: rest``) against the emulated switch's
real HTTPS API, and the same states over the CLI engine: identical results."""

from __future__ import annotations

import copy
import socket
import ssl

import pytest

from fabricops.lab.switchd.nvue import NvueSwitch
from fabricops.lab.switchd.nvue_api import NvueApiServer
from fabricops.switch.access import SwitchAccessError, switch_connection
from fabricops.switch.nvue_rest import NvueRestConnection, RestError, command_to_patch
from fabricops.switch.runner import run

ROCE = {"lossless_priority": 3, "dscp": 26}
ROCE4 = {"lossless_priority": 4, "dscp": 34, "ecn": {"min_kb": 200, "max_kb": 2000}}
PORTS = [f"swp{i}" for i in range(1, 5)]
PASSWORD = "rest-secret"


class RestRack:
    """An emulated NVUE switch serving its REST API on 127.0.0.1 (a random port)."""

    def __init__(self, tmp_path, release="5.14"):
        self.switch = NvueSwitch(
            "leaf-rest", [f"swp{n}" for n in range(1, 9)], tmp_path / "sw", None, release
        )
        self.api = NvueApiServer(self.switch, "127.0.0.1", 0, "cumulus", PASSWORD, tmp_path / "api")
        self.conns: list[NvueRestConnection] = []

    def connect(self, password=PASSWORD):
        c = NvueRestConnection(
            "127.0.0.1",
            self.api.port,
            "cumulus",
            password,
            cafile=str(self.api.cert_path),
            switch="leaf-rest",
        )
        self.conns.append(c)
        return c

    def requests(self):
        return [r for c in self.conns for r in c.requests]

    def close(self):
        self.api.close()


@pytest.fixture
def rest_rack(tmp_path):
    r = RestRack(tmp_path)
    yield r
    r.close()


def _run(connector, name, **kw):
    kw.setdefault("roce", ROCE)
    kw.setdefault("ports", PORTS)
    return run(switch=name, os_name="cumulus", connector=connector, **kw)


def _comparable(res):
    """What must be identical between transports (not the per-transport 'sent' text of the apply)."""
    keep = ("changed", "commands", "before", "after", "diff", "outcome")
    out = {k: copy.deepcopy(res.get(k)) for k in keep}
    for key in ("before_header", "after_header"):
        (out["diff"] or {}).pop(key, None)
    return out


@pytest.mark.parametrize(
    ("state", "roce"),
    [("merged", ROCE), ("overridden", ROCE4), ("replaced", ROCE), ("deleted", ROCE)],
)
def test_rest_and_cli_converge_identically(tmp_path, nvue_rack, state, roce):
    rest = RestRack(tmp_path / "r")
    try:
        if state == "deleted":  # something to delete first, on both
            _run(rest.connect, "leaf-x", state="merged")
            _run(nvue_rack.connect, "leaf-y", state="merged")
        cli_res = _run(nvue_rack.connect, "leaf-y", state=state, roce=roce)
        rest_res = _run(rest.connect, "leaf-x", state=state, roce=roce)
        assert _comparable(rest_res) == _comparable(cli_res)
        assert rest_res["changed"] is True
        # the switches hold the same RoCE configuration, read back over either transport
        assert rest.switch.roce_view(rest.switch.applied) == nvue_rack.switch.roce_view(
            nvue_rack.switch.applied
        )
        gathered_rest = _run(rest.connect, "leaf-x", state="gathered")["gathered"]
        gathered_cli = _run(nvue_rack.connect, "leaf-y", state="gathered")["gathered"]
        assert gathered_rest == gathered_cli
        # the check-mode twin and the real twin send nothing, on both
        for connector, name in ((rest.connect, "leaf-x"), (nvue_rack.connect, "leaf-y")):
            dry = _run(connector, name, state=state, roce=roce, check_mode=True)
            assert dry["changed"] is False and dry["commands"] == []
            twin = _run(connector, name, state=state, roce=roce)
            assert twin["changed"] is False and twin["commands"] == []
    finally:
        rest.close()


def test_rest_dry_run_and_diff_match_cli_and_change_nothing(rest_rack, nvue_rack):
    before = copy.deepcopy(rest_rack.switch.applied)
    dry = _run(rest_rack.connect, "leaf-x", state="merged", check_mode=True)
    cli = _run(nvue_rack.connect, "leaf-y", state="merged", check_mode=True)
    assert _comparable(dry) == _comparable(cli) and dry["changed"] is True
    assert rest_rack.switch.applied == before and not rest_rack.switch.changesets  # nothing staged
    assert all(r.startswith("GET ") for r in rest_rack.requests())


def test_rest_flow_uses_the_documented_api(rest_rack):
    res = _run(rest_rack.connect, "leaf-x", state="merged")
    assert res["changed"] and res["outcome"] != "unchanged"
    reqs = rest_rack.requests()
    assert "POST /nvue_v1/revision" in reqs
    assert any(
        r.startswith("PATCH /nvue_v1/qos/pfc/default-global/switch-priority?rev=changeset%2Fcumulus%2F")
        for r in reqs
    )
    applies = [r for r in reqs if r.startswith("PATCH /nvue_v1/revision/changeset")]
    assert len(applies) == 1
    assert "PATCH /nvue_v1/revision/applied" in reqs  # nv config save
    # 5.14 auto-saves on apply: startup holds the applied revision
    assert rest_rack.switch.startup() == rest_rack.switch.applied
    states = [r["state"] for r in rest_rack.switch.revisions.values()]
    assert states[-1] == "applied_and_saved"


def test_rest_save_false_on_auto_save_release_says_so(rest_rack, tmp_path):
    res = _run(rest_rack.connect, "leaf-x", state="merged", save=False)
    assert res["changed"]
    assert rest_rack.switch.startup() == rest_rack.switch.applied  # the switch saved it anyway
    assert any("auto-save" in n for n in res["notes"]), res["notes"]
    old = RestRack(tmp_path / "old", release="5.4")
    try:
        res = _run(old.connect, "leaf-o", state="merged", save=False)
        assert res["changed"] and old.switch.startup() == {}  # 5.4: nothing saved
        assert not any("auto-save" in n for n in res["notes"])
    finally:
        old.close()


def test_rest_refuses_a_bad_login_and_an_unpinned_certificate(rest_rack, tmp_path):
    with pytest.raises(RestError, match="refused the login"):
        rest_rack.connect(password="wrong")
    other = tmp_path / "other"
    other.mkdir()
    from fabricops.lab.switchd.nvue_api import make_self_signed

    make_self_signed(other / "c.crt", other / "c.key", "127.0.0.1")
    with pytest.raises(RestError, match="does not verify"):
        NvueRestConnection("127.0.0.1", rest_rack.api.port, "cumulus", PASSWORD, cafile=str(other / "c.crt"))


def test_command_to_patch_covers_the_knobs_and_refuses_the_rest():
    assert command_to_patch("nv set qos roce mode lossless") == [(["qos", "roce", "mode"], "lossless")]
    assert command_to_patch("nv unset qos roce") == [(["qos", "roce"], None)]
    assert command_to_patch("nv set interface swp1-2 qos pfc-watchdog") == [
        (["interface", "swp1", "qos", "pfc-watchdog"], {}),
        (["interface", "swp2", "qos", "pfc-watchdog"], {}),
    ]
    assert command_to_patch("nv set qos pfc default-global switch-priority 3") == [
        (["qos", "pfc", "default-global", "switch-priority", "3"], {})
    ]
    assert command_to_patch("nv set qos egress-scheduler default-global traffic-class 3 bw-percent 50") == [
        (["qos", "egress-scheduler", "default-global", "traffic-class", "3", "bw-percent"], 50)
    ]
    with pytest.raises(RestError):
        command_to_patch("nv set system hostname x")


def test_rest_bad_command_is_an_nvue_error_line(rest_rack):
    c = rest_rack.connect()
    assert c.send_command("nv set system hostname x").startswith("Error: ")
    assert c.send_command("nv frobnicate").startswith("Error: ")
    assert rest_rack.switch.changesets == {}


def test_access_resolves_the_transport(tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    base = {
        "ansible_network_os": "cumulus",
        "ansible_user": "cumulus",
        "ansible_password": "pw",
        "roce_switch_known_hosts": str(kh),
        "ansible_host": "10.0.0.1",
    }
    assert switch_connection(base, switch="leaf").transport == "cli"
    acc = switch_connection(
        {**base, "roce_switch_transport": "rest", "roce_switch_api_ca": str(ca)}, switch="leaf"
    )
    assert (acc.transport, acc.api_port, acc.api_ca) == ("rest", 8765, str(ca))
    with pytest.raises(SwitchAccessError, match="roce_switch_api_ca"):
        switch_connection({**base, "roce_switch_transport": "rest"}, switch="leaf")
    with pytest.raises(SwitchAccessError, match="not cli or rest"):
        switch_connection({**base, "roce_switch_transport": "ssh"}, switch="leaf")
    with pytest.raises(SwitchAccessError, match="Cumulus"):
        switch_connection(
            {
                **base,
                "ansible_network_os": "onyx",
                "roce_switch_transport": "rest",
                "roce_switch_api_ca": str(ca),
            },
            switch="leaf",
        )


def test_api_port_is_https_only(rest_rack):
    with socket.create_connection(("127.0.0.1", rest_rack.api.port), timeout=5) as s:
        s.sendall(b"GET /nvue_v1/ HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            data = s.recv(100)
        except ConnectionResetError:  # the TLS server drops a plain-HTTP client
            data = b""
    assert not data.startswith(b"HTTP/1.1 200")
    ctx = ssl.create_default_context(cafile=str(rest_rack.api.cert_path))
    with (
        socket.create_connection(("127.0.0.1", rest_rack.api.port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s,
    ):
        assert s.version() in {"TLSv1.2", "TLSv1.3"}
