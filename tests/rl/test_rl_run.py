"""`obsspec rl` end to end: Ray, two real vLLM engines, real sandboxes, both trainers.

One uninterrupted 3-step run of the smoke config (tiny warm-started policy) is the reference;
a run stopped after step 1 and resumed must repeat its steps 2 and 3 exactly, and the faults
(a killed rollout worker, tasks that cannot run, GPUs that are not there) must stop the run
with a clear message and leave it resumable.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from obsspec.rl.run_files import METRIC_KEYS
from tests.cli.test_cli import OBSSPEC, obsspec
from tests.rl.conftest import TINY_FLAGS

pytestmark = [pytest.mark.docker, pytest.mark.vllm, pytest.mark.ray]

# What must repeat exactly after a resume (timings and speculation's races may not).
LEARNED = ("reward_mean", "reward_std", "success_rate", "policy_loss", "clip_fraction",
           "logprob_mismatch", "wm_loss", "trained_tokens", "weight_version")  # fmt: skip


def rl(tasks: Path, policy: Path, out: Path, *extra: str, timeout: float = 600):
    return obsspec(
        "rl", *TINY_FLAGS, "--tasks", str(tasks), "--policy", str(policy), "--out", str(out),
        *extra, timeout=timeout,
    )  # fmt: skip


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def reference_run(rl_tasks, warm_tiny_policy, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rl") / "reference"
    result = rl(rl_tasks, warm_tiny_policy, out, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["steps_done"] == 3 and summary["status"] == "complete"
    return out


def test_the_smoke_config_runs_and_every_row_has_the_keys(reference_run):
    rows = metrics(reference_run)
    assert [row["step"] for row in rows] == [1, 2, 3]
    for row in rows:
        assert set(METRIC_KEYS) <= row.keys()
        assert row["episodes"] == 4 and row["failed_episodes"] == 0
        assert row["lossless_violations"] == 0
        assert sum(row["spec_matched_by_source"].values()) == row["spec_matched"]
        assert row["rollout_seconds"] > 0 and row["sync_seconds"] > 0
        assert row["wm_loss"] is not None  # the warm policy runs commands: co-training ran
    # the warm policy's rewards vary somewhere: the policy was really updated
    trained = [row for row in rows if row["trained_episodes"]]
    assert trained, rows
    assert all(row["policy_loss"] is not None and row["logprob_mismatch"] < 0.05 for row in trained)
    assert rows[-1]["weight_version"] == len(trained)
    # speculation was attempted (the cache at least knows a sibling's outputs by step 3)
    assert sum(row["spec_attempted"] for row in rows) > 0

    checkpoints = sorted((reference_run / "checkpoints").iterdir())
    assert [c.name for c in checkpoints] == ["step-00000002", "step-00000003"]  # keep 2
    last = checkpoints[-1]
    parts = ["driver.json"]
    for role in ("policy", "world_model"):
        parts += [f"{role}/model/model.safetensors", f"{role}/trainer.pt"]
    for part in parts:
        assert (last / part).is_file(), part
    assert json.loads((last / "driver.json").read_text())["data_cursor"] == 3 * 2
    assert list((reference_run / "tensorboard").glob("events.out.tfevents.*"))
    assert (reference_run / "curves.png").read_bytes().startswith(b"\x89PNG")
    manifest = json.loads((reference_run / "rl-run.json").read_text())
    assert manifest["status"] == "complete" and manifest["steps_done"] == 3
    assert episodes(reference_run) == [
        (step, 4 * (step - 1) + i) for step in (1, 2, 3) for i in range(4)
    ]


def episodes(out: Path) -> list[tuple[int, int]]:
    """(step, episode index) of every episode row in OUT/data, a dataset like collect's."""
    from obsspec.runs import read_rows

    rows = read_rows(out)
    by_shard = sorted((out / "data").glob("step-*.parquet"))
    steps = [int(p.stem.removeprefix("step-")) for p in by_shard for _ in range(4)]
    assert len(rows) == len(steps) and all(r["run_id"].startswith("rl-") for r in rows)
    return sorted(zip(steps, (r["episode_index"] for r in rows), strict=True))


def test_a_run_killed_mid_step_stops_clearly_and_resumes_exactly(
    reference_run, rl_tasks, warm_tiny_policy, tmp_path
):
    """Stop after step 1 (its worker killed during step 2), resume: steps 2 and 3 repeat
    the uninterrupted run's exactly."""
    out = tmp_path / "killed"
    args = [OBSSPEC, "rl", *TINY_FLAGS, "--tasks", str(rl_tasks), "--policy",
            str(warm_tiny_policy), "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (out / "checkpoints" / "step-00000001").is_dir():
            assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint"
            time.sleep(0.2)
        os.kill(rollout_actor_pid(proc.pid), signal.SIGKILL)
        _, stderr = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 1, stderr[-3000:]
    assert "step 2: a worker died" in stderr and "--resume" in stderr
    assert [row["step"] for row in metrics(out)] == [1]
    assert json.loads((out / "rl-run.json").read_text())["status"] == "failed"
    assert not orphaned_engines()

    resumed = rl(rl_tasks, warm_tiny_policy, out, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    reference, again = metrics(reference_run), metrics(out)
    assert [row["step"] for row in again] == [1, 2, 3]
    for want, got in zip(reference, again, strict=True):
        assert {k: got[k] for k in LEARNED} == {k: want[k] for k in LEARNED}, want["step"]
    assert episodes(out) == episodes(reference_run)  # step 2's first try left nothing

    # Nothing to do once every step is done; other settings are refused, naming the first.
    assert rl(rl_tasks, warm_tiny_policy, out, "--resume").returncode == 0
    other = rl(rl_tasks, warm_tiny_policy, out, "--resume", "--lr", "1e-3")
    assert other.returncode == 1
    assert "grpo.lr" in other.stderr and "other settings" in other.stderr


def test_a_policy_trainer_sharded_over_two_ranks_learns_the_same_steps(
    reference_run, rl_tasks, warm_tiny_policy, tmp_path
):
    """FSDP2 over two trainer processes (gloo on CPUs) in the loop: the same first steps as
    one process, within float rounding; weights synced and checkpointed by rank 0."""
    from tests.rl.conftest import EXAMPLE

    config = tmp_path / "sharded.toml"
    text = EXAMPLE.read_text()
    config.write_text(text.replace("rollout_workers = 1", "rollout_workers = 1\ntrainer_ranks = 2"))
    flags = list(TINY_FLAGS)
    flags[flags.index(str(EXAMPLE))] = str(config)
    out = tmp_path / "sharded"
    result = obsspec(
        "rl", *flags, "--tasks", str(rl_tasks), "--policy", str(warm_tiny_policy), "--out",
        str(out), "--steps", "2", timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    reference = metrics(reference_run)[:2]
    assert any(row["trained_episodes"] for row in reference)  # an update was compared
    for want, got in zip(reference, metrics(out), strict=True):
        for key in LEARNED:
            if isinstance(want[key], float):
                assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key
            else:
                assert got[key] == want[key], key
    assert (out / "checkpoints" / "step-00000002" / "policy" / "trainer.pt").is_file()


def orphaned_engines() -> list[int]:
    """vLLM engine processes left without a parent (a killed worker's, not reaped)."""
    import psutil

    return [
        p.pid
        for p in psutil.process_iter(["cmdline", "ppid"])
        if p.info["ppid"] == 1 and " ".join(p.info["cmdline"] or []).startswith("VLLM")
    ]


def rollout_actor_pid(driver: int) -> int:
    """The rollout worker's process: a descendant of this run's driver (its local Ray)."""
    import psutil

    for child in psutil.Process(driver).children(recursive=True):
        if " ".join(child.cmdline()).startswith("ray::RolloutActor"):
            return child.pid
    raise AssertionError("no rollout actor process under the driver")


def test_tasks_that_cannot_run_stop_the_run_with_a_clear_message(tiny_model_dir, tmp_path):
    from tests.sft.test_sft import greeting_tasks

    tasks = greeting_tasks(tmp_path / "tasks", ["broken-a", "broken-b"])
    for dockerfile in tasks.glob("*/environment/Dockerfile"):
        dockerfile.write_text(dockerfile.read_text() + "\nRUN exit 3\n")
    result = rl(tasks, tiny_model_dir, tmp_path / "out", timeout=300)
    assert result.returncode == 1
    assert "no task can run" in result.stderr and "broken-" in result.stderr
    # the run finished no step: the same command again is not refused for what it left
    again = rl(tasks, tiny_model_dir, tmp_path / "out", timeout=300)
    assert "no task can run" in again.stderr and "not empty" not in again.stderr
    assert "replacing the rl run" in again.stderr and "finished no step" in again.stderr


def test_gpus_asked_for_but_absent_are_a_clear_error(rl_tasks, tiny_model_dir, tmp_path):
    config = tmp_path / "gpu.toml"
    config.write_text("[rl.placement]\nrollout_gpus = 1\ntrainer_gpus = 1\n")
    result = obsspec(
        "rl", "--config", str(config), "--tasks", str(rl_tasks), "--policy", str(tiny_model_dir),
        "--out", str(tmp_path / "out"), timeout=300,
    )  # fmt: skip
    assert result.returncode == 1
    assert "asks for 2 GPUs" in result.stderr and "has 0" in result.stderr
    assert not (tmp_path / "out").exists()  # the same command, corrected, is not refused
    assert "trainer_gpus = 0" in result.stderr  # the hint: how to run on CPUs
