"""The rl config and run directory, without Ray or engines."""

from __future__ import annotations

import json

import pytest

from obsspec.errors import ConfigError
from obsspec.rl.config import load_rl_config
from obsspec.rl.run_files import METRIC_KEYS, RLRunDir
from tests.cli.test_cli import obsspec
from tests.rl.conftest import EXAMPLE


def test_the_examples_load(tmp_path):
    config = load_rl_config(EXAMPLE, {"tasks": "t", "out": tmp_path})
    assert config.grpo.group_size == 4 and config.steps == 3
    gpu = load_rl_config(EXAMPLE.with_name("rl_gpu.toml"), {"tasks": "t", "out": tmp_path})
    assert gpu.placement.gpus_requested == 8
    real = load_rl_config(
        EXAMPLE.with_name("rl_cpu_20_steps.toml"), {"tasks": "t", "out": tmp_path}
    )
    assert real.steps == 20 and real.cotrain.lr == 1e-4


def test_unknown_keys_are_named(tmp_path):
    config = tmp_path / "rl.toml"
    config.write_text("[rl.grpo]\ngroup_size = 4\nclip_hgih = 0.3\n")
    with pytest.raises(ConfigError, match=r"grpo\.clip_hgih"):
        load_rl_config(config, {"tasks": "t", "out": tmp_path})
    result = obsspec("rl", "--config", str(config), "--tasks", "t", "--out", str(tmp_path / "o"))
    assert result.returncode == 1 and "clip_hgih" in result.stderr
    assert "Traceback" not in result.stderr


def test_required_and_contradictory_settings(tmp_path):
    with pytest.raises(ConfigError, match="--tasks is required"):
        load_rl_config(None, {"out": tmp_path})
    with pytest.raises(ConfigError, match="contradict"):
        load_rl_config(None, {"tasks": "t", "out": tmp_path, "resume": True, "overwrite": True})


def test_a_run_directory_is_not_reused_by_accident(tmp_path):
    run = RLRunDir(tmp_path / "out")
    with pytest.raises(ConfigError, match="holds no rl run"):
        run.prepare(resume=True, overwrite=False)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "something").write_text("x")
    with pytest.raises(ConfigError, match="not empty"):
        run.prepare(resume=False, overwrite=False)
    run.prepare(resume=False, overwrite=True)
    assert not (tmp_path / "out" / "something").exists()


def test_checkpoints_appear_whole_and_old_ones_go(tmp_path):
    run = RLRunDir(tmp_path)
    identity = {"seed": 1}
    for step in (1, 2, 3):
        tmp = run.checkpoint_tmp(step)
        (tmp / "policy").mkdir()
        run.commit_checkpoint(tmp, step, {"step": step, "identity": identity}, keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-00000002", "step-00000003"]
    assert run.resume_point(identity) == (3, tmp_path / "checkpoints" / "step-00000003")
    run.checkpoint_tmp(4)  # a checkpoint being written when the run died
    assert run.resume_point(identity)[0] == 3
    with pytest.raises(ConfigError, match="seed: 1 there, 2 now"):
        run.resume_point({"seed": 2})


def test_metrics_rows_after_the_checkpoint_are_dropped_on_resume(tmp_path):
    run = RLRunDir(tmp_path)
    for step in (1, 2, 3):
        run.append_metrics({"step": step, "reward_mean": float("nan")})
    run.keep_metrics_through(2)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"step": 1, "reward_mean": None}, {"step": 2, "reward_mean": None}]
    assert "step" in METRIC_KEYS and len(METRIC_KEYS) == 13
