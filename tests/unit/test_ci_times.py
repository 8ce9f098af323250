"""The run's time table (tests/ci_times.py): phases, and how busy the CPU was during each."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("ci_times", Path(__file__).resolve().parents[1] / "ci_times.py")
ci_times = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(ci_times)


def _cpu_line(t: float, busy: int, idle: int, iowait: int = 0) -> str:
    # EPOCH cpu user nice system idle iowait irq softirq steal guest guest_nice
    return f"{t} cpu {busy} 0 0 {idle} {iowait} 0 0 0 0 0"


def test_busy_percent_counts_idle_and_iowait_as_not_busy(tmp_path):
    log = tmp_path / "cpu.log"
    log.write_text(
        "\n".join(
            [
                _cpu_line(100.0, 0, 0),
                _cpu_line(105.0, 500, 500),  # 50 % busy
                _cpu_line(110.0, 500, 1000, 500),  # idle and waiting on I/O: 0 %
                "garbage line",
                _cpu_line(115.0, 1500, 1000, 500),  # 100 %
            ]
        )
    )
    samples = ci_times.cpu_samples(log)
    assert len(samples) == 4
    assert ci_times.busy_percent(samples, 100.0, 105.0) == 50.0
    assert ci_times.busy_percent(samples, 105.0, 110.0) == 0.0
    assert ci_times.busy_percent(samples, 110.0, 115.0) == 100.0
    # a phase between samples: the samples around it
    assert ci_times.busy_percent(samples, 106.0, 109.0) == 0.0
    assert ci_times.busy_percent(samples[:1], 100.0, 105.0) is None


def test_the_table_has_a_cpu_column(tmp_path, capsys):
    phases = tmp_path / "phases.tsv"
    phases.write_text("unit\t100.0\t110.0\tok\n")
    cpu = tmp_path / "cpu.log"
    cpu.write_text("\n".join([_cpu_line(100.0, 0, 0), _cpu_line(110.0, 300, 700)]))
    assert ci_times.main([str(phases), "--cpu", str(cpu)]) == 0
    out = capsys.readouterr().out
    assert "cpu busy" in out
    assert next(ln for ln in out.splitlines() if ln.startswith("unit")).split()[3] == "30%"
