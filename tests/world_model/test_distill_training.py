"""`train-wm --teacher`: a teacher of another vocabulary, or with --eval-only, is refused
clearly; from the command line a shallow world model learns from a deeper one, the record
names the teacher, and a resume with another teacher is refused."""

from __future__ import annotations

import json
import shutil

import pytest
from pydantic import ValidationError

from obsspec.errors import ConfigError
from obsspec.world_model.config import TrainWMConfig
from obsspec.world_model.training import train_world_model
from tests.cli.test_cli import obsspec
from tests.world_model.runs import make_run

TASKS = ["a-000", "b-000", "c-000", "d-000"]


def refused_teacher(teacher, base, builder, tmp_path) -> str:
    """The error train_world_model gives for this teacher; OUT must stay unmade."""
    run = make_run(tmp_path / "run", builder, TASKS)
    config = TrainWMConfig(
        data=[run], base=str(base), teacher=str(teacher), out=tmp_path / "wm", evaluate=False
    )
    with pytest.raises(ConfigError) as refusal:
        train_world_model(config, tmp_path / "models", lambda _: None, lambda _: None)
    assert not (tmp_path / "wm").exists()  # refused before anything was written
    return str(refusal.value)


def test_a_teacher_with_a_wider_output_layer_is_refused(tiny_model_dir, builder, tmp_path):
    teacher = shutil.copytree(tiny_model_dir, tmp_path / "wider")
    config = json.loads((teacher / "config.json").read_text())
    config["vocab_size"] += 64
    (teacher / "config.json").write_text(json.dumps(config))
    message = refused_teacher(teacher, tiny_model_dir, builder, tmp_path)
    assert f"--teacher {teacher}" in message and str(tiny_model_dir) in message
    assert f"vocab_size {config['vocab_size']}" in message and "same tokenizer" in message


def test_a_teacher_whose_tokenizer_numbers_tokens_otherwise_is_refused(
    tiny_model_dir, builder, tmp_path
):
    teacher = shutil.copytree(tiny_model_dir, tmp_path / "renumbered")
    tokenizer = json.loads((teacher / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    vocab["a"], vocab["b"] = vocab["b"], vocab["a"]  # same tokens and width, two ids swapped
    (teacher / "tokenizer.json").write_text(json.dumps(tokenizer))
    message = refused_teacher(teacher, tiny_model_dir, builder, tmp_path)
    assert f"--teacher {teacher}" in message and str(tiny_model_dir) in message
    assert "2 of the student's" in message and "another id" in message


def test_distill_settings_without_a_teacher_are_refused(tmp_path):
    with pytest.raises(ValidationError, match="set teacher"):
        TrainWMConfig(data=[tmp_path], base="m", out=tmp_path / "wm", distill={"alpha": 0.9})


def test_teacher_is_refused_with_eval_only(tmp_path):
    result = obsspec(
        "train-wm", "--eval-only", "--model", str(tmp_path), "--data", str(tmp_path),
        "--teacher", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 1
    assert "--teacher" in result.stderr and "not with --eval-only" in result.stderr


@pytest.mark.slow
def test_a_shallow_world_model_learns_from_a_deeper_one_from_the_command_line(
    builder, tiny_model_dir, deep_tiny_model_dir, tmp_path
):
    run = make_run(tmp_path / "run", builder, TASKS)
    teacher = shutil.copytree(deep_tiny_model_dir, tmp_path / "teacher")
    out, cache = tmp_path / "wm", str(tmp_path / "cache")

    def train_wm(*flags):
        return obsspec(
            "train-wm", "--base", str(deep_tiny_model_dir), "--layers", "2", "--data", str(run),
            "--no-eval", "--epochs", "1", "--json", "--cache-dir", cache,
            "--set", "distill.temperature=2.0", *flags, timeout=600,
        )  # fmt: skip

    trained = train_wm("--teacher", str(teacher), "--out", str(out))
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert f"distilling from {teacher} (alpha 0.5, temperature 2.0)" in trained.stderr
    summary = json.loads(trained.stdout)
    assert summary["steps"] >= 1 and summary["last_loss"] > 0
    record = json.loads((out / "obsspec-train.json").read_text())
    assert record["teacher"] == str(teacher)
    assert record["distill"] == {"alpha": 0.5, "temperature": 2.0}
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 2

    # a resume must learn from the same teacher; --overwrite never deletes the teacher
    other = train_wm("--teacher", str(tiny_model_dir), "--out", str(out), "--resume")
    assert other.returncode == 1 and "distill.teacher" in other.stderr, other.stderr[-3000:]
    onto = train_wm("--teacher", str(teacher), "--out", str(teacher), "--overwrite")
    assert onto.returncode == 1 and f"is --teacher {teacher}" in onto.stderr, onto.stderr[-3000:]
    assert (teacher / "config.json").is_file()
