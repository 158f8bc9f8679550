"""--set KEY=VALUE entries: how keys and values read, how entries merge, and which entry or
flag an error names (obsspec.overrides; the loaders that route them: tests/test_config.py)."""

from __future__ import annotations

import pytest

from obsspec.errors import ConfigError
from obsspec.overrides import Overrides, parse_setting


@pytest.mark.parametrize(
    ("entry", "key", "value"),
    [
        ("grpo.lr=1e-6", ("grpo", "lr"), 1e-6),
        ("grpo.group_size=8", ("grpo", "group_size"), 8),
        ("speculate=true", ("speculate",), True),
        ("concurrency=[1, 2]", ("concurrency",), [1, 2]),
        ('policy="a b"', ("policy",), "a b"),
        ("policy=tinypol", ("policy",), "tinypol"),  # not TOML: the text as typed
        ("out=runs/a", ("out",), "runs/a"),
        ("out=", ("out",), ""),
        ("seed = 3", ("seed",), 3),
        ("name=a=b", ("name",), "a=b"),  # the first '=' ends the key
        ("tag=2024-01-01", ("tag",), "2024-01-01"),  # a date stays text
        ("grpo={lr = 1e-6, clip = 0.2}", ("grpo",), {"lr": 1e-6, "clip": 0.2}),
        ("x=1\ny = 2", ("x",), "1\ny = 2"),  # one value, never a second key
        ('images.map."python:3.13-slim"=obsspec/base', ("images", "map", "python:3.13-slim"),
         "obsspec/base"),
    ],
)  # fmt: skip
def test_keys_are_dotted_and_values_toml_else_text(entry, key, value):
    setting = parse_setting(entry)
    assert (setting.key, setting.value, setting.text) == (key, value, entry)


@pytest.mark.parametrize("entry", ["grpo.lr", "=1", " =1", "a..b=1", ".a=1", "a.=1", "a b=1"])
def test_a_malformed_entry_is_refused_naming_set(entry):
    with pytest.raises(ValueError):
        parse_setting(entry)
    with pytest.raises(ConfigError, match=r"^--set '"):
        Overrides.parse([entry])


def test_entries_merge_in_order_a_table_value_key_by_key():
    sets = Overrides.parse(["grpo.lr=1", "grpo={clip = 0.2}", "grpo.lr=2", "seed=1", "seed=2"])
    assert sets.table() == {"grpo": {"lr": 2, "clip": 0.2}, "seed": 2}


def test_routing_by_the_first_part():
    sets = Overrides.parse(["default_model=m", "grpo.lr=1", "paths.cache_dir=/c"])
    assert sets.only({"default_model", "paths"}).table() == {
        "default_model": "m",
        "paths": {"cache_dir": "/c"},
    }
    assert sets.besides({"default_model", "paths"}).table() == {"grpo": {"lr": 1}}


def test_the_entry_behind_an_error_location():
    sets = Overrides.parse(["grpoo.lr=1", "grpo={lr = 1}", "data=[1]"])
    assert sets.entry_at(("grpoo",)).text == "grpoo.lr=1"  # the unknown table
    assert sets.entry_at(("grpo", "lr")).text == "grpo={lr = 1}"
    assert sets.entry_at(("data", "0")).text == "data=[1]"  # inside the value it gave
    assert sets.entry_at(("grpo", "clip")) is None  # a key of the file, not of --set
    assert sets.entry_at(()) is None  # the whole model (a cross-field check)


def test_a_key_set_by_an_entry_and_a_flag_names_both():
    sets = Overrides.parse(["grpo.lr=1e-6"], flag_for=lambda key: "--lr")
    sets.check_against({"grpo": {"group_size": 8}, "steps": 3}, "[rl] ")  # other keys: fine
    with pytest.raises(ConfigError) as info:
        sets.check_against({"grpo": {"lr": 1e-5}}, "[rl] ")
    assert str(info.value) == "--set grpo.lr=1e-6 and --lr both set [rl] grpo.lr: give one of them"

    table = Overrides.parse(["grpo={lr = 1}"])  # no flag named: still an error
    with pytest.raises(ConfigError, match=r"--set grpo=\{lr = 1\} and a flag both set grpo\.lr"):
        table.check_against({"grpo": {"lr": 2}}, "")
