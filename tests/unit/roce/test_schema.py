"""fabricops.model.roce_schema declares what fabricops.model.roce validates, defaults and returns."""

from __future__ import annotations

import dataclasses

import pytest

from fabricops.model import roce as model
from fabricops.model import roce_schema as schema


def test_defaults_are_the_declared_defaults():
    # NVIDIA's lossless defaults, the values the model had before the declaration moved
    assert model.DEFAULTS == {
        "lossless": True,
        "lossless_priority": 3,
        "dscp": 26,
        "cnp_dscp": 48,
        "cnp_priority": 6,
        "trust": "dscp",
        "ecn": {"min_kb": 150, "max_kb": 1500, "probability": 100, "other_priorities": "enabled"},
        "cable_length_m": None,
        "roce_mode": 2,
        "dscp_map": {},
    }
    assert schema.defaults() is not schema.defaults()  # a fresh copy: callers may mutate it


def test_every_declared_field_is_a_config_attribute_and_in_to_data():
    top = {f.name for f in schema.FIELDS if not f.group}
    assert top | {"ecn"} == {f.name for f in dataclasses.fields(model.RoceConfig)}
    assert {f.name for f in schema.FIELDS if f.group == "ecn"} == {
        f.name for f in dataclasses.fields(model.EcnConfig)
    }
    data = model.validate({"cable_length_m": 5, "dscp_map": {46: 5}}).to_data()
    assert set(data) == set(schema.top_keys()) | {"derived"}
    assert data["cable_length_m"] == 5 and data["dscp_map"] == {"46": 5}
    assert data["ecn"] == model.DEFAULTS["ecn"]


@pytest.mark.parametrize("f", [f for f in schema.FIELDS if f.lo is not None], ids=lambda f: f.path)
def test_every_declared_range_is_enforced(f):
    """One past each end of each declared range is refused with the field's path in one sentence."""
    def data(value):
        if f.type == "map":
            return {"dscp_map": {40: value}}
        if f.group:
            return {f.group: {f.name: value}}
        return {f.name: value}

    for bad in (f.lo - 1, f.hi + 1):
        with pytest.raises(model.RoceConfigError) as err:
            model.validate(data(bad))
        msg = str(err.value)
        assert msg.startswith("fabricops_roce.") and msg.endswith(".") and msg.count(". ") == 0
        assert f"from {f.lo} to {f.hi}" in msg


@pytest.mark.parametrize("f", [f for f in schema.FIELDS if f.choices], ids=lambda f: f.path)
def test_every_declared_choice_is_enforced(f):
    data = {f.group: {f.name: "nope"}} if f.group else {f.name: "nope"}
    with pytest.raises(model.RoceConfigError, match=f"fabricops_roce.{f.path} is 'nope'; it must be one of"):
        model.validate(data)
    for choice in f.choices:
        good = {f.group: {f.name: choice}} if f.group else {f.name: choice}
        model.validate(good)


def test_unknown_keys_list_the_declared_keys_in_order():
    with pytest.raises(model.RoceConfigError) as err:
        model.validate({"dcsp": 26})
    assert str(err.value) == (
        "fabricops_roce has unknown key(s) dcsp; allowed: lossless, lossless_priority, dscp, cnp_dscp, "
        "cnp_priority, trust, ecn, cable_length_m, roce_mode, dscp_map."
    )


def test_switch_settings_are_the_roce_switch_options():
    spec = schema.switch_argument_spec()
    assert spec == {
        "pfc_watchdog": {"type": "bool", "default": True},
        "ets_lossless_percent": {"type": "int", "default": 50},
        "buffer_pool": {
            "type": "str",
            "choices": ["default", "lossless", "lossless-single-ipool"],
            "default": "default",
        },
    }
    assert [f.role_var for f in schema.SWITCH_SETTINGS] == [
        "roce_switch_pfc_watchdog",
        "roce_switch_ets_lossless_percent",
        "roce_switch_buffer_pool",
    ]


def test_each_cross_field_rule_fires():
    cases = [
        {"ecn": {"min_kb": 2000, "max_kb": 1000}},
        {"cnp_priority": 3},
        {"cnp_dscp": 26},
        {"dscp_map": {26: 4}},
        {"dscp_map": {48: 5}},
    ]
    assert len(cases) == len(schema.RULES)
    for data, (_text, rule) in zip(cases, schema.RULES, strict=True):
        with pytest.raises(model.RoceConfigError):
            model.validate(data)
        # and it is this rule that refuses it
        values = {**schema.defaults(), **data}
        values["ecn"] = {**schema.defaults()["ecn"], **data.get("ecn", {})}
        with pytest.raises(model.RoceConfigError):
            rule(values)
