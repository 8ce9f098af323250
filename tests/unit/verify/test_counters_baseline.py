"""``fabricops verify --counters-baseline``: counters reset since the baseline are judged by their
absolute values (never by a negative difference), and a baseline holding anything but counter
readings is invalid input (exit 5, one line naming host, device and counter) before anything runs."""
# ruff: noqa: F811  -- the fixtures are imported from verify_emu and used as arguments

from __future__ import annotations

import json

import pytest
from verify_emu import SWITCH_LAYERS, collect, emu, hostvars  # noqa: F401

from fabricops import cli
from fabricops.errors import EXIT_BADINPUT, BadInput
from fabricops.verify import counters, hostchecks
from fabricops.verify.cli import load_baseline
from fabricops.verify.engine import baseline_from_report
from fabricops.verify.expect import host_expect
from fabricops.verify.report import SCHEMA
from fabricops.verify.result import FAIL, PASS


def _errors(emu, hostvars, collect, base):
    exp = host_expect(
        "gpu03", hostvars, switch_link_layers=SWITCH_LAYERS, skip=["roce_qos"], counter_baseline=base
    )
    res = [r for r in hostchecks.evaluate(exp, collect(exp)) if r.check == "error_counters"]
    return {r.device: r for r in res}


def test_counters_reset_since_the_baseline_are_judged_by_their_absolute_values(emu, hostvars, collect):
    """The audit's case: a reboot reset the counters, then 500 symbol errors and 8 link-downs; the
    baseline held 1000 and 20. The difference (-500, -12) must not pass."""
    emu.port("mlx5_0").update(link_flaps=8, symbol_errors=500)
    emu.sync()
    base = {"mlx5_0/1": {"SymbolErrorCounter": 1000, "LinkDownedCounter": 20}}
    r = _errors(emu, hostvars, collect, base)["mlx5_0/1"]
    assert r.status == FAIL
    assert r.measured == {"SymbolErrorCounter": 500, "LinkDownedCounter": 8}
    assert "SymbolErrorCounter 500 (limit" in r.message and "-500" not in r.message
    assert "counters reset since the baseline" in r.message
    assert r.details["counters_reset_since_baseline"] is True
    assert r.details["absolute"] == {"SymbolErrorCounter": 500, "LinkDownedCounter": 8}
    assert r.details["flapping"] is True


def test_one_counter_below_its_baseline_means_the_port_was_reset(emu, hostvars, collect):
    """Symbol errors above the baseline but link-downs below it: the port's counters were reset, so
    the symbol error difference (50 - 40) understates the errors; judge the absolute 50."""
    emu.port("mlx5_0").update(link_flaps=1, symbol_errors=50)
    emu.sync()
    base = {"mlx5_0/1": {"SymbolErrorCounter": 40, "LinkDownedCounter": 3}}
    r = _errors(emu, hostvars, collect, base)["mlx5_0/1"]
    assert r.status == FAIL
    assert r.measured["SymbolErrorCounter"] == 50
    assert "counters reset since the baseline" in r.message


def test_an_increase_since_the_baseline_is_still_a_difference(emu, hostvars, collect):
    emu.port("mlx5_0").update(link_flaps=8, symbol_errors=500)
    emu.sync()
    base = {"mlx5_0/1": {"SymbolErrorCounter": 500, "LinkDownedCounter": 8}}
    r = _errors(emu, hostvars, collect, base)["mlx5_0/1"]
    assert r.status == PASS and r.measured == {"SymbolErrorCounter": 0, "LinkDownedCounter": 0}
    assert r.message.endswith("(since the baseline)")
    assert r.details["counters_reset_since_baseline"] is False


def test_increase_since():
    assert counters.increase_since({"a": 5, "b": 2}, {"a": 3, "b": 2}) == ({"a": 2, "b": 0}, False)
    assert counters.increase_since({"a": 5, "b": 1}, {"a": 3, "b": 2}) == ({"a": 5, "b": 1}, True)
    assert counters.increase_since({"a": 5, "b": None}, None) == ({"a": 5, "b": None}, False)


def _report(value) -> dict:
    return {
        "schema": SCHEMA,
        "results": [
            {
                "check": "error_counters",
                "host": "gpu03",
                "device": "mlx5_0/1",
                "details": {"absolute": {"SymbolErrorCounter": value, "LinkDownedCounter": 2}},
            }
        ],
    }


#: JSON text of a value an edited baseline may hold -> what the refusal says
BAD = {
    "NaN": "NaN is not an integer counter value",
    "Infinity": "Infinity is not an integer counter value",
    "1e18": "1e+18 is not an integer counter value",
    "1.5": "1.5 is not an integer counter value",
    "-1": "-1 is negative",
    '"x"': '"x" is not an integer counter value',
    '"12"': '"12" is not an integer counter value',
    "true": "true is not an integer counter value",
    "[1]": "[1] is not an integer counter value",
    str(2**64): f"{2**64} does not fit a 64-bit counter",
}


@pytest.mark.parametrize("text", list(BAD), ids=list(BAD))
def test_a_baseline_value_that_is_not_a_counter_reading_is_invalid_input(tmp_path, text):
    path = tmp_path / "base.json"
    path.write_text(
        json.dumps(_report(0)).replace('"SymbolErrorCounter": 0', f'"SymbolErrorCounter": {text}')
    )
    with pytest.raises(BadInput) as exc:
        load_baseline(path)
    msg = str(exc.value)
    assert exc.value.exit_status == EXIT_BADINPUT
    assert msg.startswith(f"--counters-baseline {path}: gpu03 mlx5_0/1 SymbolErrorCounter: {BAD[text]}")
    assert "\n" not in msg


def test_valid_baseline_values_load():
    top = counters.COUNTER_MAX
    assert baseline_from_report(_report(top)) == {
        "gpu03": {"mlx5_0/1": {"SymbolErrorCounter": top, "LinkDownedCounter": 2}}
    }
    assert baseline_from_report(_report(None)) == {"gpu03": {"mlx5_0/1": {"LinkDownedCounter": 2}}}


def test_the_cli_refuses_the_baseline_before_contacting_any_host(tmp_path, capsys, monkeypatch):
    inv = tmp_path / "inv.yml"
    inv.write_text("gpu_hosts:\n  hosts:\n    h1: {ansible_connection: local}\n")
    base = tmp_path / "base.json"
    base.write_text(json.dumps(_report(0)).replace('"SymbolErrorCounter": 0', '"SymbolErrorCounter": NaN'))

    def no_fabric(*_a, **_k):
        raise AssertionError("a host was contacted")

    monkeypatch.setattr("fabricops.verify.transport.Fabric", no_fabric)
    rc = cli.main(["verify", "-i", str(inv), "--counters-baseline", str(base)])
    err = capsys.readouterr().err
    assert rc == EXIT_BADINPUT, err
    assert len(err.strip().splitlines()) == 1
    assert "gpu03 mlx5_0/1 SymbolErrorCounter: NaN is not an integer counter value" in err
