"""Emulated ``mokutil`` (lcp/mokutil ``src/mokutil.c``) over the lab host's Secure Boot state.

State: ``/var/lib/emulated-hw/secureboot.json`` ``{"efi": bool, "enabled": bool, "enrolled": [sha1],
"pending": [{"sha1", "key", "password_hash"}]}``; absent = an EFI machine with Secure Boot off and
nothing enrolled (the lab default). A key's identity is the sha1 of its file, as mokutil's
"SHA1 Fingerprint" is the sha1 of the DER certificate.

- ``--sb-state``: ``SecureBoot enabled`` / ``SecureBoot disabled`` (exit 0); without EFI
  ``EFI variables are not supported on this system`` on stderr, exit 255 (``exit(-1)``).
- ``--test-key KEY``: ``KEY is already enrolled`` (exit 1; also when only queued: mokutil checks
  MokNew too) or ``KEY is not enrolled`` (exit 0); an unreadable KEY: ``Failed to open KEY``, 255.
- ``--import KEY`` with ``--hash-file F`` (a ``--generate-hash`` line) or ``--root-pw``, or the
  password twice on stdin (``input password:`` / ``input password again:``): queues the key
  (MokNew) silently; an enrolled or queued key: ``SKIP: KEY is already enrolled`` / ``... is already
  in the enrollment request``. Enrollment completes at the next boot, in MokManager, when someone at
  the console confirms with the password: :func:`boot` is that step (the lab's power cycle).
- ``--list-new``, ``--list-enrolled``: ``[key N]`` / ``SHA1 Fingerprint: aa:bb:...``; ``MokNew is
  empty`` when nothing is queued. ``--generate-hash[=PASSWORD]``: a ``$6$salt$...`` line (the shape
  of crypt(3) SHA-512; the lab does not need the real digest).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from . import devstate

STATE = "var/lib/emulated-hw/secureboot.json"


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def load(state: Path | None = None) -> dict[str, Any]:
    try:
        data = json.loads((state or devstate.path(STATE)).read_text())
    except (OSError, ValueError):
        data = {}
    data.setdefault("efi", True)
    data.setdefault("enabled", False)
    data.setdefault("enrolled", [])
    data.setdefault("pending", [])
    return data


def save(data: dict[str, Any], state: Path | None = None) -> None:
    target = state or devstate.path(STATE)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def key_sha1(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


def norm(fpr: str) -> str:
    return fpr.replace(":", "").lower()


def is_enrolled(sha1: str) -> bool:
    """True when the key is in MokList (enrolled); a queued key is not trusted by the kernel yet."""
    return norm(sha1) in {norm(s) for s in load()["enrolled"]}


def secure_boot_on() -> bool:
    st = load()
    return bool(st["efi"] and st["enabled"])


def boot(state: Path | None = None) -> list[str]:
    """MokManager at boot: queued keys become enrolled (the operator confirmed); return them.
    ``state``: the state file seen from the controller (hosts/NAME/hw/secureboot.json)."""
    if state is not None and not state.exists():
        return []
    st = load(state)
    done = [req["sha1"] for req in st["pending"]]
    if not done:
        return []
    st["enrolled"] = sorted(set(st["enrolled"]) | set(done))
    st["pending"] = []
    save(st, state)
    return done


def _fingerprint(sha1: str) -> str:
    return ":".join(sha1[i:i + 2] for i in range(0, len(sha1), 2))


def _hash(password: str) -> str:
    salt = base64.b64encode(os.urandom(12), b"./").decode()[:16]
    digest = base64.b64encode(hashlib.sha512((salt + password).encode()).digest(), b"./").decode().rstrip("=")
    return f"$6${salt}${digest[:86]}"


def _read_password() -> str | None:
    sys.stdout.write("input password: ")
    sys.stdout.flush()
    first = sys.stdin.readline()
    sys.stdout.write("input password again: ")
    sys.stdout.flush()
    second = sys.stdin.readline()
    sys.stdout.write("\n")
    if not first or first != second:
        return None
    return first.rstrip("\n")


def main(argv: list[str]) -> int:
    st = load()
    if not argv:
        _out("Usage: mokutil [--sb-state | --test-key KEY | --import KEY [--hash-file F | --root-pw] | "
             "--list-new | --list-enrolled | --generate-hash[=PASSWORD]]")
        return 0
    if not st["efi"] and not argv[0].startswith("--generate-hash"):
        _err("EFI variables are not supported on this system")
        return 255
    cmd = argv[0]
    if cmd == "--sb-state":
        _out("SecureBoot enabled" if st["enabled"] else "SecureBoot disabled")
        return 0
    if cmd.startswith("--generate-hash"):
        password = cmd.split("=", 1)[1] if "=" in cmd else _read_password()
        if password is None:
            _err("Abort")
            return 255
        _out(_hash(password))
        return 0
    if cmd in ("--test-key", "-t", "--import", "-i"):
        if len(argv) < 2:
            _err(f"mokutil: option '{cmd}' requires an argument")
            return 255
        key = argv[1]
        try:
            sha1 = key_sha1(devstate.path(os.path.abspath(key)).read_bytes())
        except OSError:
            _err(f"Failed to open {key}")
            return 255
        queued = sha1 in {r["sha1"] for r in st["pending"]}
        if cmd in ("--test-key", "-t"):
            if sha1 in st["enrolled"] or queued:
                _out(f"{key} is already enrolled")
                return 1
            _out(f"{key} is not enrolled")
            return 0
        if sha1 in st["enrolled"]:
            _out(f"SKIP: {key} is already enrolled")
            return 0
        if queued:
            _out(f"SKIP: {key} is already in the enrollment request")
            return 0
        rest = argv[2:]
        if "--hash-file" in rest or "-f" in rest:
            flag = "--hash-file" if "--hash-file" in rest else "-f"
            idx = rest.index(flag)
            try:
                pw_hash = devstate.path(os.path.abspath(rest[idx + 1])).read_text().strip()
            except (IndexError, OSError):
                _err("Failed to read hash file")
                return 255
            if not pw_hash.startswith("$"):
                _err("Invalid hash file")
                return 255
        elif "--root-pw" in rest or "-P" in rest:
            pw_hash = "root-pw"
        else:
            password = _read_password()
            if password is None:
                _err("Abort")
                return 255
            pw_hash = _hash(password)
        st["pending"].append({"sha1": sha1, "key": key, "password_hash": pw_hash})
        save(st)
        return 0
    if cmd in ("--list-new", "-N", "--list-enrolled", "-l"):
        shas = [r["sha1"] for r in st["pending"]] if cmd in ("--list-new", "-N") else st["enrolled"]
        if not shas:
            _out("MokNew is empty" if cmd in ("--list-new", "-N") else "MokListRT is empty")
            return 0
        for i, sha1 in enumerate(shas, 1):
            _out(f"[key {i}]")
            _out(f"SHA1 Fingerprint: {_fingerprint(sha1)}")
        return 0
    _err(f"mokutil: unrecognized option '{cmd}'")
    return 255
