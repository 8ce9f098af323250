"""The NVUE REST API of an emulated Cumulus switch: HTTPS, ``/nvue_v1``, HTTP basic auth.

Follows the Cumulus Linux 5.x user guide, "NVUE API"
(https://docs.nvidia.com/networking-ethernet-software/cumulus-linux-514/System-Configuration/
NVIDIA-User-Experience-NVUE/NVUE-API/):

- "The nvued service provides access to the NVUE REST API ... supports HTTPS and TLS", on port 8765
  (the nginx ``listen localhost:8765 ssl`` of ``nvue.conf``; the lab listens on the switch's address);
  a self-signed certificate, made at start (as the switch's own ``/etc/ssl`` self-signed default);
- HTTP basic auth with a switch user (``curl -u 'cumulus:password' --insecure``);
- "The GET method displays configuration and operational data, and is equivalent to the nv show
  commands": ``GET /nvue_v1/<path>`` (operational), ``?rev=applied|startup|<changeset>``;
- "The POST method ... for the nv config command to create revisions": ``POST /nvue_v1/revision``
  answers ``{"<changeset id>": {"state": "pending", ...}}``;
- "The PATCH method replaces or unsets a configuration ... for the nv set and nv config apply
  commands": ``PATCH /nvue_v1/<path>?rev=<changeset>`` with the JSON object to merge (``null``
  unsets), and ``PATCH /nvue_v1/revision/<changeset>`` with ``{"state": "apply", "auto-prompt":
  {"ays": "ays_yes"}}`` to apply; ``GET /nvue_v1/revision/<changeset>`` is polled until the state is
  ``applied`` (or ``applied_and_saved`` where the release auto-saves: the states of ``nv config
  revision``, NVUE Command Reference "Config Commands");
- the DELETE method unsets (``DELETE /nvue_v1/<path>?rev=<changeset>``).

A changeset holds the changes made to it since it was created; applying it merges those changes onto
the applied revision at that moment (the CLI's pending revision, separate, keeps its own changes).
Bodies are checked against the same object model as ``nv set`` (``nvue_schema``); a refusal is
HTTP 400 with a problem-details JSON body (``{"title": "Bad Request", "status": 400, "detail": ...}``,
the form NVUE's connexion-based server answers).
"""

from __future__ import annotations

import base64
import copy
import datetime
import hmac
import json
import secrets
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from .nvue import NvueError, NvueSwitch, _diff, merge_patch

__all__ = ["NvueApiServer", "make_self_signed"]

API_PORT = 8765
PREFIX = "/nvue_v1"


def make_self_signed(cert_path: Path, key_path: Path, host: str) -> None:
    """A self-signed certificate for HOST (an IP or a name), as the switch generates at first boot."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    try:
        alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        alt = x509.DNSName(host)
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key_path.chmod(0o600)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


class _ApiError(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


_TITLES = {400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed"}


class NvueApi:
    """The request logic (no HTTP): one switch's revisions and trees, under the switch's lock."""

    def __init__(self, switch: NvueSwitch):
        self.sw = switch

    # ---------------------------------------------------------------- revisions
    def create_revision(self, user: str) -> dict[str, Any]:
        stamp = time.strftime("%Y-%m-%d_%H.%M.%S")
        rid = f"changeset/{user}/{stamp}_{secrets.token_hex(2).upper()}"
        self.sw.changesets[rid] = {
            "base": copy.deepcopy(self.sw.applied),
            "tree": copy.deepcopy(self.sw.applied),
            "state": "pending",
            "user": user,
            "rev": None,
        }
        return {rid: self._rev_state(rid)}

    def _rev_state(self, rid: str) -> dict[str, Any]:
        cs = self.sw.changesets[rid]
        issue = cs.get("issue") or {}
        return {"state": cs["state"], "transition": {"issue": issue, "progress": cs.get("progress", "")}}

    def revision(self, rid: str) -> dict[str, Any]:
        self._changeset(rid)
        return self._rev_state(rid)

    def revisions(self) -> dict[str, Any]:
        out = {rid: self._rev_state(rid) for rid in self.sw.changesets}
        for n, r in self.sw.revisions.items():
            out[str(n)] = {"state": r["state"], "transition": {"issue": {}, "progress": ""}}
        return out

    def _changeset(self, rid: str) -> dict[str, Any]:
        cs = self.sw.changesets.get(rid)
        if cs is None:
            raise _ApiError(404, f"The revision '{rid}' does not exist")
        return cs

    def patch_revision(self, rid: str, body: Any) -> dict[str, Any]:
        if rid == "applied" and isinstance(body, dict) and body.get("state") == "save":
            # `nv config save` (NVOS manual, "Configuration Management Commands": PATCH
            # /nvue_v1/revision/applied {"state": "save"})
            self.sw.save()
            if self.sw.revisions.get(self.sw.rev, {}).get("state") == "applied":
                self.sw.revisions[self.sw.rev]["state"] = "applied_and_saved"
            return {"state": "save", "transition": {"issue": {}, "progress": ""}}
        cs = self._changeset(rid)
        if not isinstance(body, dict) or body.get("state") not in {"apply", "detach"}:
            raise _ApiError(400, "'state' must be one of ['apply', 'detach']")
        if cs["state"] != "pending":
            raise _ApiError(400, f"The revision '{rid}' is {cs['state']}; only a pending revision can change")
        if body["state"] == "detach":
            cs["state"] = "detached"
            return self._rev_state(rid)
        ays = (body.get("auto-prompt") or {}).get("ays")
        sets, unsets = _diff(cs["base"], cs["tree"])
        target = copy.deepcopy(self.sw.applied)
        _apply_unsets(target, unsets)
        merge_patch(target, [], sets)
        if "eth0" in (sets.get("interface") or {}) and ays != "ays_yes":
            cs["state"] = "ays_fail"  # a warning needs a yes and none was given
            cs["issue"] = {"0": {"message": "management interface config is changed", "severity": "warning"}}
            return self._rev_state(rid)
        cs["rev"] = self.sw.apply_tree(target, None, cs["user"], "API")
        cs["state"] = self.sw.revisions[cs["rev"]]["state"]
        cs["progress"] = ""
        return {"state": "apply", "transition": {"issue": {}, "progress": ""}}

    # ---------------------------------------------------------------- trees
    def _tree(self, rev: str | None) -> dict[str, Any]:
        if rev is None:
            return self.sw.applied
        if rev in self.sw.changesets:
            return self.sw.changesets[rev]["tree"]
        tree = self.sw.named_tree(rev) if rev != "pending" else None
        if tree is None:
            raise _ApiError(404, f"The revision '{rev}' does not exist")
        return tree

    def get(self, words: list[str], rev: str | None) -> Any:
        if words == ["qos", "roce"] and rev is None:  # the operational view `nv show qos roce` shows
            return json.loads(self.sw.show_qos_roce(self.sw.applied, True))
        try:
            got = self.sw.show_tree(words, self._tree(rev), operational=rev is None)
        except NvueError as exc:
            raise _ApiError(404, str(exc).removeprefix("Error: ")) from None
        return {} if got is None else got

    def patch(self, words: list[str], rev: str | None, body: Any) -> Any:
        cs = self._writable(rev)
        why = self.sw.check_tree(body, words)
        if why:
            raise _ApiError(400, why)
        if any(w.startswith("swp") and w not in self.sw.ports for w in _interface_ids(words, body)):
            raise _ApiError(400, "interface does not exist")
        merge_patch(cs["tree"], words, self.sw.typed_tree(body, words))
        return self.sw._get(cs["tree"], *words) if words else cs["tree"]

    def delete(self, words: list[str], rev: str | None) -> Any:
        cs = self._writable(rev)
        if not words:
            raise _ApiError(400, "the root cannot be deleted")
        merge_patch(cs["tree"], words, None)
        return {}

    def _writable(self, rev: str | None) -> dict[str, Any]:
        if not rev:
            raise _ApiError(400, "a change needs ?rev=<revision> (create one with POST /nvue_v1/revision)")
        cs = self._changeset(rev)
        if cs["state"] != "pending":
            raise _ApiError(400, f"The revision '{rev}' is {cs['state']}; only a pending revision can change")
        return cs


def _interface_ids(words: list[str], body: Any) -> list[str]:
    if words[:1] == ["interface"]:
        if len(words) > 1:
            return [words[1]]
        return list(body) if isinstance(body, dict) else []
    if not words and isinstance(body, dict) and isinstance(body.get("interface"), dict):
        return list(body["interface"])
    return []


def _apply_unsets(tree: dict[str, Any], unsets: dict[str, Any]) -> None:
    for k, v in unsets.items():
        if v is None:
            tree.pop(k, None)
        elif isinstance(tree.get(k), dict):
            _apply_unsets(tree[k], v)


class NvueApiServer:
    """HTTPS on (listen, port) in a daemon thread; ``port=0`` picks a free one (``.port`` tells)."""

    def __init__(
        self,
        switch: NvueSwitch,
        listen: str,
        port: int,
        username: str,
        password: str,
        cert_dir: str | Path,
    ):
        cert_dir = Path(cert_dir)
        cert_dir.mkdir(parents=True, exist_ok=True)
        self.cert_path = cert_dir / "nvue-api.crt"
        key_path = cert_dir / "nvue-api.key"
        if not (self.cert_path.exists() and key_path.exists()):
            make_self_signed(self.cert_path, key_path, listen)
        api = NvueApi(switch)
        expected = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
        lock = switch.lock

        class Handler(BaseHTTPRequestHandler):
            server_version = "nginx"
            sys_version = ""
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return  # no request log (the Authorization header never reaches a log)

            def _reply(self, status: int, doc: Any) -> None:
                data = json.dumps(doc, indent=2).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 401:
                    self.send_header("WWW-Authenticate", 'Basic realm="nvue"')
                self.end_headers()
                self.wfile.write(data)

            def _problem(self, status: int, detail: str) -> None:
                self._reply(
                    status,
                    {
                        "detail": detail,
                        "status": status,
                        "title": _TITLES.get(status, "Error"),
                        "type": "about:blank",
                    },
                )

            def _body(self) -> Any:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                if not raw:
                    return {}
                try:
                    return json.loads(raw)
                except ValueError:
                    raise _ApiError(400, "the request body is not JSON") from None

            def _route(self, method: str) -> None:
                if not hmac.compare_digest(self.headers.get("Authorization", ""), expected):
                    self._body() if method in {"PATCH", "POST"} else None
                    self._problem(401, "The server could not verify that you are authorized")
                    return
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                path = url.path
                if not (path == PREFIX or path.startswith(PREFIX + "/")):
                    self._problem(404, "The requested URL was not found on the server")
                    return
                rest = path[len(PREFIX) :].strip("/")
                try:
                    body = self._body() if method in {"PATCH", "POST"} else None
                    with lock:
                        switch.check_confirm()
                        status, doc = 200, self._dispatch(method, rest, query, body)
                except _ApiError as exc:
                    self._problem(exc.status, exc.detail)
                    return
                self._reply(status, doc)

            def _dispatch(self, method: str, rest: str, query: dict[str, str], body: Any) -> Any:
                user = username
                rev = query.get("rev")
                if rest == "revision" or rest.startswith("revision/"):
                    rid = unquote(rest[len("revision/") :]) if "/" in rest else ""
                    if method == "POST" and not rid:
                        return api.create_revision(user)
                    if method == "GET":
                        return api.revision(rid) if rid else api.revisions()
                    if method == "PATCH" and rid:
                        return api.patch_revision(rid, body)
                    raise _ApiError(405, "The method is not allowed for the requested URL")
                words = [unquote(w) for w in rest.split("/") if w]
                if method == "GET":
                    return api.get(words, rev)
                if method == "PATCH":
                    return api.patch(words, rev, body)
                if method == "DELETE":
                    return api.delete(words, rev)
                raise _ApiError(405, "The method is not allowed for the requested URL")

            def do_GET(self) -> None:
                self._route("GET")

            def do_POST(self) -> None:
                self._route("POST")

            def do_PATCH(self) -> None:
                self._route("PATCH")

            def do_DELETE(self) -> None:
                self._route("DELETE")

        self.httpd = ThreadingHTTPServer((listen, port), Handler)
        self.httpd.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert_path, key_path)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="nvue-api", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
