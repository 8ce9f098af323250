"""The evidence parsers run on hosts: the collector ships with the fabricops.evidence modules it
imports (fabricops.hostside.ship follows its imports), and those run on the standard library alone.

Each shipped tree is copied the way the fabric_monitor role copies it (the files of
``ship.files_for``, under a lib directory) and run with ``python -I -S`` (no site-packages, no user
site, no PYTHONPATH: what a host offers), from a directory outside the checkout.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from captures import read_fixture

from fabricops.evidence import hostfiles, tools
from fabricops.hostside import ship

EVIDENCE = Path(hostfiles.__file__).resolve().parent
MODULES = sorted(f"fabricops.evidence.{p.stem}" for p in EVIDENCE.glob("*.py") if p.stem != "__init__")


def _ship(module: str, lib: Path) -> list[str]:
    files = ship.files_for(module)
    for f in files:
        (lib / f["path"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f["src"], lib / f["path"])
    return [f["path"] for f in files]


def _bare(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-I", "-S", *argv], capture_output=True, text=True, cwd=cwd, timeout=60, check=False
    )


@pytest.mark.parametrize("path", sorted(EVIDENCE.glob("*.py")), ids=lambda p: p.name)
def test_evidence_modules_import_only_the_standard_library_and_each_other(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import"
            names.add(node.module or "")
    for name in names:
        top = name.split(".")[0]
        assert name.startswith("fabricops.evidence") or (
            top in sys.stdlib_module_names and top != "fabricops"
        ), f"{path.name} imports {name}: evidence modules are stdlib-only (they are shipped to hosts)"


def test_the_collector_ships_with_the_evidence_modules_it_imports(tmp_path):
    paths = _ship("fabricops.monitor.collector", tmp_path)
    for needed in (
        "fabricops/evidence/__init__.py",
        "fabricops/evidence/errors.py",
        "fabricops/evidence/hostfiles.py",
        "fabricops/evidence/tools.py",
        "fabricops/monitor/collector.py",
    ):
        assert needed in paths
    assert not [
        p
        for p in paths
        if not p.startswith(("fabricops/evidence/", "fabricops/monitor/")) and p != "fabricops/__init__.py"
    ], paths


_PROGRAM = """
import json, sys
sys.path.insert(0, sys.argv[1])
import fabricops.evidence.hostfiles as h, fabricops.evidence.tools as t, fabricops.evidence.probes as p
assert all(m.__file__.startswith(sys.argv[1]) for m in (h, t, p)), "not the shipped copy"
inputs = json.load(open(sys.argv[2]))
out = {name: getattr(h if name in dir(h) else t, name)(text) for name, text in inputs.items()}
out["parse_sysfs"]["ports"] = {k: dict(v, gid_types={str(i): g for i, g in v["gid_types"].items()})
                               for k, v in out["parse_sysfs"]["ports"].items()}
out["probes"] = sorted(p.PROBES)
print(json.dumps(out, sort_keys=True))
"""


def test_shipped_evidence_parsers_run_on_the_standard_library_alone(tmp_path):
    lib = tmp_path / "usr/local/lib/fabricops"
    for module in MODULES:
        _ship(module, lib)
    assert sorted(p.name for p in (lib / "fabricops/evidence").glob("*.py")) == sorted(
        p.name for p in EVIDENCE.glob("*.py")
    )
    inputs = {
        "parse_nccl_conf": '# x\nNCCL_IB_HCA==mlx5_0:1\nNCCL_SOCKET_IFNAME="eth0"\nNCCL_IB_TC=106\r\n',
        "parse_sysfs": "mlx5_0/ports/1/rate:400 Gb/sec (4X NDR)\nmlx5_0/ports/1/gid_attrs/types/3:RoCE v2\n",
        "parse_ipv4": read_fixture("ip-addr", "debian12-iproute2-6.1-secondary.json"),
        "parse_ethtool_stats": read_fixture("ethtool-stats", "cx4_ubuntu1804_head_ethq8.txt"),
        "parse_nvlink_status": read_fixture("nvidia-smi-nvlink", "v100_two_inactive_links.txt"),
        "parse_nvlink_errors": read_fixture("nvidia-smi-nvlink-errors", "h100_elided_stas00.txt"),
        "parse_mlxconfig_pending": read_fixture("mlxconfig", "cx4_operator_test_extended_query.txt"),
        "parse_mlxfwmanager": read_fixture("mlxfwmanager", "cx7_mlxup_burned_not_running.txt"),
        "parse_dkms_status": read_fixture("dkms-status", "dkms3_i915_sriov_diff_warning.txt"),
        "parse_sb_state": read_fixture("mokutil-sb-state", "enabled.txt"),
    }
    (tmp_path / "in.json").write_text(json.dumps(inputs))
    (tmp_path / "prog.py").write_text(_PROGRAM)
    proc = _bare([str(tmp_path / "prog.py"), str(lib), str(tmp_path / "in.json")], tmp_path)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    # the same answers as the controller's import of the same files
    want = {n: getattr(hostfiles if hasattr(hostfiles, n) else tools, n)(text) for n, text in inputs.items()}
    want["parse_sysfs"] = json.loads(json.dumps(want["parse_sysfs"]))
    assert got.pop("probes")
    assert got == json.loads(json.dumps(want))
    assert got["parse_nccl_conf"] == {
        "NCCL_IB_HCA": "=mlx5_0:1",
        "NCCL_SOCKET_IFNAME": '"eth0"',
        "NCCL_IB_TC": "106\r",
    }


def _tool(path: Path, outputs: dict[str, str]) -> str:
    """A stand-in for a host tool: prints the capture filed under its arguments."""
    for i, text in enumerate(outputs.values()):
        (path.parent / f"{path.name}.{i}").write_text(text)
    cases = "".join(f'  "{a}") cat "{path}.{i}" ;;\n' for i, a in enumerate(outputs))
    path.write_text(f'#!/bin/sh\ncase "$*" in\n{cases}  *) exit 2 ;;\nesac\n')
    path.chmod(0o755)
    return str(path)


def test_shipped_collector_parses_real_captures_on_the_standard_library_alone(tmp_path):
    lib = tmp_path / "usr/local/lib/fabricops"
    _ship("fabricops.monitor.collector", lib)
    sysfs = tmp_path / "sys"
    port = sysfs / "class/infiniband/mlx5_0/ports/1"
    # values of a real port (tests/fixtures/ibstatus/a100_hdr_gpud.txt, mlx5_0 port 1)
    for name, value in {
        "state": "4: ACTIVE",
        "phys_state": "5: LinkUp",
        "rate": "200 Gb/sec (4X HDR)",
        "link_layer": "Ethernet",
        "counters/symbol_error": "3",
    }.items():
        (port / name).parent.mkdir(parents=True, exist_ok=True)
        (port / name).write_text(value + "\n")
    (sysfs / "class/infiniband/mlx5_0/device/net/enp26s0np0").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    config = {
        "host": "gpu04",
        "pcie": False,
        "firmware": False,
        "dkms": False,
        "ethtool": _tool(
            bin_dir / "ethtool",
            {"-S enp26s0np0": read_fixture("ethtool-stats", "cx4_ubuntu1804_head_ethq8.txt")},
        ),
        "nvidia_smi": _tool(
            bin_dir / "nvidia-smi",
            {
                "nvlink --status": read_fixture("nvidia-smi-nvlink", "v100_two_inactive_links.txt"),
                "nvlink -e": read_fixture("nvidia-smi-nvlink-errors", "h100_elided_stas00.txt"),
            },
        ),
    }
    (tmp_path / "collector.json").write_text(json.dumps(config))
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from fabricops.monitor.collector import main; "
        "import fabricops.evidence.tools as t; assert t.__file__.startswith(sys.argv[1]); "
        "sys.exit(main(sys.argv[2:]))"
    )
    proc = _bare(
        ["-c", code, str(lib), "--config", str(tmp_path / "collector.json"), "--sysfs", str(sysfs)], tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for source in ("sysfs", "ethtool", "nvlink_status", "nvlink_errors"):
        assert f'fabricops_collector_source_up{{host="gpu04",source="{source}"}} 1' in out, (
            source,
            proc.stderr,
        )
    assert (
        'fabricops_ib_port_rate_bytes_per_second{device="mlx5_0",host="gpu04",port="1"} 25000000000\n' in out
    )
    assert 'fabricops_ib_port_symbol_errors_total{device="mlx5_0",host="gpu04",port="1"} 3' in out
    assert 'fabricops_nvlink_link_up{gpu="3",host="gpu04",link="' in out
    assert "fabricops_nvlink_replay_errors_total{" in out
