"""`train-wm` data checks and the whole command: train a tiny world model, serve it in vLLM,
score it on held-out tasks; bad input fails with a clear message."""

from __future__ import annotations

import json

import pytest

from obsspec.errors import ConfigError
from obsspec.train.config import TrainSettings
from obsspec.world_model.config import TrainWMConfig
from obsspec.world_model.data import load_data, load_eval_data
from obsspec.world_model.evaluate import report_keys
from obsspec.world_model.training import packings, train_world_model
from tests.cli.test_cli import obsspec
from tests.test_tracking import offline_runs
from tests.world_model.runs import episode_row, make_run, steps_for, task_hash, write_run

TRAIN_TASKS = ["a-000", "b-000", "c-000", "d-000"]  # all on the training side of a 0.2 split
EVAL_KEYS = {
    "match_rate_wm",
    "exact_match_rate",
    "cascade_match_rate",
    "by_source",
    "by_family",
    "by_length",
    "new_content_rate",
    "by_content",
    "pred_ms_p50",
    "pred_ms_p90",
    "exec_to_pred_ratio_p50",
}


def test_every_turn_becomes_an_example_with_its_exact_prompt(builder, tmp_path):
    run = make_run(tmp_path / "run", builder, ["a-000", "a-001"])
    data = load_data([run], builder.tokenizer)
    assert len(data.train) == len(data.held_out) == 3  # a-001 is held out
    example = data.train[1]
    assert builder.tokenizer.decode(example.target_ids) == "a_000\n[exit code: 0]<|im_end|>"
    assert example.prompt_ids[-len(data.prompt.opening_ids) :] == data.prompt.opening_ids


def test_loss_weighting_weighs_training_turns_and_never_the_held_out_loss(builder, tmp_path):
    data = load_data([make_run(tmp_path / "run", builder, ["a-000", "a-001"])], builder.tokenizer)
    train, held_out = packings(data, TrainSettings(loss_weighting="observation"))
    assert [s.target_weight for s in train.sequences] == [
        pytest.approx(s.samples) for s in train.sequences
    ]
    assert [s.target_weight for s in held_out.sequences] == [
        s.target_tokens for s in held_out.sequences
    ]
    token, _ = packings(data, TrainSettings())
    assert [s.target_weight for s in token.sequences] == [s.target_tokens for s in train.sequences]


def test_runs_from_another_tokenizer_are_refused(builder, tmp_path):
    row = episode_row(builder, "a-000", steps_for("a-000"))
    for turn in row["turns"]:
        turn["observation_ids"] = [i + 1 for i in turn["observation_ids"]]  # other ids
    run = write_run(tmp_path / "other", [row])
    with pytest.raises(ConfigError, match="another tokenizer or chat template"):
        load_data([run], builder.tokenizer)


def test_missing_or_empty_runs_are_refused(builder, tmp_path):
    with pytest.raises(ConfigError, match=r"--data .*: no such run directory"):
        load_data([tmp_path / "nowhere"], builder.tokenizer)
    (tmp_path / "empty" / "data").mkdir(parents=True)
    with pytest.raises(ConfigError, match="no episodes"):
        load_data([tmp_path / "empty"], builder.tokenizer)


def test_no_held_out_task_is_a_clear_error(builder, tiny_model_dir, tmp_path):
    run = make_run(tmp_path / "run", builder, TRAIN_TASKS)
    config = TrainWMConfig(data=[run], base=str(tiny_model_dir), out=tmp_path / "wm")
    with pytest.raises(ConfigError, match="no held-out tasks: all 4 task"):
        train_world_model(config, tmp_path, lambda _: None, lambda _: None)
    assert not (tmp_path / "wm").exists()  # refused before anything was written


def test_evaluation_leaves_out_the_tasks_the_model_learned(builder, tmp_path):
    run = make_run(tmp_path / "run", builder, ["a-000", "b-000"])
    _, examples, _, excluded = load_eval_data(
        [run], builder.tokenizer, trained_hashes={task_hash("a-000")}
    )
    assert excluded == 1 and {e.task_id for e in examples} == {"b-000"}
    with pytest.raises(ConfigError, match="every one of its 2 task"):
        load_eval_data(
            [run], builder.tokenizer, trained_hashes={task_hash("a-000"), task_hash("b-000")}
        )


@pytest.mark.vllm
@pytest.mark.slow
def test_train_serve_and_evaluate_from_the_command_line(
    builder, tiny_model_dir, deep_tiny_model_dir, tmp_path
):
    """Trained from 3 of a 4-layer model's layers (--layers): vLLM serves the result."""
    train_run = make_run(tmp_path / "train", builder, TRAIN_TASKS, episodes=2)
    eval_run = make_run(tmp_path / "eval", builder, ["e-000", "f-000"], episodes=2)
    out, wandb_dir = tmp_path / "wm", tmp_path / "wandb"
    wandb_dir.mkdir()
    trained = obsspec(
        "train-wm", "--data", str(train_run), "--eval-data", str(eval_run),
        "--base", str(deep_tiny_model_dir), "--layers", "3", "--out", str(out),
        "--cache-dir", str(tmp_path / "cache"), "--epochs", "2", "--lr", "1e-3",
        "--wandb-project", "obsspec-test", "--json", timeout=900,
        env={"WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir)},
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    summary = json.loads(trained.stdout)  # wandb's own lines went to stderr
    assert summary["steps"] >= 2 and summary["eval_loss_after"] < summary["eval_loss_before"]
    (logged,) = offline_runs(wandb_dir)  # every step, to W&B too
    assert [row["step"] for row in logged.history] == list(range(1, summary["steps"] + 1))
    assert logged.history[-1]["train_wm/loss"] == pytest.approx(summary["last_loss"])
    assert logged.exit_code == 0 and logged.config["run_dir"] == str(out.resolve())
    evaluation = summary["evaluation"]
    assert set(evaluation) >= EVAL_KEYS and evaluation["turns"] == 12
    assert evaluation["over_max_tokens"] == 0  # answers may be as long as the longest turn
    assert sum(group["turns"] for group in evaluation["by_content"].values()) == 12
    # mkdir -p and echo are certain: the rules answer them, exactly, whatever the model says
    assert evaluation["by_source"]["rules/mkdir"]["match_rate"] == 1.0
    assert evaluation["cascade_match_rate"] >= 8 / 12
    # one name, one meaning: the world model alone over every turn, under both names
    assert evaluation["match_rate_wm"] == evaluation["exact_match_rate"]
    record = json.loads((out / "obsspec-train.json").read_text())
    assert (record["layers"]["kept"], record["layers"]["of"]) == ([0, 2, 3], 4)
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 3
    assert sorted(record["trained_task_hashes"]) == sorted(task_hash(t) for t in TRAIN_TASKS)

    again = obsspec(
        "train-wm", "--eval-only", "--model", str(out), "--data", str(eval_run), "--json",
        "--fail-under", "cascade_match_rate=0.5", "--fail-over", "turns=11",
    )  # fmt: skip
    assert again.returncode == 3, again.stderr[-3000:]  # the turns gate fails: 12 > 11
    report = json.loads(again.stdout)
    assert set(report) - {"gates"} == report_keys() and set(report) >= EVAL_KEYS
    assert [(g["key"], g["passed"]) for g in report["gates"]] == [
        ("cascade_match_rate", True),
        ("turns", False),
    ]
    assert "gate FAILED: turns <= 11, measured 12" in again.stderr

    seen = obsspec("train-wm", "--eval-only", "--model", str(out), "--data", str(train_run))
    assert seen.returncode == 1 and "was in the model's training data" in seen.stderr

    fresh = str(tmp_path / "fresh")
    resumed = obsspec(
        "train-wm", "--data", str(train_run), "--eval-data", str(eval_run),
        "--base", str(tiny_model_dir), "--out", fresh, "--resume",
    )  # fmt: skip
    assert resumed.returncode == 1 and "--resume: no checkpoint" in resumed.stderr


def test_the_train_wm_table_and_flags_make_one_config(tmp_path):
    from obsspec.config import load_pipeline_config

    file = tmp_path / "c.toml"
    file.write_text(
        '[train_wm]\ndata = ["r1"]\nout = "wm"\n[train_wm.train]\nlr = 5e-5\nepochs = 3\n'
    )
    config = load_pipeline_config(
        TrainWMConfig, "train_wm", file, {"train": {"epochs": 1}}, defaults={"base": "m"}
    )
    assert (config.train.lr, config.train.epochs, config.base) == (5e-5, 1, "m")
    file.write_text('[train_wm]\ndata = ["r1"]\nout = "wm"\n[train_wm.train]\nbatch_tokens = 8\n')
    with pytest.raises(ConfigError, match=r"train\.batch_tokens"):
        load_pipeline_config(TrainWMConfig, "train_wm", file, {}, defaults={"base": "m"})
    with pytest.raises(ConfigError, match="--out is required"):
        load_pipeline_config(
            TrainWMConfig, "train_wm", None, {"data": ["r"]}, required={"out": "--out"}
        )
