"""The verify reports (fabricops.verify.report): what the terminal table says per host, and that
text from hosts can neither drive the terminal nor break the JUnit XML."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from fabricops.verify import report
from fabricops.verify.engine import VerifyRun
from fabricops.verify.result import ERROR, FAIL, PASS, CheckResult

HOSTS = ["gpu01", "gpu02", "gpu03"]


def _verdicts(run: VerifyRun, not_checked=None) -> dict[str, str]:
    """host -> its verdict column in the terminal table."""
    lines = report.terminal(run, not_checked=not_checked).splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("HOST"))
    col = lines[header].index("verdict")
    return {line.split()[0]: line[col:] for line in lines[header + 1 : header + 1 + len(run.hosts)]}


def _nccl(status, host="gpu01,gpu02,gpu03", msg="all_reduce across 3 hosts: nccl-tests did not run"):
    return CheckResult("nccl", "nccl_busbw", host, "all_reduce", status, msg)


def _pair(status, msg="gpu01 mlx5_0 <-> gpu02 mlx5_0: ib_write_bw could not start"):
    return CheckResult(
        "pairs",
        "ib_write_bw",
        "gpu01<->gpu02",
        "mlx5_0<->mlx5_0",
        status,
        msg,
        details={"client": "gpu01", "server": "gpu02", "rail": 0},
    )


def _hostcheck(status, host="gpu01"):
    return CheckResult("hosts", "hca_port", host, "mlx5_0/1", status, f"{host} mlx5_0/1: port ACTIVE")


#: (id, results, {host: how its verdict starts}): a host in a check that failed or could not run is
#: never "pass"; a multi-host check (NCCL, rail consistency: "a,b,c") counts for each of its hosts
VERDICTS = [
    ("all-pass", [_hostcheck(PASS, h) for h in HOSTS], dict.fromkeys(HOSTS, "pass")),
    ("host-check-fails", [_hostcheck(FAIL), _hostcheck(PASS, "gpu02")], {"gpu01": "FAIL", "gpu02": "pass"}),
    # the audit's case: the only check is a multi-host one, and it errored
    ("multi-host-error-only", [_nccl(ERROR)], dict.fromkeys(HOSTS, "FAIL: nccl-tests did not run")),
    (
        "multi-host-error-some",
        [_nccl(ERROR, host="gpu01,gpu02"), _hostcheck(PASS, "gpu03")],
        {"gpu01": "FAIL", "gpu02": "FAIL", "gpu03": "pass"},
    ),
    (
        "multi-host-fail",
        [
            CheckResult(
                "hosts",
                "rail_consistency",
                "gpu02,gpu03",
                "mlx5_0",
                FAIL,
                "rail mlx5_0: MTU 1024 on gpu02, gpu03",
            )
        ],
        {"gpu01": "pass", "gpu02": "FAIL", "gpu03": "FAIL"},
    ),
    ("pair-could-not-run", [_pair(ERROR)], {"gpu01": "FAIL", "gpu02": "FAIL", "gpu03": "pass"}),
    # one failed pair blames no host (the cable between them): the pairs column says so, not the verdict
    (
        "pair-fail-blames-no-host",
        [_pair(FAIL, "gpu01 <-> gpu02: 196 Gb/s")],
        {"gpu01": "pass", "gpu02": "pass"},
    ),
]


@pytest.mark.parametrize(("results", "expect"), [r[1:] for r in VERDICTS], ids=[r[0] for r in VERDICTS])
def test_per_host_verdict(results, expect):
    run = VerifyRun(hosts=HOSTS, profile="hgx-h100-ndr", only=None, results=results)
    got = _verdicts(run)
    for host, verdict in expect.items():
        assert got[host].startswith(verdict), (host, got[host])
        if verdict == "pass":
            assert got[host].strip() == "pass"
    if not run.ok:
        assert report.terminal(run).startswith("fabricops verify: FAIL")


#: text a host may print, as it would reach the report (a message, a device name, a reason)
HOSTILE = {
    "csi-clear-screen": "\x1b[2J\x1b[H",
    "csi-colour": "\x1b[32mPASS\x1b[0m",
    "osc-title": "\x1b]0;owned\x07",
    "osc-hyperlink": "\x1b]8;;http://evil/\x1b\\click\x1b]8;;\x1b\\",
    "c1-csi": "\x9b2J",
    "carriage-return": "FAIL\rpass",
    "backspace": "FAIL\x08\x08\x08\x08pass",
    "nul": "a\x00b",
    "del": "a\x7fb",
    "vertical-tab-form-feed": "a\x0b\x0cb",
    "bidi-override": "\u202esdrawkcab",
    "lone-surrogate": "a\udcffb",
}
#: what must not reach a terminal: C0 but tab and newline, DEL, C1, bidi overrides, lone surrogates
UNSAFE_TERMINAL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _hostile_run(text: str) -> tuple[VerifyRun, dict[str, str]]:
    results = [
        CheckResult(
            "hosts",
            "hca_port",
            "gpu01",
            f"mlx5_0{text}",
            FAIL,
            f"gpu01 mlx5_0/1: state {text}",
            cause=f"cable {text}",
            measured=text,
            source=text,
        ),
        CheckResult("hosts", "ofed_version", "gpu02", None, ERROR, f"gpu02: ofed_info printed {text}"),
        CheckResult("hosts", "nvlink", "gpu02", None, PASS, f"gpu02: {text}"),
        CheckResult("hosts", "pcie", "gpu02", None, "skip", f"skipped: {text}"),
    ]
    run = VerifyRun(hosts=[*HOSTS[:2], "gpu03"], profile="hgx-h100-ndr", only=None, results=results)
    return run, {"gpu03": f"unreachable: ssh said {text}"}


@pytest.mark.parametrize("vector", list(HOSTILE))
def test_host_text_is_inert_on_the_terminal_and_valid_in_junit(vector):
    run, not_checked = _hostile_run(HOSTILE[vector])
    text = report.terminal(run, not_checked=not_checked)
    assert not UNSAFE_TERMINAL.search(text), repr(text)
    assert "\\x" in text or "\\u" in text  # shown, escaped: the evidence is kept
    xml = report.to_junit(run, not_checked=not_checked)
    root = ET.fromstring(xml.encode("utf-8"))  # XML 1.0 refuses most C0 characters, even as &#N;
    assert root.get("failures") == "1" and root.get("errors") == "2"
    messages = " ".join(
        e.get("message", "") + (e.text or "")
        for e in root.iter()
        if e.tag in ("failure", "error", "system-out", "skipped")
    )
    assert "\x1b" not in messages and "\x00" not in messages
    assert report.to_json(run, not_checked=not_checked).isascii()  # JSON escapes them itself
