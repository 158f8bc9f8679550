"""`--overwrite` as a user meets it: every command refuses to delete what is not a run of
its own, or what it reads, before touching anything; its own earlier run it replaces. And
collect refuses to resume a run whose --tasks now holds other tasks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.cli.test_cli import obsspec
from tests.rollout.test_export import MD, standard_rows
from tests.rollout.test_export import write_run as write_collect_run
from tests.world_model.runs import make_run

GREETING = Path(__file__).parent.parent / "fixtures" / "tasks" / "harbor-greeting"
NOWHERE = "127.0.0.1:1"  # no Ray cluster: rl would stop there, were it not refused first


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def notes(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "ideas.md").write_text("months of notes\n")
    return root


def refused(result, *said: str) -> None:
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    for words in said:
        assert words in result.stderr, result.stderr[-2000:]


def train(command: str, data: Path, base: Path, out: Path, *more: str):
    return obsspec(
        command, "--data", str(data), "--base", str(base), "--out", str(out), "--no-eval",
        "--max-steps", "1", "--batch-tokens", "512", "--max-len", "512", *more,
    )  # fmt: skip


@pytest.fixture(scope="module")
def data(builder, tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("data") / "run", builder, ["a-000", "b-000"])


def test_train_wm_overwrite_refuses_notes_and_its_own_data(data, tiny_model_dir, tmp_path):
    mine = notes(tmp_path / "notes")
    result = train("train-wm", data, tiny_model_dir, mine, "--overwrite")
    refused(result, f"--out {mine} holds files that are no obsspec run (ideas.md)")
    assert snapshot(mine) == {"ideas.md": b"months of notes\n"}

    dataset = snapshot(data)
    result = train("train-wm", data, tiny_model_dir, data, "--overwrite")
    refused(result, f"--out {data} is --data {data}", "nothing was deleted")
    assert snapshot(data) == dataset


def test_sft_overwrite_refuses_notes_and_a_collect_run(data, tiny_model_dir, builder, tmp_path):
    mine = notes(tmp_path / "notes")
    result = train("sft", data, tiny_model_dir, mine, "--overwrite")
    refused(result, f"--out {mine} holds files that are no obsspec run (ideas.md)")
    assert snapshot(mine) == {"ideas.md": b"months of notes\n"}

    other = write_collect_run(tmp_path / "collected", standard_rows(builder, MD), MD)
    collected = snapshot(other)
    result = train("sft", data, tiny_model_dir, other, "--overwrite")
    refused(result, "holds a run of `obsspec collect`, not an earlier `obsspec sft` run")
    assert snapshot(other) == collected


@pytest.mark.slow  # two real (tiny) trainings
def test_train_wm_overwrite_replaces_its_own_earlier_run(data, tiny_model_dir, tmp_path):
    out = tmp_path / "wm"
    first = train("train-wm", data, tiny_model_dir, out)
    assert first.returncode == 0, first.stderr[-2000:]
    again = train("train-wm", data, tiny_model_dir, out, "--overwrite")
    assert again.returncode == 0, again.stderr[-2000:]
    assert (out / "model.safetensors").is_file() and (out / "obsspec-train.json").is_file()


def test_collect_overwrite_refuses_notes(tmp_path, default_model_dir):
    mine = notes(tmp_path / "notes")
    result = obsspec(
        "collect", "--tasks", str(GREETING), "--out", str(mine), "--policy", "oracle",
        "--overwrite",
    )  # fmt: skip
    refused(result, "not a collect run (ideas.md is there")
    assert snapshot(mine) == {"ideas.md": b"months of notes\n"}


def test_rl_overwrite_refuses_notes_before_any_cluster(tmp_path, tiny_model_dir):
    mine = notes(tmp_path / "notes")
    shutil.copytree(GREETING, tmp_path / "tasks" / "greet")
    result = obsspec(
        "rl", "--tasks", str(tmp_path / "tasks"), "--policy", str(tiny_model_dir),
        "--out", str(mine), "--overwrite", "--ray-address", NOWHERE, timeout=120,
    )  # fmt: skip
    refused(result, f"--out {mine} holds files that are no obsspec run (ideas.md)")
    assert snapshot(mine) == {"ideas.md": b"months of notes\n"}


def test_profile_overwrite_refuses_a_profile_that_holds_its_tasks(tmp_path, tiny_model_dir):
    out = tmp_path / "profile"
    shutil.copytree(GREETING, out / "tasks" / "greet")
    (out / "report.json").write_text("{}")  # an earlier profile, its tasks kept inside
    kept = snapshot(out)
    result = obsspec(
        "profile", "--tasks", str(out / "tasks"), "--policy", str(tiny_model_dir),
        "--out", str(out), "--overwrite",
    )  # fmt: skip
    refused(result, f"--out {out} holds --tasks {out / 'tasks'}")
    assert snapshot(out) == kept


def test_export_overwrite_refuses_a_file_that_is_no_export(tmp_path, builder):
    run = write_collect_run(tmp_path / "run", standard_rows(builder, MD), MD)
    mine = tmp_path / "notes.jsonl"
    mine.write_text('{"todo": "keep this"}\n')
    args = ["export", str(run), "--format", "openai-jsonl", "--out", str(mine)]
    result = obsspec(*args, "--skip-unverified", "--overwrite")
    refused(result, f"--out {mine} holds a file that is not an obsspec export")
    assert mine.read_text() == '{"todo": "keep this"}\n'
    mine.unlink()
    assert obsspec(*args, "--skip-unverified").returncode == 0
    assert obsspec(*args, "--skip-unverified", "--overwrite").returncode == 0  # an export


@pytest.mark.docker
def test_collect_resumed_over_other_tasks_is_refused_and_rows_stay(tmp_path, base_image):
    tasks, out = tmp_path / "tasks", tmp_path / "run"
    shutil.copytree(GREETING, tasks / "greet-a")
    args = ["collect", "--tasks", str(tasks), "--out", str(out), "--policy", "oracle"]
    first = obsspec(*args)
    assert first.returncode == 0, first.stderr[-2000:]
    rows = snapshot(out / "data")
    shutil.move(tasks / "greet-a", tasks / "greet-b")  # the same path, another task set
    result = obsspec(*args)
    refused(
        result,
        "the tasks under --tasks changed since the run began: 1 added (greet-b); "
        "1 removed (greet-a)",
        "--overwrite",
    )
    assert snapshot(out / "data") == rows
    again = obsspec(*args, "--overwrite")  # what the refusal offers
    assert again.returncode == 0, again.stderr[-2000:]
