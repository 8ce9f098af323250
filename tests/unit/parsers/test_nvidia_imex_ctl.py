"""nvidia-imex-ctl -N -j (JSON) and -N (text): the IMEX domain status, from public captures."""

from __future__ import annotations

import json

import pytest
from captures import read_fixture

from fabricops.errors import ParseError
from fabricops.parsers import parse
from fabricops.parsers.nvidia_imex_ctl import CONNECTED, ImexDomainStatus

AWS = read_fixture("nvidia-imex-ctl", "aws_parallelcluster_p6e_gb200_18_nodes.txt")
DCGM = read_fixture("nvidia-imex-ctl-json", "dcgm_spec_sample_degraded.json")
DOWN = read_fixture("nvidia-imex-ctl-json", "ai_cloud_validation_two_node_down.json")


def test_text_of_a_healthy_18_tray_domain():
    rec = parse("nvidia-imex-ctl", AWS)
    assert isinstance(rec, ImexDomainStatus) and rec.form == "text"
    assert rec.status == "UP" and rec.timestamp == "5/12/2025 06:08:10.580"
    assert [n.index for n in rec.nodes] == list(range(18))
    assert rec.nodes[0].host == "172.31.48.81" and rec.nodes[17].host == "172.31.56.47"
    assert {n.status for n in rec.nodes} == {"READY"} and {n.version for n in rec.nodes} == {"570.172"}
    first = rec.nodes[0]
    assert len(first.connections) == 18 and {c.status for c in first.connections} == {CONNECTED}
    assert first.connections[5].host == "172.31.50.44"  # the column's node, by index
    assert rec.node("172.31.55.59").index == 14


def test_text_letters_become_the_json_words():
    lines = AWS.split("\n")
    row = next(i for i, ln in enumerate(lines) if ln.strip().startswith("3 "))
    cells = lines[row].split()
    cells[6] = "I"  # node 3 sees node 5 as Invalid
    cells[7] = "!V!"
    lines[row] = "       3        " + "   ".join(cells[1:])
    rec = parse("nvidia-imex-ctl", "\n".join(lines))
    seen = {c.index: c.status for c in rec.nodes[3].connections}
    assert seen[5] == "INVALID" and seen[6] == "VERSION_MISMATCH" and seen[4] == CONNECTED


def test_json_of_a_degraded_domain_as_nvidia_specifies_it():
    rec = parse("nvidia-imex-ctl-json", DCGM)
    assert rec.form == "json" and rec.status == "DEGRADED" and rec.timestamp == "5/22/2025 19:46:40.891"
    assert [(n.index, n.host, n.status, n.version) for n in rec.nodes] == [
        (1, "10.76.183.30", "READY", "580.30"),
        (3, "10.76.186.255", "READY", "580.30"),
    ]
    assert rec.nodes[0].hostname is None  # "" is no name
    assert [(c.index, c.host, c.status) for c in rec.nodes[1].connections] == [
        (1, "10.76.183.30", CONNECTED),
        (6, "10.76.190.23", CONNECTED),
    ]


def test_json_of_a_down_domain():
    rec = parse("nvidia-imex-ctl-json", DOWN)
    assert rec.status == "DOWN"
    assert [(n.host, n.status, n.hostname) for n in rec.nodes] == [
        ("10.0.0.1", "UNAVAILABLE", "gpu-node-a"),
        ("10.0.0.2", "UNAVAILABLE", None),  # "N/A"
    ]
    assert {c.status for n in rec.nodes for c in n.connections} == {"INVALID"}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Failed to read node configuration file /etc/nvidia-imex/nodes_config.cfg\n",
        "[]",
        '{"status": "UP"}',
        '{"status": "UP", "nodes": []}',
        '{"nodes": {"0": {"status": "READY"}}}',
        '{"status": "UP", "nodes": {"x": {"status": "READY"}}}',
        '{"status": "UP", "nodes": {"0": {"host": "10.0.0.1"}}}',
        '{"status": "UP", "nodes": {"0": {"status": "READY", "connections": {"1": {"host": "10.0.0.2"}}}}}',
    ],
)
def test_json_refuses_what_is_not_a_domain_status(text):
    with pytest.raises(ParseError):
        parse("nvidia-imex-ctl-json", text)


def test_text_refuses_damage():
    with pytest.raises(ParseError, match="Domain State"):
        parse("nvidia-imex-ctl", AWS.replace("Domain State: UP", ""))
    with pytest.raises(ParseError, match="every node once"):
        parse("nvidia-imex-ctl", AWS.replace("Node #17 ", "Node #18 "))
    cut = "\n".join(ln[:40] for ln in AWS.split("\n"))  # a terminal-width cut of the table
    with pytest.raises(ParseError):
        parse("nvidia-imex-ctl", cut)
    with pytest.raises(ParseError):
        parse("nvidia-imex-ctl", json.dumps({"nodes": {}, "status": "UP"}))
