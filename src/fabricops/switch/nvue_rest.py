"""A Cumulus NVUE switch over its REST API, behind the connection interface the runner uses.

``roce_switch_transport: rest`` makes :func:`fabricops.switch.transport.connect` return a
:class:`NvueRestConnection` instead of a netmiko session. It answers the same
``send_command(...)`` calls the NVUE flows make (``change.apply_nvue``, ``transport.get_roce_data``)
with the same text the CLI prints, so the read, the diff, the checks and the states are the CLI's
code; only the wire differs. Each NVUE command fabricops sends maps to the API of NVIDIA's "NVUE
API" guide (Cumulus Linux 5.x user guide, System Configuration > NVUE > NVUE API):

=======================================  =====================================================
CLI (what change.py sends)               REST
=======================================  =====================================================
``nv show <path> --rev=applied -o json``  ``GET /nvue_v1/<path>?rev=applied``
``nv show qos roce -o json``              ``GET /nvue_v1/qos/roce`` (operational)
``nv config show -o json``                ``GET /nvue_v1/?rev=applied`` (wrapped as the CLI's list)
``nv set`` / ``nv unset`` (NVUE_KNOBS)    ``POST /nvue_v1/revision`` once, then
                                          ``PATCH /nvue_v1/<parent>?rev=<changeset>`` with
                                          ``{leaf: value}`` (``null`` unsets)
``nv config diff [A B]``                  ``GET /nvue_v1/?rev=<changeset>`` and ``?rev=applied``
                                          (``startup``), compared here
``nv config apply ... -y``                ``PATCH /nvue_v1/revision/<changeset>`` with
                                          ``{"state": "apply", "auto-prompt": {"ays": "ays_yes"}}``,
                                          then ``GET /nvue_v1/revision/<changeset>`` until applied
``nv config detach``                      ``PATCH /nvue_v1/revision/<changeset>`` ``{"state": "detach"}``
``nv config save``                        ``PATCH /nvue_v1/revision/applied`` ``{"state": "save"}``
                                          (the REST form NVIDIA's NVOS manual gives for it)
=======================================  =====================================================

The API has no ``--confirm`` timer here: an apply over REST takes effect at once (``--confirm-yes``
answers nothing, ``--confirm-status`` "No pending confirm"), so a failure after the apply is reported
``live``, never rolled back by a timer. A command outside the knob table answers ``Error: ...`` and
the flow stops before it applies anything (fail closed).

TLS: the switch's certificate is verified against ``roce_switch_api_ca`` (a PEM file: the switch's
self-signed certificate or the CA that signed it); there is no "insecure" mode. Only the standard
library (``http.client``, ``ssl``).
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import shlex
import ssl
import time
from typing import Any
from urllib.parse import quote

import yaml

from .knobs import NVUE_KNOBS
from .model import SwitchError

__all__ = ["NvueRestConnection", "RestError", "command_to_patch"]

API_PREFIX = "/nvue_v1"
POLL_INTERVAL = 0.2
APPLIED_STATES = {"applied", "applied_and_saved"}
FAILED_STATES = {"apply_fail", "ays_fail", "invalid", "detached", "confirm_fail"}


class RestError(SwitchError):
    pass


def _expand(token: str, kind: str) -> list[str]:
    if kind == "port":
        out = []
        for part in token.split(","):
            m = re.fullmatch(r"([a-z]+)(\d+)-(?:[a-z]+)?(\d+)", part)
            out += [f"{m.group(1)}{n}" for n in range(int(m.group(2)), int(m.group(3)) + 1)] if m else [part]
        return out
    out = []
    for part in token.split(","):
        m = re.fullmatch(r"(\d+)-(\d+)", part)
        out += [str(n) for n in range(int(m.group(1)), int(m.group(2)) + 1)] if m else [part]
    return out


def _match(pattern: tuple[str, ...], words: list[str]) -> list[list[str]] | None:
    """Concrete paths when WORDS fill PATTERN (``{field}`` takes any word, ranges expand)."""
    if len(pattern) != len(words):
        return None
    paths: list[list[str]] = [[]]
    for p, w in zip(pattern, words, strict=True):
        if p.startswith("{"):
            vals = _expand(w, "port" if p == "{port}" else "num")
        elif p == w:
            vals = [w]
        else:
            return None
        paths = [[*x, v] for x in paths for v in vals]
    return paths


def _json_value(text: str) -> Any:
    return int(text) if re.fullmatch(r"\d+", text) else text


def command_to_patch(command: str) -> list[tuple[list[str], Any]]:
    """``nv set|unset ...`` (a command fabricops renders from NVUE_KNOBS) -> [(path, value)].

    ``value`` is the JSON to write at ``path`` (``{}`` for a presence node or ID-set member, None
    to unset). Raises :class:`RestError` for anything else."""
    argv = shlex.split(command)
    if len(argv) < 3 or argv[0] != "nv" or argv[1] not in {"set", "unset"}:
        raise RestError(f"not an nv set/unset command: {command!r}")
    verb, words = argv[1], argv[2:]
    for knob in NVUE_KNOBS:
        if verb == "set":
            if knob.leaf:
                paths = _match(knob.path, words[:-1]) if len(words) > 1 else None
                if paths:
                    return [(p, _json_value(words[-1])) for p in paths]
            else:
                paths = _match(knob.path, words)
                if paths:
                    return [(p, {}) for p in paths]
        else:
            for pattern in {knob.unset or knob.path, knob.path}:
                paths = _match(pattern, words)
                if paths:
                    return [(p, None) for p in paths]
    raise RestError(f"no REST form for {command!r} (only the RoCE knobs fabricops renders)")


def _diff(old: Any, new: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    sets: dict[str, Any] = {}
    unsets: dict[str, Any] = {}
    old = old if isinstance(old, dict) else {}
    new = new if isinstance(new, dict) else {}
    for k, v in new.items():
        if k not in old:
            sets[k] = v
        elif isinstance(v, dict) and isinstance(old[k], dict):
            s, u = _diff(old[k], v)
            if s:
                sets[k] = s
            if u:
                unsets[k] = u
        elif v != old[k]:
            sets[k] = v
    for k in old:
        if k not in new:
            unsets[k] = None
    return sets, unsets


def _diff_text(old: Any, new: Any) -> str:
    """The YAML ``nv config diff`` prints (``[{set: ...}, {unset: ...}]``; empty: nothing)."""
    sets, unsets = _diff(old, new)
    items = ([{"set": sets}] if sets else []) + ([{"unset": unsets}] if unsets else [])
    return yaml.safe_dump(items, default_flow_style=False, sort_keys=True) if items else ""


class NvueRestConnection:
    """One switch's NVUE REST API, with the netmiko-like methods the NVUE flows call."""

    def __init__(
        self,
        host: str,
        port: int,
        username: str,
        password: str,
        *,
        cafile: str,
        timeout: float = 30,
        switch: str | None = None,
    ):
        self.switch = switch or host
        self.host, self.port, self.timeout = host, int(port), float(timeout)
        self._auth = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
        self._secret = password
        try:
            self._ctx = ssl.create_default_context(cafile=cafile)
        except (OSError, ssl.SSLError) as exc:
            raise RestError(
                f"{self.switch}: the API certificate file {cafile} cannot be used ({exc})."
            ) from None
        self.changeset: str | None = None
        self.requests: list[str] = []  #: "METHOD path" of every request, in order (never a body)
        self._conn: http.client.HTTPSConnection | None = None
        self.request("GET", API_PREFIX + "/system")  # the login: fails here as SSH would at connect

    # ---------------------------------------------------------------- HTTP
    def request(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": self._auth, "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        self.requests.append(f"{method} {path}")
        for attempt in (1, 2):  # one retry on a connection the server closed between requests
            if self._conn is None:
                self._conn = http.client.HTTPSConnection(
                    self.host, self.port, timeout=self.timeout, context=self._ctx
                )
            try:
                self._conn.request(method, path, body=data, headers=headers)
                resp = self._conn.getresponse()
                raw = resp.read()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self._conn.close()
                self._conn = None
                if attempt == 2:
                    raise RestError(f"{self.switch}: the NVUE API closed the connection ({exc}).") from None
            except ssl.SSLCertVerificationError as exc:
                self.disconnect()
                raise RestError(
                    f"{self.switch}: step 'connect' failed: the API certificate of {self.host}:{self.port} "
                    f"does not verify against roce_switch_api_ca ({exc.verify_message})."
                ) from None
            except (OSError, http.client.HTTPException) as exc:
                self.disconnect()
                raise RestError(
                    f"{self.switch}: step 'connect' failed: {self.host}:{self.port} did not answer HTTPS "
                    f"({type(exc).__name__}: {str(exc).replace(self._secret, '********')[:120]})."
                ) from None
        try:
            doc = json.loads(raw or b"{}")
        except ValueError:
            raise RestError(f"{self.switch}: {method} {path} answered {resp.status} and no JSON.") from None
        if resp.status == 401:
            raise RestError(
                f"{self.switch}: step 'connect' failed: the NVUE API refused the login (HTTP 401); check "
                "ansible_user and the password."
            )
        if resp.status >= 400:
            detail = doc.get("detail") or doc.get("title") if isinstance(doc, dict) else doc
            raise RestError(f"HTTP {resp.status}: {detail}")
        return doc

    def disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _get_tree(self, rev: str) -> dict[str, Any]:
        got = self.request("GET", f"{API_PREFIX}/?rev={quote(rev, safe='')}")
        return got if isinstance(got, dict) else {}

    def _ensure_changeset(self) -> str:
        if self.changeset is None:
            created = self.request("POST", f"{API_PREFIX}/revision")
            if not isinstance(created, dict) or len(created) != 1:
                raise RestError(f"POST /nvue_v1/revision answered {created!r}")
            self.changeset = next(iter(created))
        return self.changeset

    # ---------------------------------------------------------------- the CLI's commands
    def send_command(self, command: str, **_kw: Any) -> str:
        """The text the CLI prints for COMMAND; errors as NVUE's ``Error: ...`` lines."""
        try:
            return self._command(command)
        except RestError as exc:
            return f"Error: {exc}\n"

    def _command(self, command: str) -> str:
        argv = shlex.split(command)
        if argv[:2] in (["nv", "set"], ["nv", "unset"]):
            patches = command_to_patch(command)  # refused before anything is created on the switch
            cs = self._ensure_changeset()
            for path, value in patches:
                parent = "/".join(quote(p, safe="") for p in path[:-1])
                self.request("PATCH", f"{API_PREFIX}/{parent}?rev={quote(cs, safe='')}", {path[-1]: value})
            return ""
        if argv[:2] == ["nv", "show"]:
            words = [a for a in argv[2:] if not a.startswith("-") and a != "json"]
            rev = next((a.split("=", 1)[1] for a in argv if a.startswith("--rev=")), None)
            path = "/".join(quote(w, safe="") for w in words)
            query = f"?rev={quote(rev, safe='')}" if rev else ""
            return json.dumps(self.request("GET", f"{API_PREFIX}/{path}{query}"), indent=2) + "\n"
        if argv[:3] == ["nv", "config", "show"]:
            return json.dumps(
                [{"header": {"nvue-api-version": "nvue_v1"}}, {"set": self._get_tree("applied")}]
            )
        if argv[:3] == ["nv", "config", "diff"]:
            revs = [a for a in argv[3:] if not a.startswith("-")]
            if len(revs) == 2:
                return _diff_text(self._get_tree(revs[0]), self._get_tree(revs[1]))
            if self.changeset is None:
                return ""
            return _diff_text(self._get_tree("applied"), self._get_tree(self.changeset))
        if argv[:3] == ["nv", "config", "detach"]:
            if self.changeset is not None:
                self.request("PATCH", self._rev_path(self.changeset), {"state": "detach"})
                self.changeset = None
            return ""
        if argv[:3] == ["nv", "config", "save"]:
            self.request("PATCH", self._rev_path("applied"), {"state": "save"})
            return "saved\n"
        if argv[:3] == ["nv", "config", "apply"]:
            opts = argv[3:]
            if "--confirm-status" in opts:
                return "No pending confirm\n"
            if "--confirm-yes" in opts or "--confirm-no" in opts:
                return ""
            return self._apply()
        raise RestError(f"no REST form for {command!r}")

    def _rev_path(self, rev: str) -> str:
        return f"{API_PREFIX}/revision/{quote(rev, safe='')}"

    def _apply(self) -> str:
        if self.changeset is None:
            raise RestError("nothing staged to apply")
        cs, self.changeset = self.changeset, None
        self.request("PATCH", self._rev_path(cs), {"state": "apply", "auto-prompt": {"ays": "ays_yes"}})
        deadline = time.monotonic() + self.timeout
        while True:
            state = str((self.request("GET", self._rev_path(cs)) or {}).get("state", ""))
            if state in APPLIED_STATES:
                return f"applied [rev_id: {cs}] ({state})\n"
            if state in FAILED_STATES:
                raise RestError(f"the revision {cs} ended {state}")
            if time.monotonic() > deadline:
                raise RestError(f"the revision {cs} was still {state or 'unknown'} after {self.timeout:g} s")
            time.sleep(POLL_INTERVAL)

    def send_config_set(self, commands: Any, **_kw: Any) -> str:
        return "".join(self.send_command(c) for c in commands)

    def save_config(self) -> str:
        return self.send_command("nv config save")
