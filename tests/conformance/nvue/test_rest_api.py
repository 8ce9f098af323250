"""The NVUE REST API through a generic HTTP client (urllib), following NVIDIA's "NVUE API" guide.

The guide's flow (Cumulus Linux 5.x user guide, NVUE API): create a revision (``POST
/nvue_v1/revision``), stage changes (``PATCH /nvue_v1/<path>?rev=<rev>``), apply it (``PATCH
/nvue_v1/revision/<rev>`` with ``{"state": "apply", "auto-prompt": {"ays": "ays_yes"}}``), poll the
revision until it is applied, read the applied configuration (``GET ...?rev=applied``). The client
verifies the switch's certificate against the one the switch made (pinned), with basic auth."""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request
from urllib.parse import quote

import pytest
from netmiko import ConnectHandler

CALLS: list[str] = []


class Client:
    def __init__(self, lab, password=None):
        self.base = f"https://127.0.0.1:{lab.api.port}/nvue_v1"
        self.ctx = ssl.create_default_context(cafile=str(lab.api.cert_path))
        self.auth = "Basic " + base64.b64encode(f"cumulus:{password or lab.password}".encode()).decode()

    def __call__(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", self.auth)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        CALLS.append(f"{method} {path.split('?')[0]}")
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")


def _rev(c):
    status, doc = c("POST", "/revision")
    assert status == 200 and len(doc) == 1
    rev = next(iter(doc))
    assert doc[rev]["state"] == "pending"
    return rev, quote(rev, safe="")


def _apply_and_poll(c, qrev):
    status, _doc = c("PATCH", f"/revision/{qrev}", {"state": "apply", "auto-prompt": {"ays": "ays_yes"}})
    assert status == 200
    for _ in range(50):
        status, doc = c("GET", f"/revision/{qrev}")
        if doc["state"] in {"applied", "applied_and_saved"}:
            return doc["state"]
        time.sleep(0.1)
    raise AssertionError(f"never applied: {doc}")


def test_documented_flow_create_patch_apply_poll_get(nvue_lab):
    c = Client(nvue_lab)
    status, fresh = c("GET", "/interface")
    assert status == 200 and set(fresh) == {"swp1", "swp2", "swp3", "swp4"}
    assert c("GET", "/qos?rev=applied") == (200, {})
    _rev_id, qrev = _rev(c)
    assert c("PATCH", f"/qos/roce?rev={qrev}", {"mode": "lossless"})[0] == 200
    assert c("PATCH", f"/qos/pfc/default-global?rev={qrev}", {"switch-priority": {"3": {}}})[0] == 200
    assert c("PATCH", f"/interface/swp1/qos?rev={qrev}", {"pfc-watchdog": {}})[0] == 200
    # staged, not applied
    assert c("GET", "/qos?rev=applied") == (200, {})
    assert c("GET", f"/qos/roce?rev={qrev}")[1] == {"mode": "lossless"}
    state = _apply_and_poll(c, qrev)
    assert state == ("applied_and_saved" if nvue_lab.switch.release == "5.14" else "applied")
    status, applied = c("GET", "/qos?rev=applied")
    assert applied["pfc"]["default-global"]["switch-priority"] == {"3": {}}
    assert c("GET", "/interface/swp1/qos?rev=applied")[1] == {"pfc-watchdog": {}}
    assert c("GET", "/qos/roce")[1]["mode"] == "lossless"  # the operational view, as `nv show qos roce`
    assert nvue_lab.fabric_state()["ports"]["swp1"]["pfc"][3] == 1
    # an applied revision cannot change any more
    assert c("PATCH", f"/qos/roce?rev={qrev}", {"mode": "lossy"})[0] == 400


def test_same_state_as_the_cli(nvue_lab):
    c = Client(nvue_lab)
    _rev_id, qrev = _rev(c)
    c("PATCH", f"/qos/mapping/default-global?rev={qrev}", {"trust": "l3"})
    _apply_and_poll(c, qrev)
    ssh = ConnectHandler(
        device_type="cumulus_linux",
        host="127.0.0.1",
        port=nvue_lab.port,
        username="cumulus",
        password=nvue_lab.password,
        fast_cli=True,
    )
    try:
        cli = json.loads(ssh.send_command("nv show qos --rev=applied -o json"))
        assert cli == c("GET", "/qos?rev=applied")[1]
        history = json.loads(ssh.send_command("nv config history -o json"))
        assert history[max(history, key=int)]["type"] == "API"
        # and the other way: a CLI apply is what the API reads
        ssh.send_command("nv set qos roce mode lossy")
        ssh.send_command("nv config apply -y")
        assert c("GET", "/qos/roce?rev=applied")[1]["mode"] == "lossy"
    finally:
        ssh.disconnect()


def test_unset_with_null_and_delete(nvue_lab):
    c = Client(nvue_lab)
    _rev1, q1 = _rev(c)
    c(
        "PATCH",
        f"/?rev={q1}",
        {"qos": {"roce": {"mode": "lossless"}, "mapping": {"default-global": {"trust": "l3"}}}},
    )
    _apply_and_poll(c, q1)
    _rev2, q2 = _rev(c)
    assert c("PATCH", f"/qos/roce?rev={q2}", {"mode": None})[0] == 200
    assert c("DELETE", f"/qos/mapping?rev={q2}")[0] == 200
    _apply_and_poll(c, q2)
    assert c("GET", "/qos?rev=applied")[1] == {"roce": {}}


def test_schema_and_auth_refusals(nvue_lab):
    c = Client(nvue_lab)
    _rev_id, qrev = _rev(c)
    status, doc = c("PATCH", f"/qos?rev={qrev}", {"bogus": {"thing": 1}})
    assert status == 400 and "bogus" in doc["detail"] and doc["title"] == "Bad Request"
    assert c("PATCH", f"/qos/roce?rev={qrev}", {"mode": "fast"})[0] == 400
    assert c("PATCH", "/qos/roce", {"mode": "lossless"})[0] == 400  # no ?rev=
    assert c("GET", "/qos/bogus")[0] == 404
    assert c("GET", "/revision/changeset%2Fnobody%2Fx")[0] == 404
    assert c("GET", f"/qos?rev={qrev}")[1] == {}  # nothing was staged
    bad = Client(nvue_lab, password="wrong")
    assert bad("GET", "/system")[0] == 401


def test_untrusted_certificate_is_refused(nvue_lab):
    req = urllib.request.Request(f"https://127.0.0.1:{nvue_lab.api.port}/nvue_v1/system")
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(req, context=ssl.create_default_context(), timeout=5)
    CALLS.append("GET /system (refused: unpinned certificate)")
