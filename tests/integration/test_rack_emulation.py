"""The emulated rack behaves like the hardware it stands in for (issue 3's acceptance points).

Emulated MLNX_OFED installs from the lab's own distribution; every emulated tool's output reads
with fabricops.parsers; mlnx_qos state is lost on an openibd restart; the switches speak their CLI
to netmiko's own drivers; RoCE bandwidth follows the QoS configuration of hosts and switch ports;
every fault kind is observable the way a user would observe it.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from labtools import ensure_ofed

from fabricops.cli import main as fabricops
from fabricops.parsers import parse, to_data

# about the rack as `lab up` boots it (no OFED, no addresses, switches at factory settings): a fresh
# one, whatever files ran before (tests/integration/conftest.py, fresh_lab)
pytestmark = [pytest.mark.lab, pytest.mark.usefixtures("fresh_lab")]

PFC3 = "0,0,0,1,0,0,0,0"


def run(ssh, host: str, command: str) -> str:
    return ssh(host, command).stdout


def parsed(ssh, host: str, command: str, tool: str) -> dict:
    return to_data(parse(tool, run(ssh, host, command)))


def link(lab: dict, host: str, hca: str) -> dict:
    return next(ln for ln in lab["topology"]["cabling"] if ln["host"] == host and ln["hca"] == hca)


def port_of(lab: dict, host: str, hca: str) -> dict:
    for h in lab["topology"]["hosts"]:
        if h["name"] == host:
            for dev in h["hcas"]:
                if dev["name"] == hca:
                    return dev["ports"][0]
    raise KeyError((host, hca))


def switch_conn(lab: dict, name: str):
    from netmiko import ConnectHandler

    from fabricops_lab import paths

    sw = lab["switches"][name]
    device_type = "mellanox_mlnxos" if sw["os"] == "onyx" else "cumulus_linux"
    conn = ConnectHandler(
        device_type=device_type,
        host=sw["mgmt_ip"],
        username=sw.get("user", "admin"),
        password=Path(sw["password_file"]).read_text().strip(),
        ssh_strict=True,
        system_host_keys=False,
        alt_host_keys=True,
        alt_key_file=str(paths.ssh_dir() / "known_hosts"),
        use_keys=False,
        allow_agent=False,
    )
    if sw["os"] == "onyx":
        conn.enable()  # Onyx logs admin into standard mode (">"); configuration needs enable mode
    return conn


@pytest.fixture(scope="module")
def ofed(lab, ssh):
    """The hosts these tests use, with the emulated OFED installed (gpu02 is left to the role's tests)."""
    for host in ("gpu01", "gpu03", "gpu04"):
        version = ensure_ofed(ssh, lab, host)
    return version


def test_tools_present_after_install_and_parse(ofed, ssh, lab):
    host = "gpu01"
    roce = port_of(lab, host, "mlx5_2")["netdev"]
    info = parsed(ssh, host, "ofed_info -s", "ofed_info")
    assert info == {**info, "installed": True, "version": f"MLNX_OFED_LINUX-{ofed}"}

    devinfo = parsed(ssh, host, "ibv_devinfo", "ibv_devinfo")
    assert [d["hca_id"] for d in devinfo["devices"]] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert devinfo["devices"][0]["ports"][0]["link_layer"] == "InfiniBand"
    assert devinfo["devices"][2]["ports"][0]["link_layer"] == "Ethernet"
    verbose = parsed(ssh, host, "ibv_devinfo -v -d mlx5_0", "ibv_devinfo")
    assert verbose["devices"][0]["ports"][0]["state"].startswith("PORT_ACTIVE")

    ibstat = parsed(ssh, host, "ibstat", "ibstat")
    rates = {ca["name"]: ca["ports"][0]["rate"] for ca in ibstat["cas"]}
    assert rates == {"mlx5_0": 400, "mlx5_1": 400, "mlx5_2": 400, "mlx5_3": 400}
    assert all(ca["ports"][0]["state"] == "Active" for ca in ibstat["cas"])

    assert parsed(ssh, host, "ibstatus", "ibstatus")
    qos = parsed(ssh, host, f"mlnx_qos -i {roce}", "mlnx_qos")
    assert qos["trust"] == "pcp" and qos["pfc_enabled"] == [0] * 8
    assert parsed(ssh, host, "ibqueryerrors", "ibqueryerrors") is not None
    counters = parsed(ssh, host, "perfquery -x", "perfquery")
    assert counters

    topo = parsed(ssh, host, "nvidia-smi topo -m", "nvidia-smi-topo")
    gpus = [d for d in topo["devices"] if d.startswith("GPU")]
    assert len(gpus) == 8 and all(topo["matrix"]["GPU0"][g] == "NV18" for g in gpus[1:])
    nvlink = parsed(ssh, host, "nvidia-smi nvlink --status", "nvidia-smi-nvlink")
    assert all(ln["active"] and ln["speed_gb_s"] == 26.562 for g in nvlink["gpus"] for ln in g["links"])
    query = parsed(ssh, host, "nvidia-smi --query-gpu=index,name,uuid --format=csv", "nvidia-smi-query")
    assert len(query["rows"]) == 8 and query["rows"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert parsed(ssh, host, "nvidia-smi -q", "nvidia-smi-q")


def test_mlnx_qos_state_is_lost_on_openibd_restart(ofed, ssh, lab):
    host = "gpu04"
    roce = port_of(lab, host, "mlx5_2")["netdev"]
    run(ssh, host, f"mlnx_qos -i {roce} --trust dscp --pfc {PFC3}")
    qos = parsed(ssh, host, f"mlnx_qos -i {roce}", "mlnx_qos")
    assert qos["trust"] == "dscp" and qos["pfc_enabled"] == [0, 0, 0, 1, 0, 0, 0, 0]
    out = run(ssh, host, "/etc/init.d/openibd restart")
    assert "Loading HCA driver" in out
    qos = parsed(ssh, host, f"mlnx_qos -i {roce}", "mlnx_qos")
    assert qos["trust"] == "pcp" and qos["pfc_enabled"] == [0] * 8


def test_onyx_switch_cli_over_netmiko(lab):
    conn = switch_conn(lab, "leaf-onyx")
    try:
        error = conn.send_command("show no-such-thing")
        assert "% Unrecognized command" in error
        conn.send_config_set(
            [
                "dcb priority-flow-control enable force",
                "dcb priority-flow-control priority 3 enable",
                "interface ethernet 1/4 dcb priority-flow-control mode on force",
            ]
        )
        pfc = to_data(parse("onyx-pfc", conn.send_command("show dcb priority-flow-control | json-print")))
        assert 3 in pfc["priorities_enabled"]
        conn.save_config()
        running = to_data(parse("onyx-running-config", conn.send_command("show running-config")))
        assert 3 in running["pfc_priorities"]
    finally:
        conn.disconnect()


def test_cumulus_switch_nvue_over_netmiko(lab):
    conn = switch_conn(lab, "leaf-cumulus")
    try:
        assert "Error" in conn.send_command("nv frobnicate")
        conn.send_command("nv set qos roce mode lossless")
        diff = to_data(parse("nvue-config-diff", conn.send_command("nv config diff")))
        assert not diff["empty"]
        conn.send_command("nv config apply -y")
        roce = to_data(parse("nvue-qos-roce", conn.send_command("nv show qos roce -o json")))
        assert roce["mode"] == "lossless"
        assert to_data(parse("nvue-config-diff", conn.send_command("nv config diff")))["empty"]
    finally:
        conn.disconnect()


def _onyx_port_commands(port: str, pfc: bool) -> list[str]:
    iface = "interface ethernet " + port.removeprefix("Eth")
    return [
        f"{iface} qos trust L3",
        f"{iface} {'' if pfc else 'no '}dcb priority-flow-control mode on force".replace("  ", " "),
        f"{iface} traffic-class 3 congestion-control ecn minimum-absolute 150 maximum-absolute 1500",
    ]


def _configure_host_roce(ssh, lab, host: str) -> None:
    port = port_of(lab, host, "mlx5_2")
    dev = port["netdev"]
    run(
        ssh,
        host,
        f"mlnx_qos -i {dev} --trust dscp --pfc {PFC3} >/dev/null && "
        f"echo 1 > /sys/class/net/{dev}/ecn/roce_np/enable/3 && "
        f"echo 1 > /sys/class/net/{dev}/ecn/roce_rp/enable/3 && "
        "echo 106 > /sys/class/infiniband/mlx5_2/tc/1/traffic_class",
    )


def _write_bw(ssh, lab, client: str, server: str) -> tuple[int, dict, str]:
    """ib_write_bw between two lab hosts on mlx5_2 (a real client/server exchange)."""
    server_addr = port_of(lab, server, "mlx5_2")["address"]
    done: dict = {}

    def serve():
        done["server"] = ssh(server, "ib_write_bw -d mlx5_2 --report_gbits -q 4", check=False, timeout=60)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        for _ in range(50):  # the server binds its port before it prints its banner
            if ssh(server, "ss -ltn | grep -q ':18515 '", check=False).returncode == 0:
                break
        proc = ssh(client, f"ib_write_bw -d mlx5_2 --report_gbits -q 4 -s 8388608 {server_addr}", check=False)
    finally:
        thread.join(timeout=60)
    record = to_data(parse("perftest-bw", proc.stdout)) if proc.returncode == 0 else {}
    return proc.returncode, record, proc.stdout + proc.stderr


def _counter(ssh, host: str, name: str) -> int:
    return int(run(ssh, host, f"cat /sys/class/infiniband/mlx5_2/ports/1/hw_counters/{name}").strip())


def test_roce_bandwidth_follows_switch_and_host_qos(ofed, ssh, lab):
    client, server = "gpu01", "gpu04"
    for host in (client, server):
        _configure_host_roce(ssh, lab, host)
    ports = [link(lab, h, "mlx5_2")["switch_port"] for h in (client, server)]
    assert {link(lab, h, "mlx5_2")["switch"] for h in (client, server)} == {"leaf-onyx"}

    conn = switch_conn(lab, "leaf-onyx")
    try:
        conn.send_config_set(
            ["dcb priority-flow-control enable force", "dcb priority-flow-control priority 3 enable"]
            + [c for p in ports for c in _onyx_port_commands(p, pfc=True)]
        )
        rc, good, out = _write_bw(ssh, lab, client, server)
        assert rc == 0, out
        line_rate = port_of(lab, client, "mlx5_2")["rate_gbps"]
        assert good["units"] == "Gb/sec"
        assert good["results"][-1]["bw_average"] >= 0.9 * line_rate, out

        # One switch port loses PFC on the lossless priority: the path is lossy now.
        retrans = _counter(ssh, client, "out_of_sequence") + _counter(ssh, server, "out_of_sequence")
        conn.send_config_set(_onyx_port_commands(ports[1], pfc=False))
        rc, bad, out = _write_bw(ssh, lab, client, server)
        assert rc == 0, out
        assert bad["results"][-1]["bw_average"] < 0.7 * line_rate, out
        after = _counter(ssh, client, "out_of_sequence") + _counter(ssh, server, "out_of_sequence")
        assert after > retrans

        conn.send_config_set(_onyx_port_commands(ports[1], pfc=True))
        rc, fixed, out = _write_bw(ssh, lab, client, server)
        assert rc == 0 and fixed["results"][-1]["bw_average"] >= 0.9 * line_rate, out
    finally:
        conn.disconnect()


def _fault(*argv: str) -> None:
    assert fabricops(["lab", "fault", *argv]) == 0


FAULT_HOST = "gpu03"


@pytest.mark.parametrize(
    ("kind", "args", "command", "tool", "check"),
    [
        ("port-down", ["mlx5_0"], "ibstat mlx5_0", "ibstat",
         lambda r: r["cas"][0]["ports"][0]["state"] == "Down"),
        ("port-width", ["mlx5_0", "2X"], "ibstat mlx5_0", "ibstat",
         lambda r: r["cas"][0]["ports"][0]["rate"] == 200),
        ("nvlink-inactive", ["0", "3"], "nvidia-smi nvlink --status -i 0", "nvidia-smi-nvlink",
         lambda r: [ln["active"] for ln in r["gpus"][0]["links"]].count(False) == 1),
        ("gpu-missing", ["5"], "nvidia-smi --query-gpu=index,uuid --format=csv", "nvidia-smi-query",
         lambda r: len(r["rows"]) == 7),
        ("wrong-firmware", ["mlx5_1", "28.35.1012"], "ibstat mlx5_1", "ibstat",
         lambda r: r["cas"][0]["firmware_version"] == "28.35.1012"),
        ("wrong-ofed", ["5.8-1.0.1.1"], "ofed_info -s", "ofed_info",
         lambda r: r["version"] == "MLNX_OFED_LINUX-5.8-1.0.1.1"),
    ],
)
def test_host_fault_is_observable_and_clears(ofed, ssh, kind, args, command, tool, check):
    healthy = parsed(ssh, FAULT_HOST, command, tool)
    assert not check(healthy), f"{kind}: the healthy host already looks faulty"
    _fault(FAULT_HOST, kind, *args)
    try:
        faulty = parsed(ssh, FAULT_HOST, command, tool)
        assert check(faulty), kind
    finally:
        _fault("clear", FAULT_HOST)
    assert parsed(ssh, FAULT_HOST, command, tool) == healthy


def _link_downed(ssh) -> int:
    record = parsed(ssh, FAULT_HOST, "perfquery -x", "perfquery")
    values = [v for k, v in _flatten(record) if "LinkDowned" in k]
    assert values, record
    return values[0]


def test_flapping_fault_raises_link_downed(ofed, ssh):
    before = _link_downed(ssh)
    _fault(FAULT_HOST, "flapping", "mlx5_0")
    try:
        during = _link_downed(ssh)
        assert during >= before + 5  # the 24 h flap threshold trusted health checks use
    finally:
        _fault("clear", FAULT_HOST)
    # Error counters are cumulative, as on hardware: clearing the cause does not zero them;
    # the operator resets them once the cable is replaced (perfquery -R).
    assert _link_downed(ssh) == during
    ssh(FAULT_HOST, "perfquery -R -C mlx5_0 -P 1")
    assert _link_downed(ssh) == 0


def _flatten(data, prefix=""):
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _flatten(v, f"{prefix}.{k}")
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _flatten(v, f"{prefix}[{i}]")
    elif isinstance(data, int | float) and not isinstance(data, bool):
        yield prefix, data


def test_host_unreachable_fault(ofed, ssh):
    _fault(FAULT_HOST, "host-unreachable")
    try:
        proc = ssh(FAULT_HOST, "true", check=False, timeout=30)
        assert proc.returncode == 255
    finally:
        _fault("clear", FAULT_HOST)
    assert ssh(FAULT_HOST, "true").returncode == 0


def test_switch_session_drop_fault(lab):
    _fault("leaf-onyx", "session-drop", "2")
    try:
        conn = switch_conn(lab, "leaf-onyx")
        with pytest.raises(Exception):  # noqa: B017 - netmiko raises OSError/EOFError/timeout types
            conn.send_config_set(["lldp", "no lldp", "lldp", "no lldp"])
            conn.send_command("show running-config")
    finally:
        _fault("clear", "leaf-onyx")
    conn = switch_conn(lab, "leaf-onyx")
    try:
        assert "% Unrecognized" not in conn.send_command("show running-config")
    finally:
        conn.disconnect()
