"""The negative control on the emulated silicon: a real emulated perftest pair (TCP on 127.0.0.1)
moves the emulated port counters; the emulated perfquery -x and the sysfs files read them; the
judge (fabricops.verify.counters) agrees with the bytes the test reports -- and names the port
when the test ran on another device than the one it was asked about."""

from __future__ import annotations

from pathlib import Path

from test_emul_perftest import _write, make_fabric, make_host, run_pair, run_tool

from fabricops.parsers.perftest import parse_bw
from fabricops.verify.counters import judge, read_snapshot, reported_bytes, snapshot_command


def _perfquery(root: Path, host: str, device: str):
    hca, _, port = device.partition("/")
    proc = run_tool("perfquery", root, ["-x", "-C", hca, "-P", port])
    res = {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
    return read_snapshot(host, device, "InfiniBand", res)


def _sysfs(root: Path, host: str, device: str):
    paths = snapshot_command(device, "Ethernet").split()[1:]  # what `cat` would read in the host
    try:
        out = "".join((root / p.lstrip("/")).read_text() for p in paths)
        res = {"rc": 0, "stdout": out, "stderr": ""}
    except OSError as exc:
        res = {"rc": 1, "stdout": "", "stderr": f"cat: {exc}"}
    return read_snapshot(host, device, "Ethernet", res)


def _second_ib_port(root: Path, dev: str = "mlx5_1", lid: int = 9) -> None:
    """Another InfiniBand HCA in the host's sysfs (as hwctl renders one), idle."""
    pdir = root / f"sys/class/infiniband/{dev}/ports/1"
    _write(pdir / "link_layer", "InfiniBand\n")
    _write(pdir / "state", "4: ACTIVE\n")
    _write(pdir / "lid", f"{lid:#x}\n")
    for name in ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets"):
        _write(pdir / "counters" / name, "0\n")


def _around(read, srv, cli, device_cli, device_srv, args):
    before = {"client": read(cli, "gpu01", device_cli), "server": read(srv, "gpu02", device_srv)}
    server, client = run_pair("ib_write_bw", srv, cli, args)
    assert client.returncode == 0 and server.returncode == 0, client.stderr + server.stderr
    after = {"client": read(cli, "gpu01", device_cli), "server": read(srv, "gpu02", device_srv)}
    rec = parse_bw(client.stdout)
    return judge("ib_write_bw", before, after, reported_bytes(rec.results), rec.bidirectional), rec


def test_ib_counters_move_by_what_the_test_reports(tmp_path):
    fabric = make_fabric(tmp_path, roce=False)
    cli = make_host(tmp_path, fabric, "gpu01", lid=5, ip_last=1)
    srv = make_host(tmp_path, fabric, "gpu02", lid=6, ip_last=2)
    v, _ = _around(_perfquery, srv, cli, "mlx5_0/1", "mlx5_0/1", ["-d", "mlx5_0", "--report_gbits"])
    assert v.ok, v.message
    assert v.details["reported_bytes"] == 65536 * 5000 == v.details["client"]["xmit_moved"]
    assert v.details["server"]["rcv_moved"] == 65536 * 5000 and v.details["server"]["xmit_moved"] == 0


def test_a_test_that_ran_on_another_device_is_caught(tmp_path):
    """The operator asked for mlx5_1; perftest ran on the default device mlx5_0 (the #1221 bug)."""
    fabric = make_fabric(tmp_path, roce=False)
    cli = make_host(tmp_path, fabric, "gpu01", lid=5, ip_last=1)
    srv = make_host(tmp_path, fabric, "gpu02", lid=6, ip_last=2)
    _second_ib_port(cli)
    v, _ = _around(_perfquery, srv, cli, "mlx5_1/1", "mlx5_0/1", ["--report_gbits"])  # no -d: default device
    assert not v.ok
    assert v.message == ("traffic did not cross mlx5_1/1 on gpu01 (PortXmitData moved 0 B, "
                         "the test reports 327.7 MB)")


def test_the_wrong_device_fault_runs_on_other_and_is_caught(tmp_path):
    """`fabricops lab fault gpu01 wrong-device mlx5_1 mlx5_0`: asked for -d mlx5_1, the emulated
    perftest runs on mlx5_0 and still prints mlx5_1 -- only the negative control can tell."""
    fabric = make_fabric(tmp_path, roce=False)
    cli = make_host(tmp_path, fabric, "gpu01", lid=5, ip_last=1)
    srv = make_host(tmp_path, fabric, "gpu02", lid=6, ip_last=2)
    _second_ib_port(cli)
    _write(cli / "var/lib/emulated-hw/wrong-device.json", '{"mlx5_1": "mlx5_0"}\n')
    srv_dev = "mlx5_0/1"
    before = {"client": _perfquery(cli, "gpu01", "mlx5_1/1"), "server": _perfquery(srv, "gpu02", srv_dev)}
    server, client = run_pair("ib_write_bw", srv, cli, [], client_args=["-d", "mlx5_1", "--report_gbits"])
    assert client.returncode == 0 and server.returncode == 0, client.stderr + server.stderr
    assert "Device         : mlx5_1" in client.stdout  # what the operator sees
    after = {"client": _perfquery(cli, "gpu01", "mlx5_1/1"), "server": _perfquery(srv, "gpu02", srv_dev)}
    rec = parse_bw(client.stdout)
    v = judge("ib_write_bw", before, after, reported_bytes(rec.results), rec.bidirectional)
    assert not v.ok
    assert v.message.startswith("traffic did not cross mlx5_1/1 on gpu01 (PortXmitData moved 0 B"), v.message


def test_roce_sysfs_counters_bidirectional(tmp_path):
    fabric = make_fabric(tmp_path, roce=True)
    cli = make_host(tmp_path, fabric, "gpu01", link="Ethernet", ip_last=1)
    srv = make_host(tmp_path, fabric, "gpu02", link="Ethernet", ip_last=2)
    v, rec = _around(_sysfs, srv, cli, "mlx5_2/1", "mlx5_2/1",
                     ["-d", "mlx5_2", "-x", "3", "-b", "--report_gbits"])
    assert rec.bidirectional and v.ok, v.message
    assert v.details["client"]["rcv_moved"] >= v.details["reported_bytes"] > 0
