"""Every option that is rendered into a switch CLI line refuses shell/CLI metacharacters.

Each bad value goes through the action plugin's argument validation (Ansible's ArgumentSpecValidator)
and then the real run against the emulated switch engines: it must be refused with a clear message
and the emulated switch must receive no command at all.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from fabricops.errors import FabricopsError
from fabricops.roce.runner import run
from fabricops.switch.knobs import UnsafeLine, check_line

_spec = importlib.util.spec_from_file_location(
    "action_roce_switch", Path(__file__).resolve().parents[3] / "plugins" / "action" / "roce_switch.py"
)
action = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(action)

BAD = [
    "30\nnv set system hostname x",
    "3;reboot",
    "$(reboot)",
    "`reboot`",
    "3'",
    '3"',
    "../3",
    "3\0",
    "３",
    "3\r",
]
ROCE = {"lossless_priority": 3, "dscp": 26}


def _options(rack, value):
    """One task-argument dict per rendered option, with ``value`` planted in it."""
    port = "Eth1/1" if rack.os == "onyx" else "swp1"
    return {
        "ports": {"ports": [port + value]},
        "cabling": {"cabling": [{"host": "h", "switch": rack.switch.name, "switch_port": port + value}]},
        "confirm_timeout": {"confirm_timeout": value},
        "ets_lossless_percent": {"ets_lossless_percent": value},
        "buffer_pool": {"buffer_pool": "lossless" + value},
        "lossless_priority": {"roce": {**ROCE, "lossless_priority": value}},
        "dscp": {"roce": {**ROCE, "dscp": "26" + value}},
        "ecn.min_kb": {"roce": {**ROCE, "ecn": {"min_kb": "150" + value}}},
        "state": {"state": "merged" + value},
    }


@pytest.mark.parametrize("value", BAD, ids=[repr(v) for v in BAD])
def test_every_rendered_option_refuses(rack, value):
    for name, task_args in _options(rack, value).items():
        task_args.setdefault("roce", ROCE)
        task_args.setdefault(
            "ports", [] if "cabling" in task_args else ["Eth1/1" if rack.os == "onyx" else "swp1"]
        )
        with pytest.raises((ValueError, FabricopsError)) as err:
            args = action.validate_args(task_args)
            run(
                switch=rack.switch.name,
                os_name=rack.os,
                state=args["state"],
                roce=args["roce"],
                ports=args["ports"],
                cabling=args["cabling"],
                ets_lossless_percent=args["ets_lossless_percent"],
                buffer_pool=args["buffer_pool"],
                confirm_timeout=args["confirm_timeout"],
                connector=rack.connect,
            )
        msg = str(err.value)
        assert msg and "\n" not in msg.replace("\\n", ""), (name, msg)
        assert rack.log == [], f"{name}={value!r} reached the switch: {rack.log}"


def test_bools_from_extra_vars_are_bools():
    args = action.validate_args({"save": "false", "pfc_watchdog": "no", "discard_pending": "yes"})
    assert args["save"] is False and args["pfc_watchdog"] is False and args["discard_pending"] is True


@pytest.mark.parametrize(
    "line", ["nv set a\nnv set b", "a;b", "a $(b)", "a `b`", "a 'b'", "a ..", "a\0", "é"]
)
def test_renderer_last_line_of_defence(line):
    with pytest.raises(UnsafeLine, match="refusing to send"):
        check_line(line)
    assert check_line("interface ethernet 1/1-1/2 traffic-class 3 dcb ets wrr 50")
    assert check_line("nv set interface swp1-2,swp4 qos pfc-watchdog")
