"""W&B logging (obsspec.tracking), offline: what a run logged is read back from its .wandb
file; --resume logs to the same W&B run, a failure marks it failed; without wandb, each
command that takes --wandb-project refuses before any work."""

from __future__ import annotations

import json
import struct
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from obsspec.cli.app import app
from obsspec.cli.common import json_stdout
from obsspec.errors import ConfigError
from obsspec.tracking import RUN_FILE, WandbLogger, WandbSettings, require_wandb, wandb_logger

PROJECT = WandbSettings(project="obsspec-test")
BLOCK = 32768  # a .wandb file: a 7-byte header, then LevelDB log records in 32 KiB blocks


@dataclass
class OfflineRun:
    id: str
    project: str
    config: dict
    history: list[dict]  # each logged row, without wandb's own keys (_step, _runtime, ...)
    exit_code: int | None
    started: float


@pytest.fixture
def offline_wandb(monkeypatch, tmp_path) -> Iterator[Path]:
    """WANDB_MODE=offline into a WANDB_DIR of the test's own: wandb's environment, which
    obsspec leaves to wandb. wandb reads it once per process, when it sets up: so set up
    afresh."""
    import wandb

    wandb_dir = tmp_path / "wandb-dir"
    wandb_dir.mkdir()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(wandb_dir))
    monkeypatch.setenv("WANDB_SILENT", "true")
    wandb.teardown()
    yield wandb_dir
    wandb.teardown()


def records(path: Path):
    """The protobuf records of a .wandb file (wandb's own reader lives in its Go core)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        _checksum, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if left < 7 or kind == 0:  # the zero-filled tail of a block
            pos += left
            continue
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def offline_runs(wandb_dir: Path, timeout_s: float = 10.0) -> list[OfflineRun]:
    """The finished offline runs under WANDB_DIR, in the order they started (wandb's core
    process may still be writing a run's last records when finish() returns)."""
    deadline = time.monotonic() + timeout_s
    while True:
        runs = read_runs(wandb_dir)
        if all(run.exit_code is not None for run in runs) or time.monotonic() > deadline:
            return runs
        time.sleep(0.1)


def read_runs(wandb_dir: Path) -> list[OfflineRun]:
    runs = []
    for path in wandb_dir.glob("wandb/offline-run-*/run-*.wandb"):
        run = OfflineRun("", "", {}, [], None, 0.0)
        for record in records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run.id, run.project = record.run.run_id, record.run.project
                run.started = record.run.start_time.ToNanoseconds() / 1e9
                run.config = {u.key: json.loads(u.value_json) for u in record.run.config.update}
            elif kind == "history":
                row = {"/".join(i.nested_key) or i.key: json.loads(i.value_json)
                       for i in record.history.item}  # fmt: skip
                run.history.append({k: v for k, v in row.items() if not k.startswith("_")})
            elif kind == "exit":
                run.exit_code = record.exit.exit_code
        runs.append(run)
    return sorted(runs, key=lambda r: r.started)


def stored_id(run_dir: Path) -> str:
    return json.loads((run_dir / RUN_FILE).read_text())["id"]


def test_each_rows_numeric_figures_are_logged_against_its_step(offline_wandb, tmp_path):
    out = tmp_path / "out"
    with WandbLogger(PROJECT, out, {"seed": 3}, resume=False, prefix="rl") as logger:
        logger.add({"step": 1, "reward_mean": 0.5, "speculated": True, "kl": None, "by": {}})
        logger.add({"step": 2, "reward_mean": 0.75, "speculated": False})
    (run,) = offline_runs(offline_wandb)
    assert run.id == stored_id(out) and run.project == "obsspec-test"
    assert run.config["run_dir"] == str(out.resolve()) and run.config["seed"] == 3
    assert run.history == [
        {"step": 1, "rl/reward_mean": 0.5, "rl/speculated": True},
        {"step": 2, "rl/reward_mean": 0.75, "rl/speculated": False},
    ]
    assert run.exit_code == 0


def test_a_resume_continues_the_same_run_and_a_failure_marks_it_failed(offline_wandb, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError), WandbLogger(PROJECT, out, {}, resume=False, prefix="rl") as w:
        w.add({"step": 1, "loss": 1.0})
        raise RuntimeError("the run failed")
    with WandbLogger(PROJECT, out, {}, resume=True, prefix="rl") as logger:
        logger.add({"step": 2, "loss": 0.5})
    first = stored_id(out)
    with WandbLogger(PROJECT, out, {}, resume=False, prefix="rl"):
        pass  # a new start (not --resume) is a new W&B run
    failed, resumed, fresh = offline_runs(offline_wandb)
    assert (failed.id, failed.exit_code, failed.history) == (
        first,
        1,
        [{"step": 1, "rl/loss": 1.0}],
    )
    assert (resumed.id, resumed.exit_code, resumed.history) == (
        first,
        0,
        [{"step": 2, "rl/loss": 0.5}],
    )
    assert fresh.id == stored_id(out) != first


def test_without_a_project_nothing_is_logged_or_written(offline_wandb, tmp_path):
    with wandb_logger(WandbSettings(), tmp_path / "out", {}, resume=False, prefix="rl") as w:
        assert w is None
    assert not (tmp_path / "out").exists() and offline_runs(offline_wandb) == []


def test_a_missing_wandb_is_refused_naming_the_flag_and_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    require_wandb(WandbSettings())  # no project: wandb is not needed
    with pytest.raises(ConfigError, match="--wandb-project obsspec-test: wandb is not") as e:
        require_wandb(PROJECT)
    assert "pip install 'obsspec[wandb]'" in e.value.hint


@pytest.mark.parametrize(
    "command",
    [
        ["rl", "--tasks", "tasks"],
        ["train-wm", "--data", "run"],
        ["sft", "--data", "run", "--no-eval"],
    ],
)
def test_each_command_refuses_a_missing_wandb_before_any_work(command, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.setattr(json_stdout, "requested", False)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    args = [*command, "--out", str(out), "--wandb-project", "p", "--cache-dir", str(tmp_path)]
    result = CliRunner().invoke(app, args, prog_name="obsspec")
    assert isinstance(result.exception, ConfigError), result.output
    assert str(result.exception) == "--wandb-project p: wandb is not installed"
    assert not out.exists()


@pytest.mark.parametrize("command", ["train-wm", "sft"])
def test_an_evaluation_alone_refuses_wandb_project(command, monkeypatch):
    monkeypatch.setattr(json_stdout, "requested", False)
    args = [command, "--eval-only", "--model", "m", "--data", "d", "--wandb-project", "p"]
    result = CliRunner().invoke(app, args, prog_name="obsspec")
    assert str(result.exception) == (
        "--wandb-project logs training steps: it does not go with --eval-only"
    )
