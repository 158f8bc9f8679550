"""The collect config: file table < flags, and errors that name the field."""

from __future__ import annotations

import re

import pytest

from obsspec.errors import ConfigError
from obsspec.rl.config import RLConfig
from obsspec.rollout.config import load_collect_config


def test_flags_override_the_collect_table(tmp_path):
    config_file = tmp_path / "c.toml"
    config_file.write_text(
        '[collect]\ntasks = "t"\nout = "o"\nconcurrency = 4\nshard_episodes = 2\n'
        "[collect.limits]\nmax_turns = 3\n"
    )
    config = load_collect_config(config_file, {"concurrency": 8, "limits": {"max_tokens": 9}})
    assert config.concurrency == 8 and config.shard_episodes == 2
    assert config.limits.max_turns == 3 and config.limits.max_tokens == 9


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ("shard_episodes = 0", "shard_episodes"),
        ("sharding = 3", "sharding"),
        ('ray_address = "auto"', "(top level)"),  # a cluster address needs workers
        ("[collect.limits]\ntemperature = -1", "limits.temperature"),
    ],
)
def test_bad_values_name_the_field(tmp_path, table, field):
    config_file = tmp_path / "c.toml"
    config_file.write_text(f'[collect]\ntasks = "t"\nout = "o"\n{table}\n')
    with pytest.raises(ConfigError, match=re.escape(f"field '{field}'")) as info:
        load_collect_config(config_file, {})
    assert str(config_file) in str(info.value)


def test_identity_ignores_how_the_work_is_spread():
    a = load_collect_config(None, {"tasks": "t", "out": "o", "concurrency": 1})
    b = load_collect_config(None, {"tasks": "t", "out": "o", "concurrency": 8, "workers": 2})
    c = load_collect_config(None, {"tasks": "t", "out": "o", "seed": 1})
    assert a.identity() == b.identity() != c.identity()


def test_the_network_decides_the_data_and_the_default_keeps_old_identities():
    default = load_collect_config(None, {"tasks": "t", "out": "o"})
    online = load_collect_config(None, {"tasks": "t", "out": "o", "network": "all"})
    assert "network" not in default.identity()  # as runs recorded it before
    assert online.identity() == {**default.identity(), "network": "all"}
    rl = RLConfig(tasks="t", out="o", network="verify")
    assert rl.identity()["network"] == "verify"
    assert "network" not in RLConfig(tasks="t", out="o").identity()
