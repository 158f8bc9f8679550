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
    assert real.steps == 20 and not real.grpo.reward_requires_done
    # the two engines on their own cores; the world model's engine settings reach the session
    assert real.engine.cpu_cores == "0" and real.speculation.wm_cpu_cores == "1"
    assert real.session_settings().speculation.wm_cpu_cores == "1"


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
    (tmp_path / "out" / "rl-run.json").write_text('{"steps_done": 1}')  # an earlier rl run
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


def test_metrics_rows_and_episodes_after_the_checkpoint_are_dropped_on_resume(tmp_path):
    from obsspec.rollout.dataset import trajectory_row
    from obsspec.runs import read_rows
    from obsspec.trajectory import Trajectory

    run = RLRunDir(tmp_path)
    for step in (1, 2, 3):
        episode = Trajectory(f"task-{step}", "hash", "policy", seed=step, prompt_ids=[1, 2])
        row = trajectory_row(episode, run_id="rl", episode_index=step, policy="p", attempts=1)
        run.write_episodes(step, [row])
        run.append_metrics({"step": step, "reward_mean": float("nan")})
    (tmp_path / "data" / ".step-00000004.parquet.tmp").write_bytes(b"half a shard")
    run.write_manifest({"status": "failed"})
    run.prepare(resume=True, overwrite=False)  # what a resumed run does first
    run.keep_steps_through(2)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"step": 1, "reward_mean": None}, {"step": 2, "reward_mean": None}]
    assert "step" in METRIC_KEYS and len(set(METRIC_KEYS)) == len(METRIC_KEYS)
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [
        "step-00000001.parquet",
        "step-00000002.parquet",
    ]
    assert [r["task_id"] for r in read_rows(tmp_path)] == ["task-1", "task-2"]


def test_trainer_ranks_follow_the_trainer_gpus_and_take_one_each():
    from obsspec.rl.config import PlacementSettings

    assert PlacementSettings().policy_ranks == 1
    assert PlacementSettings(trainer_gpus=4).policy_ranks == 4
    assert PlacementSettings(trainer_ranks=2).policy_ranks == 2  # CPUs (gloo)
    assert PlacementSettings(trainer_ranks=4, trainer_gpus=4).policy_ranks == 4
    with pytest.raises(ValueError, match="one whole GPU per rank"):
        PlacementSettings(trainer_ranks=2, trainer_gpus=4)
    with pytest.raises(ValueError, match="one process uses one GPU"):
        PlacementSettings(trainer_ranks=1, trainer_gpus=2)


def test_rl_judges_the_world_model_on_recent_outcomes_and_keeps_trying(tmp_path):
    gate = load_rl_config(None, {"tasks": "t", "out": tmp_path}).session_settings().speculation.gate
    assert gate.hit_window and gate.explore_every  # it is co-trained: old misses go stale


def test_the_old_flat_world_model_keys_load_with_a_warning_naming_the_new_key(tmp_path):
    from obsspec.config import ConfigDeprecationWarning

    old = tmp_path / "old.toml"
    old.write_text(
        '[rl]\nworld_model = "wm"\nwm_kv_cache_gb = 2.0\nwm_cpu_cores = "1"\n'
        "wm_max_tokens = 4096\nthreshold = 0.7\n"
    )
    with pytest.warns(ConfigDeprecationWarning) as caught:
        config = load_rl_config(old, {"tasks": "t", "out": tmp_path})
    messages = {str(w.message) for w in caught}
    assert "[rl] wm_kv_cache_gb is deprecated; use [rl.speculation] wm_kv_cache_gb" in messages
    assert len(messages) == 5
    new = tmp_path / "new.toml"
    new.write_text(
        '[rl.speculation]\nworld_model = "wm"\nwm_kv_cache_gb = 2.0\nwm_cpu_cores = "1"\n'
        "wm_max_tokens = 4096\nthreshold = 0.7\n"
    )
    assert load_rl_config(new, {"tasks": "t", "out": tmp_path}) == config
    # the run's identity is what it was, so that runs made before the move resume
    assert config.identity()["world_model"] == "wm"
    assert load_rl_config(None, {"tasks": "t", "out": tmp_path}).identity()["world_model"] is None
    # a speculation table given in part keeps rl's own defaults for the rest
    assert config.speculation.gate.hit_window == 20 and config.speculation.gate.explore_every == 5

    result = obsspec("rl", "--config", str(old), "--tasks", str(tmp_path / "none"),
                     "--out", str(tmp_path / "o"))  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr
    warning = "warning: [rl] world_model is deprecated; use [rl.speculation] world_model"
    assert result.stderr.count(warning) == 1


def test_the_world_model_flag_sets_the_new_key(tmp_path):
    from obsspec.profile.config import ProfileConfig

    config = load_rl_config(
        None, {"tasks": "t", "out": tmp_path, "speculation": {"world_model": "w"}}
    )
    assert config.world_model == "w" and config.session_settings().speculation.enabled
    assert load_rl_config(None, {"tasks": "t", "out": tmp_path}).world_model == config.policy
    with pytest.warns(FutureWarning, match=r"\[profile\] world_model is deprecated"):
        profile = ProfileConfig.model_validate({"tasks": "t", "world_model": "w"})
    assert profile.speculation.world_model == "w" and profile.speculation.enabled


def test_the_world_models_lengths_follow_the_policys_limits_by_default(tmp_path):
    """Unset, the world model's answer holds a full observation and co-training keeps every
    example the policy could go on from; the run's identity records the resolved length."""
    from obsspec.types import longest_observation_chars

    config = load_rl_config(None, {"tasks": "t", "out": tmp_path})
    assert config.engine.max_model_len == 4096 and config.limits.observation_max_chars == 10_000
    assert config.wm_answer_tokens == 4096  # the context is the tighter bound
    assert config.cotrain_settings.max_len == 4096 and config.cotrain.max_len is None
    assert config.identity()["cotrain"]["max_len"] == 4096
    assert config.session_settings().wm_answer_tokens == 4096  # what the session asks for

    short = load_rl_config(
        None,
        {"tasks": "t", "out": tmp_path, "limits": {"observation_max_chars": 300},
         "engine": {"max_model_len": 2048}},
    )  # fmt: skip
    # the character cap is the tighter bound: the rendering, a token a character, and its end
    assert short.wm_answer_tokens == longest_observation_chars(300) + 1 < 2048
    assert short.cotrain_settings.max_len == 2048
    # a value that holds a full observation / example is kept as given
    roomy = load_rl_config(
        None,
        {"tasks": "t", "out": tmp_path, "cotrain": {"max_len": 8192},
         "speculation": {"wm_max_tokens": 5000}},
    )  # fmt: skip
    assert roomy.cotrain_settings.max_len == 8192 and roomy.wm_answer_tokens == 5000


def test_lengths_that_cannot_hold_a_full_observation_or_example_are_refused(tmp_path):
    config = tmp_path / "short.toml"
    config.write_text("[rl.engine]\nmax_model_len = 2048\n[rl.cotrain]\nmax_len = 1024\n")
    with pytest.raises(ConfigError) as caught:
        load_rl_config(config, {"tasks": "t", "out": tmp_path})
    message = str(caught.value)
    assert "cotrain.max_len 1024 cannot hold a full example" in message
    assert "engine.max_model_len 2048" in message and "at least 2048" in message

    config.write_text("[rl.speculation]\nwm_max_tokens = 256\n")
    with pytest.raises(ConfigError) as caught:
        load_rl_config(config, {"tasks": "t", "out": tmp_path})
    message = str(caught.value)
    assert "speculation.wm_max_tokens 256 cannot hold a full observation" in message
    assert "engine.max_model_len 4096" in message and "observation_max_chars 10000" in message

    # the same rule in every pipeline that plays episodes
    from obsspec.rollout.config import CollectConfig

    with pytest.raises(ValueError, match="wm_max_tokens 256 cannot hold"):
        CollectConfig(tasks="t", out=tmp_path, speculation={"wm_max_tokens": 256})


def test_grpo_batch_tokens_follows_the_context_length_and_a_smaller_one_is_refused(tmp_path):
    """An episode's context grows to engine.max_model_len and goes into one forward pass."""
    flags = {"tasks": "t", "out": tmp_path}
    default = load_rl_config(None, flags)
    assert default.grpo.batch_tokens is None and default.grpo_settings.batch_tokens == 4096
    short = load_rl_config(None, {**flags, "engine": {"max_model_len": 2048}})
    assert short.grpo_settings.batch_tokens == 2048
    roomy = load_rl_config(None, {**flags, "grpo": {"batch_tokens": 8192}})
    assert roomy.grpo_settings.batch_tokens == 8192

    config = tmp_path / "tight.toml"
    config.write_text("[rl.engine]\nmax_model_len = 2048\n[rl.grpo]\nbatch_tokens = 1024\n")
    with pytest.raises(ConfigError) as caught:
        load_rl_config(config, flags)
    message = str(caught.value)
    assert "grpo.batch_tokens 1024 cannot hold a whole episode" in message
    assert "engine.max_model_len 2048" in message and "at least 2048" in message
    assert "lower engine.max_model_len to 1024" in message


def test_every_rl_example_config_validates_with_whole_episodes_in_a_pass(tmp_path):
    examples = sorted(EXAMPLE.parent.glob("rl_*.toml"))
    assert len(examples) >= 4
    for path in examples:
        config = load_rl_config(path, {"tasks": "t", "out": tmp_path})
        assert config.grpo_settings.batch_tokens >= config.engine.max_model_len, path.name


# A default run's [rl.grpo] identity as runs recorded it before batch_tokens followed the
# context length and the trainer's memory and precision settings existed.
GRPO_IDENTITY_BEFORE = {
    "group_size": 4, "tasks_per_step": 2, "clip_low": 0.2, "clip_high": 0.28, "kl_coef": 0.0,
    "scale_by_std": True, "std": "unbiased", "reward_requires_done": True, "lr": 1e-06,
    "weight_decay": 0.0, "max_grad_norm": 1.0, "minibatches": 2, "batch_tokens": 2048,
    "dtype": "auto",
}  # fmt: skip


def test_runs_made_before_the_trainers_memory_settings_keep_their_identity(tmp_path):
    flags = {"tasks": "t", "out": tmp_path}
    default = load_rl_config(None, flags)
    assert default.identity()["grpo"] == GRPO_IDENTITY_BEFORE  # so they still resume
    assert "activation_checkpointing" not in default.identity()["cotrain"]
    # recomputation saves memory and learns the same: a resumed run may turn it on
    recomputing = {"activation_checkpointing": True}
    on = load_rl_config(None, {**flags, "grpo": recomputing, "cotrain": recomputing})
    assert on.identity() == default.identity()
    # a bfloat16 reduction rounds the gradients: another run
    rounded = load_rl_config(None, {**flags, "grpo": {"reduce_dtype": "bfloat16"}})
    assert rounded.identity()["grpo"] == {**GRPO_IDENTITY_BEFORE, "reduce_dtype": "bfloat16"}
