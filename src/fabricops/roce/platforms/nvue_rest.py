"""A Cumulus NVUE switch over its REST API, behind the connection interface the runner uses.

``roce_switch_transport: rest`` makes :func:`fabricops.switch.transport.connect` return a
:class:`NvueRestConnection` instead of a netmiko session. It answers the same
``send_command(...)`` calls the NVUE flows make (``change.apply_nvue``, ``resource.get_roce_data``)
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

Bounds (the client runs under the switch's lock, so a server must not be able to hold it):

- every request has a deadline on its total time (``timeout``: connect, TLS handshake, request,
  status line, headers and body together), checked before every read and write of the socket,
  whose timeout is set to the time left -- a socket timeout alone restarts with every byte, so a
  server dripping one byte at a time would hold the client for ever;
- the apply (its ``PATCH`` and the polling of the revision) has an overall deadline
  (``apply_timeout``);
- a response body is read in chunks up to ``max_body`` bytes (4 MiB: NVUE's answers are JSON
  documents far smaller), then the request fails and the connection is closed;
- a redirect (3xx) is an error, never followed;
- an error answer is reported as its status, reason and at most a short excerpt of its
  ``detail``, on one line, with anything that looks like credentials removed (a server has been
  seen echoing the request's ``Authorization`` header in its error body).
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import re
import shlex
import ssl
import time
from typing import Any
from urllib.parse import quote

import yaml

from fabricops.switch.errors import SwitchError

from .nvue import NVUE_KNOBS

__all__ = ["NvueRestConnection", "RestError", "command_to_patch", "from_access"]

API_PREFIX = "/nvue_v1"
POLL_INTERVAL = 0.2
#: the largest response body read (bytes); NVUE's answers are JSON documents far smaller
MAX_BODY = 4 * 1024 * 1024
#: default overall deadline of an apply (its PATCH and the polling of the revision), seconds
APPLY_TIMEOUT = 120.0
_CHUNK = 64 * 1024
#: the longest excerpt of a server's error text that goes into a message
_EXCERPT = 160
APPLIED_STATES = {"applied", "applied_and_saved"}
FAILED_STATES = {"apply_fail", "ays_fail", "invalid", "detached", "confirm_fail"}


class RestError(SwitchError):
    pass


class _RequestTimedOut(RestError):
    """A request's deadline passed before its answer was complete (:attr:`deadline`: when)."""

    def __init__(self, message: str, deadline: float) -> None:
        super().__init__(message)
        self.deadline = deadline


class _DeadlinePassed(TimeoutError):
    """The request's deadline passed before the server's answer was complete."""


def _time_left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _DeadlinePassed("deadline passed")
    return left


class _DeadlineSocket(ssl.SSLSocket):
    """A TLS socket that checks its request's deadline before every read and write and sets the
    socket timeout to the time left (``SSLContext.sslsocket_class``)."""

    deadline: float | None = None

    def _arm(self) -> None:
        if self.deadline is not None:
            self.settimeout(_time_left(self.deadline))

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self._arm()
        return super().recv_into(buffer, nbytes, flags)

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        self._arm()
        return super().recv(buflen, flags)

    def send(self, data: Any, flags: int = 0) -> int:
        self._arm()
        return super().send(data, flags)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._arm()
        super().sendall(data, flags)


class _Connection(http.client.HTTPSConnection):
    """An HTTPS connection whose connect (TCP and TLS handshake) and socket use ``deadline``."""

    deadline: float = math.inf

    def connect(self) -> None:
        self.timeout = _time_left(self.deadline)  # bounds the TCP connect and the whole handshake
        super().connect()
        self.sock.deadline = self.deadline

    def set_deadline(self, deadline: float) -> None:
        self.deadline = deadline
        if self.sock is not None:
            self.sock.deadline = deadline


_SECRET_PATTERNS = (
    # an Authorization / Proxy-Authorization header or field, whatever its scheme
    (
        re.compile(
            r"(?i)\b((?:proxy-)?authori[sz]ation)\b[\"']?\s*[:=]\s*[\"']?"
            r"(?:(?:basic|bearer|digest|negotiate|token)\s+)?[^\s\"',;]*"
        ),
        r"\1: ********",
    ),
    (re.compile(r"(?i)\b(basic|bearer|digest)\s+[A-Za-z0-9+/=._~-]{4,}"), r"\1 ********"),
    (
        re.compile(
            r"(?i)\b(password|passwd|pwd|secret|token|api[_-]?key)\b[\"']?\s*[:=]\s*[\"']?[^\s\"',;]*"
        ),
        r"\1=********",
    ),
    (re.compile(r"(?i)([a-z][a-z0-9+.-]*://)[^/\s@]*@"), r"\1********@"),  # user:password@ in a URL
)


def _positive(switch: str, name: str, value: Any) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not (math.isfinite(seconds) and seconds > 0):
        raise RestError(f"{switch}: {name} must be a positive number of seconds, not {value!r}.")
    return seconds


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
    """One switch's NVUE REST API, with the netmiko-like methods the NVUE flows call.

    ``timeout``: the deadline of each request, in seconds (total time, not per read);
    ``apply_timeout``: the overall deadline of an apply (its PATCH and the polling of the
    revision); ``max_body``: the largest response body read, in bytes."""

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
        apply_timeout: float = APPLY_TIMEOUT,
        max_body: int = MAX_BODY,
    ):
        self.switch = switch or host
        self.host, self.port = host, int(port)
        self.timeout = _positive(self.switch, "timeout", timeout)
        self.apply_timeout = _positive(self.switch, "apply_timeout", apply_timeout)
        if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 1:
            raise RestError(f"{self.switch}: max_body must be a positive number of bytes, not {max_body!r}.")
        self.max_body = max_body
        self._auth = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
        self._secret = password
        #: what an excerpt of a server's answer must never show: the password, the user:password pair
        #: and the Authorization header's token
        self._secrets = [x for x in (f"{username}:{password}", self._auth.split(" ", 1)[1], password) if x]
        try:
            self._ctx = ssl.create_default_context(cafile=cafile)
        except (OSError, ssl.SSLError) as exc:
            raise RestError(
                f"{self.switch}: the API certificate file {cafile} cannot be used ({exc})."
            ) from None
        self._ctx.sslsocket_class = _DeadlineSocket
        self.changeset: str | None = None
        self.requests: list[str] = []  #: "METHOD path" of every request, in order (never a body)
        self._conn: _Connection | None = None
        self.request("GET", API_PREFIX + "/system")  # the login: fails here as SSH would at connect

    # ---------------------------------------------------------------- HTTP
    def request(self, method: str, path: str, body: Any = None, deadline: float | None = None) -> Any:
        """One request, answered within ``timeout`` seconds (or by ``deadline``, a
        ``time.monotonic()`` value, when that comes first); its JSON answer. :class:`RestError`
        (one line) for anything else."""
        start = time.monotonic()
        deadline = min(start + self.timeout, deadline if deadline is not None else math.inf)
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": self._auth, "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        self.requests.append(f"{method} {path}")
        for attempt in (1, 2):  # one retry on a connection the server closed between requests
            if self._conn is None:
                self._conn = _Connection(self.host, self.port, timeout=self.timeout, context=self._ctx)
            self._conn.set_deadline(deadline)
            try:
                self._conn.request(method, path, body=data, headers=headers)
                resp = self._conn.getresponse()
                status, reason = resp.status, resp.reason
                raw = self._read_body(resp, method, path)
                break
            except TimeoutError:  # the deadline, or the socket's timeout (set to the time left)
                self.disconnect()
                raise _RequestTimedOut(
                    f"{self.switch}: {method} {path}: {self.host}:{self.port} gave no complete answer within "
                    f"{deadline - start:.3g} s (the request's deadline); gave up and closed the connection.",
                    deadline,
                ) from None
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self.disconnect()
                if attempt == 2 or time.monotonic() >= deadline:
                    raise RestError(
                        f"{self.switch}: the NVUE API closed the connection ({self._clean(str(exc), 80)})."
                    ) from None
            except ssl.SSLCertVerificationError as exc:
                self.disconnect()
                raise RestError(
                    f"{self.switch}: step 'connect' failed: the API certificate of {self.host}:{self.port} "
                    f"does not verify against roce_switch_api_ca ({self._clean(exc.verify_message, 120)})."
                ) from None
            except (OSError, http.client.HTTPException) as exc:
                self.disconnect()
                raise RestError(
                    f"{self.switch}: step 'connect' failed: {self.host}:{self.port} did not answer HTTPS "
                    f"({type(exc).__name__}: {self._clean(str(exc), 120)})."
                ) from None
        if resp.will_close:
            self.disconnect()
        where = f"{self.switch}: {method} {path}"
        said = f"HTTP {status} {self._clean(reason, 40)}".rstrip()
        if status == 401:
            raise RestError(
                f"{self.switch}: step 'connect' failed: the NVUE API refused the login (HTTP 401); check "
                "ansible_user and the password."
            )
        if 300 <= status < 400:
            self.disconnect()
            raise RestError(
                f"{where} answered {said}, a redirect; fabricops does not follow redirects (check "
                "ansible_host and roce_switch_api_port: the NVUE API answers itself)."
            )
        doc: Any = None
        try:
            doc = json.loads(raw or b"{}")
        except ValueError:
            if 200 <= status < 300:
                raise RestError(f"{where} answered {said} and no JSON.") from None
        if not 200 <= status < 300:
            detail = doc.get("detail") or doc.get("title") if isinstance(doc, dict) else None
            excerpt = self._clean(detail, _EXCERPT) if isinstance(detail, str) else ""
            raise RestError(f"HTTP {status}: {excerpt}" if excerpt else f"{where} answered {said}.")
        return doc

    def _read_body(self, resp: http.client.HTTPResponse, method: str, path: str) -> bytes:
        """The body, in chunks, refused past ``max_body`` bytes (the connection is then closed)."""
        length = resp.getheader("Content-Length") or ""
        too_big = RestError(
            f"{self.switch}: {method} {path}: the answer is larger than {self.max_body} bytes; not read "
            "(connection closed)."
        )
        if length.strip().isdigit() and int(length) > self.max_body:
            self.disconnect()
            raise too_big
        parts: list[bytes] = []
        total = 0
        while True:
            chunk = resp.read(min(_CHUNK, self.max_body + 1 - total))
            if not chunk:
                return b"".join(parts)
            total += len(chunk)
            if total > self.max_body:
                self.disconnect()
                raise too_big
            parts.append(chunk)

    def _clean(self, text: Any, limit: int) -> str:
        """``text`` from the server or the network as one short printable line, with the password,
        the basic-auth token and anything that looks like credentials removed."""
        line = " ".join("".join(ch if ch.isprintable() else " " for ch in str(text or "")).split())
        for secret in self._secrets:
            line = line.replace(secret, "********")
        for pattern, repl in _SECRET_PATTERNS:
            line = pattern.sub(repl, line)
        return line if len(line) <= limit else line[: limit - 3] + "..."

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
        # one deadline for the whole apply: its PATCH and every poll of the revision
        deadline = time.monotonic() + self.apply_timeout
        body = {"state": "apply", "auto-prompt": {"ays": "ays_yes"}}
        self.request("PATCH", self._rev_path(cs), body, deadline=deadline)
        state = ""
        while True:
            try:
                got = self.request("GET", self._rev_path(cs), deadline=deadline)
            except _RequestTimedOut as exc:
                if exc.deadline < deadline:
                    raise  # the request's own deadline: the server stopped answering
                # a poll cut short by the apply's deadline: the apply's verdict, whatever the
                # poll's timing (a slow poll that ends past it is the same finding as a fast one)
                raise RestError(
                    f"the revision {cs} was still {state or 'unknown'} after {self.apply_timeout:g} s "
                    "(the apply's deadline)"
                ) from None
            state = self._clean(got.get("state", "") if isinstance(got, dict) else "", 40)
            if state in APPLIED_STATES:
                return f"applied [rev_id: {cs}] ({state})\n"
            if state in FAILED_STATES:
                raise RestError(f"the revision {cs} ended {state}")
            left = deadline - time.monotonic()
            if left <= POLL_INTERVAL:
                raise RestError(
                    f"the revision {cs} was still {state or 'unknown'} after {self.apply_timeout:g} s "
                    "(the apply's deadline)"
                )
            time.sleep(POLL_INTERVAL)

    def send_config_set(self, commands: Any, **_kw: Any) -> str:
        return "".join(self.send_command(c) for c in commands)

    def save_config(self) -> str:
        return self.send_command("nv config save")


def from_access(access: Any) -> NvueRestConnection:
    """The REST session a ``SwitchAccess`` with ``transport == "rest"`` describes
    (``fabricops.switch.transport.open_session`` calls it through ``fabricops.roce.platforms.connect``)."""
    return NvueRestConnection(
        access.host,
        access.api_port,
        access.username,
        access.password or "",
        cafile=access.api_ca or "",
        timeout=access.timeout,
        switch=access.switch,
    )
