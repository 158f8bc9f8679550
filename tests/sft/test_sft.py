"""`obsspec sft`: the action mask on real trajectories, bad input, and the whole command (train
a tiny policy, evaluate it and its base through the real collect path)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from obsspec.errors import ConfigError
from obsspec.rollout.collect import collect
from obsspec.rollout.config import CollectConfig
from obsspec.runs import read_rows
from obsspec.sft.config import EvalPolicyConfig, SFTConfig
from obsspec.sft.data import load_policy_data
from obsspec.sft.evaluate import evaluate_policy
from obsspec.sft.training import train_policy
from obsspec.train.sequences import Sample, pack
from obsspec.world_model.data import load_data
from tests.cli.test_cli import obsspec
from tests.test_tracking import offline_runs
from tests.world_model.runs import episode_row, steps_for, write_run

GREETING = Path(__file__).parent.parent / "fixtures" / "tasks" / "harbor-greeting"
EVAL_KEYS = {"valid_action_rate", "success_rate", "mean_turns", "base_success_rate"}


def greeting_tasks(root: Path, names: list[str], user: str = "Ada") -> Path:
    """Copies of the greeting task; another user makes other task content."""
    for name in names:
        shutil.copytree(GREETING, root / name)
        dockerfile = root / name / "environment" / "Dockerfile"
        dockerfile.write_text(dockerfile.read_text().replace("Ada", user))
    return root


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory, settings, base_image) -> Path:
    """Real trajectories: the oracle solving two tasks in real sandboxes."""
    root = tmp_path_factory.mktemp("sft")
    tasks = greeting_tasks(root / "tasks", ["greet-a"], user="Ada")
    greeting_tasks(tasks, ["greet-b"], user="Bob")
    config = CollectConfig(tasks=str(tasks), out=root / "oracle", policy="oracle", concurrency=2)
    summary = asyncio.run(collect(config, settings.paths.models_dir))
    assert summary["mean_reward"] == 1.0
    return config.out


@pytest.mark.docker
def test_the_sft_mask_is_exactly_the_policy_tokens_of_real_trajectories(oracle_run, tokenizer):
    rows = read_rows(oracle_run)
    packed = pack(load_policy_data([oracle_run], tokenizer).samples, max_len=4096)
    assert len(packed.sequences) == len(rows)  # an episode's turns chain into one sequence
    for sequence, row in zip(packed.sequences, rows, strict=True):
        assert sequence.ids == row["context_ids"]
        assert sequence.labels == [m == 1 for m in row["mask"]]
        learned = [i for i, label in zip(sequence.ids, sequence.labels, strict=True) if label]
        assert learned == [i for turn in row["turns"] for i in turn["action_ids"]]
        replies = "".join(f"{turn['reply']}<|im_end|>" for turn in row["turns"])
        assert tokenizer.decode(learned) == replies


@pytest.mark.docker
def test_the_world_model_mask_is_exactly_the_observations_of_real_trajectories(
    oracle_run, tokenizer
):
    data = load_data([oracle_run], tokenizer, held_out_fraction=0.0)
    rows = read_rows(oracle_run)
    packed = pack([Sample(e.prompt_ids, e.target_ids) for e in data.train], max_len=4096)
    assert len(packed.sequences) == len(rows)
    for sequence, row in zip(packed.sequences, rows, strict=True):
        spans, span = [], []
        for token, label in zip(sequence.ids, sequence.labels, strict=True):
            if label:
                span.append(token)
            elif span:
                spans.append(span)
                span = []
        spans += [span] if span else []
        commands = [turn for turn in row["turns"] if turn["action"] == "command"]
        assert [tokenizer.decode(s) for s in spans] == [
            f"{turn['observation']}<|im_end|>" for turn in commands
        ]


@pytest.mark.docker
def test_eval_tasks_seen_in_training_are_refused_before_training(
    oracle_run, tiny_model_dir, tmp_path, settings
):
    config = SFTConfig(
        data=[oracle_run],
        base=str(tiny_model_dir),
        out=tmp_path / "policy",
        eval={"tasks": str(oracle_run.parent / "tasks")},
    )
    with pytest.raises(ConfigError, match="--eval-tasks: task greet-a is also in the training"):
        train_policy(config, settings.paths.models_dir, lambda _: None, lambda _: None)
    assert not config.out.exists()  # refused before anything was made


def test_runs_from_another_tokenizer_are_refused(builder, tmp_path):
    row = episode_row(builder, "a-000", steps_for("a-000"))
    for turn in row["turns"]:
        turn["observation_ids"] = [i + 1 for i in turn["observation_ids"]]
    run = write_run(tmp_path / "other", [row])
    with pytest.raises(ConfigError, match="another tokenizer or chat template than the base"):
        load_policy_data([run], builder.tokenizer)


def test_episodes_without_an_action_are_a_clear_error(builder, tmp_path):
    rows = [episode_row(builder, f"a-00{i}", steps_for("a-000"), i) for i in range(2)]
    for row in rows:  # prose, not commands, until the turns ran out
        row["turns"].pop()  # the done turn
        for turn in row["turns"]:
            turn["action"] = "invalid"
    run = write_run(tmp_path / "run", rows)
    with pytest.raises(ConfigError, match=r"no trajectory with an action .* in 2 episode"):
        load_policy_data([run], builder.tokenizer)


def test_min_reward_that_filters_everything_says_how_many(builder, tmp_path):
    rows = [episode_row(builder, f"a-00{i}", steps_for("a-000"), i) for i in range(3)]
    rows[0]["reward"], rows[1]["reward"], rows[2]["reward"] = 0.0, 0.5, None
    run = write_run(tmp_path / "run", rows)
    with pytest.raises(
        ConfigError,
        match=r"--min-reward 1 filtered out all 3 episode\(s\) \(2 reward below 1, "
        r"1 no reward",
    ):
        load_policy_data([run], builder.tokenizer, min_reward=1.0)
    data = load_policy_data([run], builder.tokenizer, min_reward=0.5)
    assert data.report.kept == 1 and data.report.turns == 4  # three commands and done
    assert data.report.filtered == {
        "reward below 0.5": 1,
        "no reward (the verifier did not run)": 1,
    }


def test_invalid_and_cut_off_replies_are_context_but_not_learned(builder, tmp_path):
    row = episode_row(builder, "a-000", steps_for("a-000"))
    row["turns"][0]["action"] = "invalid"
    row["turns"][1]["generation_finish"] = "length"
    data = load_policy_data([write_run(tmp_path / "run", [row])], builder.tokenizer)
    assert data.report.turns == 2
    assert data.report.skipped_turns == {
        "no action in the reply": 1,
        "reply cut off at max tokens": 1,
    }
    (sequence,) = pack(data.samples, 4096).sequences
    first_learned = sequence.labels.index(True)
    turns = row["turns"]
    assert first_learned == len(row["prompt_ids"]) + sum(
        len(t["action_ids"]) + len(t["observation_ids"]) for t in turns[:2]
    )


def test_a_damaged_dataset_is_refused(builder, tmp_path):
    row = episode_row(builder, "a-000", steps_for("a-000"))
    row["context_ids"][len(row["prompt_ids"])] += 1  # the first reply's first token
    run = write_run(tmp_path / "run", [row])
    with pytest.raises(ConfigError, match="task a-000 episode 0 turn 0: the context does not"):
        load_policy_data([run], builder.tokenizer)


def test_evaluation_needs_held_out_tasks(tmp_path, settings):
    config = SFTConfig(data=[tmp_path], base="m", out=tmp_path / "o")
    with pytest.raises(ConfigError, match=r"pass --eval-tasks .*, or --no-eval"):
        train_policy(config, settings.paths.models_dir, lambda _: None, lambda _: None)
    with pytest.raises(ConfigError, match="pass --eval-tasks"):
        evaluate_policy(EvalPolicyConfig(model="m"), settings.paths.models_dir, print)


@pytest.mark.docker
@pytest.mark.vllm
@pytest.mark.slow
def test_sft_command_trains_and_evaluates_policy_and_base(oracle_run, tiny_model_dir, tmp_path):
    eval_tasks = greeting_tasks(tmp_path / "eval-tasks", ["greet-c", "greet-d"], user="Grace")
    config = tmp_path / "sft.toml"
    config.write_text("[sft.eval]\nmax_turns = 2\nmax_tokens = 16\n")
    out, wandb_dir = tmp_path / "policy", tmp_path / "wandb"
    wandb_dir.mkdir()
    args = ["--eval-tasks", str(eval_tasks), "--config", str(config), "--json"]
    result = obsspec(
        "sft", "--data", str(oracle_run), "--base", str(tiny_model_dir), "--out", str(out),
        "--max-steps", "2", "--batch-tokens", "4096", "--wandb-project", "obsspec-test", *args,
        timeout=900, env={"WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["steps"] == 2 and summary["data"]["turns"] == 6  # 2 x (2 commands + done)
    (logged,) = offline_runs(wandb_dir)  # the training steps, to W&B too
    assert [row["step"] for row in logged.history] == [1, 2] and logged.exit_code == 0
    assert logged.history[-1]["sft/loss"] == pytest.approx(summary["last_loss"])
    evaluation = summary["evaluation"]
    assert evaluation.keys() >= EVAL_KEYS and evaluation["episodes"] == 2
    assert evaluation["base"]["episodes"] == 2 and evaluation["mean_turns"] <= 2
    record = json.loads((out / "obsspec-train.json").read_text())
    assert record["kind"] == "policy" and len(record["trained_task_hashes"]) == 2
    assert record["chat_template_kwargs"] == {}  # what its evaluation renders prompts with
    assert evaluation["run"].startswith(str(out / "eval" / "policy-"))
    assert (Path(evaluation["run"]) / "manifest.json").is_file()

    # --eval-only with the same settings resumes the finished runs: nothing is collected again.
    shards = sorted((out / "eval").glob("*/data/*.parquet"))
    again = obsspec("sft", "--eval-only", "--model", str(out), *args, timeout=600)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["success_rate"] == evaluation["success_rate"]
    assert sorted((out / "eval").glob("*/data/*.parquet")) == shards and len(shards) == 2
