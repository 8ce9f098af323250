"""roce_switch over the NVUE REST API (``roce_switch_transport: rest``) against the emulated switch's
real HTTPS API, and the same states over the CLI engine: identical results."""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import socket
import ssl
import time

import pytest

from fabricops.errors import FabricopsError
from fabricops.roce.platforms.nvue_rest import NvueRestConnection, RestError, command_to_patch
from fabricops.roce.runner import run
from fabricops.switch.access import SwitchAccessError, switch_connection
from fabricops.switch.lock import switch_lock
from fabricops_lab.switchd.nvue import NvueSwitch
from fabricops_lab.switchd.nvue_api import NvueApiServer

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
    from fabricops_lab.switchd.nvue_api import make_self_signed

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


# --- bounds: a server must not hold the client (and the switch's lock) -----------------------------
# Each test makes the emulated API misbehave on some paths (its handler class is this server's own)
# and sets the client's deadlines small; the servers stop misbehaving on their own after a few
# seconds, so the tests end on a client without bounds too (and fail there).

DRIP_S = 0.5  # one byte every half second: a socket timeout of 1 s alone never fires


def _misbehave(monkeypatch, rack, match, behaviour, method="GET"):
    handler = rack.api.httpd.RequestHandlerClass
    original = getattr(handler, f"do_{method}")

    def do(self):
        if match(self.path):
            self.close_connection = True
            with contextlib.suppress(OSError):  # the client gave up and closed the connection
                behaviour(self)
        else:
            original(self)

    monkeypatch.setattr(handler, f"do_{method}", do)


def _drip_head(h):
    for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"[:12]:
        h.wfile.write(bytes([byte]))
        time.sleep(DRIP_S)


def _drip_body(h):
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", "64")
    h.end_headers()
    for _ in range(12):
        h.wfile.write(b" ")
        time.sleep(DRIP_S)


def _flood_chunked(h):
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    chunk = b"10000\r\n" + b"[" * 0x10000 + b"\r\n"
    for _ in range(1024):  # 64 MiB, then the server gives up
        h.wfile.write(chunk)


def _flood_declared(h):
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(2_300_000_000))
    h.end_headers()
    for _ in range(1024):
        h.wfile.write(b" " * 0x10000)


def _connect(rack, **kw):
    ca = str(rack.api.cert_path)
    return NvueRestConnection(
        "127.0.0.1", rack.api.port, "cumulus", PASSWORD, cafile=ca, switch="leaf-rest", **kw
    )


def _one_line_without_secrets(msg):
    token = base64.b64encode(f"cumulus:{PASSWORD}".encode()).decode()
    assert "\n" not in msg.strip(), msg
    for secret in (PASSWORD, token, f"cumulus:{PASSWORD}"):
        assert secret not in msg, msg


@pytest.mark.parametrize("behaviour", [_drip_head, _drip_body], ids=["status-line", "body"])
def test_a_dripping_server_is_cut_off_at_the_request_deadline(rest_rack, monkeypatch, behaviour):
    _misbehave(monkeypatch, rest_rack, lambda p: p == "/nvue_v1/system", behaviour)
    t0 = time.monotonic()
    with pytest.raises(RestError) as exc:
        _connect(rest_rack, timeout=1.0)
    assert time.monotonic() - t0 < 2.5
    msg = str(exc.value)
    _one_line_without_secrets(msg)
    assert "gave no complete answer within 1 s" in msg, msg


@pytest.mark.parametrize("behaviour", [_flood_chunked, _flood_declared], ids=["chunked", "content-length"])
def test_a_flooding_server_is_cut_off_at_the_body_cap(rest_rack, monkeypatch, behaviour):
    _misbehave(monkeypatch, rest_rack, lambda p: p == "/nvue_v1/system", behaviour)
    t0 = time.monotonic()
    with pytest.raises(RestError) as exc:
        _connect(rest_rack, timeout=5.0)
    assert time.monotonic() - t0 < 5.0
    msg = str(exc.value)
    _one_line_without_secrets(msg)
    assert f"larger than {4 * 1024 * 1024} bytes" in msg, msg


def test_a_redirect_is_refused_not_followed(rest_rack, monkeypatch):
    def redirect(h):
        h.send_response(301)
        h.send_header("Location", f"https://cumulus:{PASSWORD}@198.51.100.1/nvue_v1/system")
        h.send_header("Content-Length", "0")
        h.end_headers()

    _misbehave(monkeypatch, rest_rack, lambda p: p == "/nvue_v1/system", redirect)
    with pytest.raises(RestError) as exc:
        _connect(rest_rack, timeout=2.0)
    msg = str(exc.value)
    _one_line_without_secrets(msg)
    assert "answered HTTP 301 Moved Permanently, a redirect; fabricops does not follow redirects" in msg
    assert "198.51.100.1" not in msg


def test_error_answers_never_echo_credentials(rest_rack, monkeypatch):
    """One server echoed the request's basic-auth header in its error body."""

    def echo(h):
        auth = h.headers.get("Authorization")
        detail = (
            f"backend refused\nthe request: GET {h.path} Authorization: {auth} "
            f"(user cumulus:{PASSWORD}, password={PASSWORD})"
        )
        data = json.dumps({"title": "Internal Server Error", "status": 500, "detail": detail}).encode()
        h.send_response(500)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def html(h):
        data = f"<html><pre>Authorization: {h.headers.get('Authorization')}</pre></html>".encode()
        h.send_response(502)
        h.send_header("Content-Type", "text/html")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    c = rest_rack.connect()
    _misbehave(monkeypatch, rest_rack, lambda p: p.startswith("/nvue_v1/qos"), echo)
    out = c.send_command("nv show qos roce -o json")
    assert out.startswith("Error: HTTP 500: backend refused the request: GET /nvue_v1/qos/roce"), out
    _one_line_without_secrets(out)
    assert "********" in out and len(out) < 250
    _misbehave(monkeypatch, rest_rack, lambda p: p.startswith("/nvue_v1/qos"), html)
    out = c.send_command("nv show qos roce -o json")
    assert out == "Error: leaf-rest: GET /nvue_v1/qos/roce answered HTTP 502 Bad Gateway.\n", out


def test_the_apply_has_an_overall_deadline(rest_rack, monkeypatch):
    """Each poll answers within the request deadline, the revision never leaves pending: the apply
    stops at its own deadline."""

    def pending(h):
        time.sleep(0.3)
        data = json.dumps({"state": "pending", "transition": {"issue": {}, "progress": ""}}).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    c = _connect(rest_rack, timeout=1.0, apply_timeout=1.5)
    assert c.send_command("nv set qos roce mode lossless") == ""
    _misbehave(monkeypatch, rest_rack, lambda p: p.startswith("/nvue_v1/revision/changeset"), pending)
    t0 = time.monotonic()
    out = c.send_command("nv config apply -y")
    assert time.monotonic() - t0 < 2.5
    assert out.startswith("Error: the revision changeset/"), out
    assert "after 1.5 s (the apply's deadline)" in out, out


def test_a_poll_cut_short_by_the_apply_deadline_is_the_apply_verdict(rest_rack, monkeypatch):
    """A poll that is still being answered when the apply's deadline passes (here: always the
    second one) names the apply's deadline and the revision's last state, as a fast poll does;
    a request's own timeout is kept for a server that stops answering within it."""

    def slow_pending(h):
        time.sleep(0.6)
        data = json.dumps({"state": "pending", "transition": {"issue": {}, "progress": ""}}).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    c = _connect(rest_rack, timeout=5.0, apply_timeout=1.0)
    assert c.send_command("nv set qos roce mode lossless") == ""
    _misbehave(monkeypatch, rest_rack, lambda p: p.startswith("/nvue_v1/revision/changeset"), slow_pending)
    out = c.send_command("nv config apply -y")
    assert out.startswith("Error: the revision changeset/"), out
    assert "was still pending after 1 s (the apply's deadline)" in out, out
    c = _connect(rest_rack, timeout=0.3, apply_timeout=5.0)
    assert c.send_command("nv set qos roce mode lossless") == ""
    out = c.send_command("nv config apply -y")
    assert "gave no complete answer within 0.3 s (the request's deadline)" in out, out


def test_a_dripping_apply_poll_releases_the_switch_lock_within_the_deadline(rest_rack, monkeypatch):
    """roce_switch holds the switch's lock around the whole change: a server that drips its answer
    to the apply's poll must not hold the lock (the client gives up at its deadline)."""
    _misbehave(monkeypatch, rest_rack, lambda p: p.startswith("/nvue_v1/revision/changeset"), _drip_body)
    t0 = time.monotonic()
    with pytest.raises(FabricopsError) as exc:
        _run(lambda: _connect(rest_rack, timeout=1.0), "leaf-x", state="merged")
    assert time.monotonic() - t0 < 5.0
    assert "\n" not in str(exc.value).strip()
    with switch_lock("leaf-x", "the next change"):  # released: taken at once
        pass
