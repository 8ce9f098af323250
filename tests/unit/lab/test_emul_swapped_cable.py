"""The swapped-cable fault moves the traffic too, not only what the discovery tools print: the
emulated perftest routes over cabling.json with cabling-override.json laid over it (as built)."""

from __future__ import annotations

import json

from test_emul_perftest import _write, make_fabric, make_host, run_pair, set_switch_port


def _swap_gpu01_to(fabric, switch_port: str) -> None:
    cabling = json.loads((fabric / "cabling.json").read_text())
    moved = dict(cabling["links"][0], switch_port=switch_port)
    _write(fabric / "cabling-override.json", json.dumps({"links": [moved]}))


def test_traffic_follows_the_cable_as_built(tmp_path):
    fabric = make_fabric(tmp_path, roce=False)
    cli = make_host(tmp_path, fabric, "gpu01", lid=5, ip_last=1)
    srv = make_host(tmp_path, fabric, "gpu02", lid=6, ip_last=2)
    # the planned port of gpu01 (1/1) is healthy; the port it is really plugged into (1/9) is down
    data = json.loads((fabric / "switches/leaf-a.json").read_text())
    data["ports"]["1/9"] = {"link": "down"}
    (fabric / "switches/leaf-a.json").write_text(json.dumps(data))
    _server, client = run_pair("ib_write_bw", srv, cli, ["-d", "mlx5_0", "--report_gbits"])
    assert client.returncode == 0, client.stderr  # as planned: fine
    _swap_gpu01_to(fabric, "1/9")
    _server, client = run_pair("ib_write_bw", srv, cli, ["-d", "mlx5_0", "--report_gbits"])
    assert client.returncode != 0
    assert "Completion with error" in client.stderr  # what perftest prints when the path is dead
    set_switch_port(fabric, "leaf-a", "1/9", link="up")
    _server, client = run_pair("ib_write_bw", srv, cli, ["-d", "mlx5_0", "--report_gbits"])
    assert client.returncode == 0, client.stderr
