"""`obsspec rl` end to end: Ray, two real vLLM engines, real sandboxes, both trainers.

Three runs of the smoke config (tiny warm-started policy, 3 steps) serve every test here, since
each run costs minutes: the reference runs uninterrupted with its policy trainer sharded over
two ranks (FSDP2 on gloo) and a checkpoint every 2 steps, co-training one step behind the
rollout (the default on CPUs); the second runs the config as shipped (one trainer process), is
stopped during step 2 by a killed rollout worker and resumed. Both must finish complete, the
same steps within float rounding (one process learns what two ranks learn, and a resume
repeats what was not finished); the second logs to W&B too, offline, its resume to the same W&B
run. The third is the reference with synchronous co-training: the same policy updates, the
same world model at the end. Faults that stop a run before its first step run on their own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from obsspec.rl.run_files import METRIC_KEYS
from tests.cli.test_cli import OBSSPEC, obsspec
from tests.rl.conftest import EXAMPLE, TINY_FLAGS
from tests.test_tracking import offline_runs

pytestmark = [pytest.mark.docker, pytest.mark.vllm, pytest.mark.ray]

# What must repeat after a resume, and on two ranks (timings and speculation's races may not).
LEARNED = ("reward_mean", "reward_std", "success_rate", "policy_loss", "clip_fraction",
           "logprob_mismatch", "wm_loss", "trained_tokens", "weight_version")  # fmt: skip


def rl(tasks: Path, policy: Path, out: Path, *extra: str, config: Path = EXAMPLE,
       timeout: float = 600, env: dict | None = None):  # fmt: skip
    flags = list(TINY_FLAGS)
    flags[flags.index(str(EXAMPLE))] = str(config)
    return obsspec(
        "rl", *flags, "--tasks", str(tasks), "--policy", str(policy), "--out", str(out),
        *extra, timeout=timeout, env=env,
    )  # fmt: skip


def offline_wandb(out: Path) -> dict[str, str]:
    """W&B logging offline, into OUT's sibling wandb/ (tests/test_tracking.py reads it)."""
    (out.parent / "wandb").mkdir(exist_ok=True)
    return {"WANDB_MODE": "offline", "WANDB_DIR": str(out.parent / "wandb")}


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def sharded_config(tmp_path_factory) -> Path:
    """The smoke config, its policy trainer sharded over two ranks; a checkpoint every 2 steps,
    so that step 1's world-model update runs during step 2's rollout (a checkpoint awaits it)."""
    config = tmp_path_factory.mktemp("rl") / "sharded.toml"
    text = EXAMPLE.read_text().replace("checkpoint_every = 1", "checkpoint_every = 2")
    config.write_text(text.replace("rollout_workers = 1", "rollout_workers = 1\ntrainer_ranks = 2"))
    return config


def uninterrupted(tasks: Path, policy: Path, out: Path, config: Path, *extra: str) -> Path:
    result = rl(tasks, policy, out, "--json", *extra, config=config)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["steps_done"] == 3 and summary["status"] == "complete"
    return out


@pytest.fixture(scope="module")
def reference_run(rl_tasks, warm_tiny_policy, sharded_config, tmp_path_factory) -> Path:
    """The sharded config, uninterrupted, co-training one step behind (auto, on CPUs)."""
    out = tmp_path_factory.mktemp("rl") / "reference"
    return uninterrupted(rl_tasks, warm_tiny_policy, out, sharded_config)


@pytest.fixture(scope="module")
def synchronous_run(rl_tasks, warm_tiny_policy, sharded_config, tmp_path_factory) -> Path:
    """The reference's config with synchronous co-training."""
    out = tmp_path_factory.mktemp("rl") / "synchronous"
    return uninterrupted(
        rl_tasks, warm_tiny_policy, out, sharded_config, "--set", "cotrain.overlap=off"
    )


@dataclass
class Killed:
    """A run whose rollout worker was killed during step 2, as the kill left it."""

    out: Path
    returncode: int
    stderr: str
    steps: list[int]
    status: str
    orphans: list[int]


@pytest.fixture(scope="module")
def killed_run(rl_tasks, warm_tiny_policy, tmp_path_factory) -> Killed:
    """The smoke config as shipped (one trainer process), its worker killed once step 1 is
    checkpointed."""
    out = tmp_path_factory.mktemp("rl") / "killed"
    args = [OBSSPEC, "rl", *TINY_FLAGS, "--tasks", str(rl_tasks), "--policy",
            str(warm_tiny_policy), "--out", str(out),
            "--wandb-project", "obsspec-test"]  # fmt: skip
    env = {**os.environ, **offline_wandb(out)}
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        deadline = time.monotonic() + 300
        while not (out / "checkpoints" / "step-00000001").is_dir():
            assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint"
            time.sleep(0.2)
        engines = engines_under(proc.pid)
        assert engines, "no vLLM engine process under the run's driver"
        os.kill(rollout_actor_pid(proc.pid), signal.SIGKILL)
        _, stderr = proc.communicate(timeout=300)
    finally:
        proc.kill()
    status = json.loads((out / "rl-run.json").read_text())["status"]
    steps = [row["step"] for row in metrics(out)]
    return Killed(out, proc.returncode, stderr, steps, status, orphaned(engines))


@pytest.fixture(scope="module")
def resumed_run(killed_run, rl_tasks, warm_tiny_policy) -> Path:
    resumed = rl(
        rl_tasks, warm_tiny_policy, killed_run.out, "--resume", "--wandb-project", "obsspec-test",
        env=offline_wandb(killed_run.out),
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return killed_run.out


def assert_complete_smoke_run(out: Path) -> None:
    """Every row has the keys, the policy and world model were trained, checkpoints, curves,
    tensorboard and the dataset are all there."""
    rows = metrics(out)
    assert [row["step"] for row in rows] == [1, 2, 3]
    for row in rows:
        assert set(METRIC_KEYS) <= row.keys()
        assert row["episodes"] == 4 and row["failed_episodes"] == 0
        assert row["lossless_violations"] == 0
        assert sum(row["spec_matched_by_source"].values()) == row["spec_matched"]
        assert row["rollout_seconds"] > 0 and row["sync_seconds"] > 0
    # the warm policy runs commands: co-training ran, reported in the step it finished
    manifest = json.loads((out / "rl-run.json").read_text())
    behind = manifest["cotrain_overlap"]
    assert all(row["cotrain_overlap"] is behind for row in rows)
    trained_on = [row["wm_trained_on_step"] for row in rows]
    assert trained_on == ([None, 1, 2] if behind else [1, 2, 3])
    assert all((row["wm_loss"] is None) is (row["wm_trained_on_step"] is None) for row in rows)
    # the warm policy's rewards vary somewhere: the policy was really updated
    trained = [row for row in rows if row["trained_episodes"]]
    assert trained, rows
    assert all(row["policy_loss"] is not None and row["logprob_mismatch"] < 0.05 for row in trained)
    assert rows[-1]["weight_version"] == len(trained)
    # speculation was attempted (the cache at least knows a sibling's outputs by step 3)
    assert sum(row["spec_attempted"] for row in rows) > 0

    checkpoints = sorted((out / "checkpoints").iterdir())
    assert [c.name for c in checkpoints] == ["step-00000002", "step-00000003"]  # keep 2
    last = checkpoints[-1]
    parts = ["driver.json"]
    for role in ("policy", "world_model"):
        parts += [f"{role}/model/model.safetensors", f"{role}/trainer.pt"]
    for part in parts:
        assert (last / part).is_file(), part
    assert json.loads((last / "driver.json").read_text())["data_cursor"] == 3 * 2
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert (out / "curves.png").read_bytes().startswith(b"\x89PNG")
    assert manifest["status"] == "complete" and manifest["steps_done"] == 3
    assert episodes(out) == [(step, 4 * (step - 1) + i) for step in (1, 2, 3) for i in range(4)]


def assert_same_steps(
    want: list[dict], got: list[dict], keys: tuple = LEARNED, same_engine: set[int] = frozenset()
) -> None:
    """The learned figures of each step: counts exactly, floats within float rounding.
    SAME_ENGINE: the steps whose rollouts ran on bit-identical engine weights in both runs."""
    assert [row["step"] for row in got] == [row["step"] for row in want]
    for a, b in zip(want, got, strict=True):
        for key in keys:
            if key == "logprob_mismatch":
                assert_same_mismatch(a, b, a["step"] in same_engine)
            elif isinstance(a[key], float):
                assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), (a["step"], key)
            else:
                assert b[key] == a[key], (a["step"], key)


def assert_same_mismatch(a: dict, b: dict, same_engine: bool) -> None:
    """The sampler's side of a step (mean |trainer - engine| log-probability). The engine runs
    a bfloat16 copy of the trainer's float32 weights, so the figure is mostly bfloat16 rounding
    noise. On the same engine weights it moves only in the 6th digit with how vLLM batches the
    requests (one CI run: 5.159e-4 and 5.206e-4, either way round). But two trainers that agree
    within float rounding (two ranks and one) can round a few weights to neighbouring bfloat16
    values, and the figure is then another draw of that noise: CI saw 2.48e-3 and 1.92e-3 for
    step 3 with the same tokens, rewards and trainer figures; in a bfloat16 copy of the tiny
    policy, 100 one-ulp flips among its 6.6M weights moved it by -6% to +20%. So: within 5%
    on engine weights known to be identical, within a factor of 2 otherwise. Whether the
    engine took the update at all is the sync check's question (sync_check_error).
    A step that trained nothing (every group's rewards equal) has none on either."""
    step, want, got = a["step"], a["logprob_mismatch"], b["logprob_mismatch"]
    if want is None or got is None:
        assert want is got is None, (step, "logprob_mismatch")
        return
    if same_engine:
        assert got == pytest.approx(want, rel=0.05), (step, "logprob_mismatch", "same weights")
    else:
        assert want / 2 <= got <= want * 2, (step, "logprob_mismatch")


def same_engine_weights(a: Path, b: Path, steps: int = 3) -> set[int]:
    """The steps whose rollouts ran on bit-identical policy weights in runs A and B: step 1
    (both start from the same policy), and step N where both kept step N-1's checkpoint (the
    bfloat16 weights the engines were synced to, cast as the sync casts them)."""
    import torch
    from safetensors.torch import load_file

    same = {1}
    for step in range(2, steps + 1):
        part = Path(f"checkpoints/step-{step - 1:08d}/policy/model/model.safetensors")
        if not ((a / part).is_file() and (b / part).is_file()):
            continue
        want, got = load_file(a / part), load_file(b / part)
        names = want.keys() & got.keys()  # one may save the tied lm_head beside the embedding
        if all(torch.equal(want[name], got[name]) for name in names):
            same.add(step)
    return same


def test_the_smoke_config_runs_and_every_row_has_the_keys(reference_run, resumed_run):
    assert_complete_smoke_run(reference_run)  # uninterrupted, two trainer ranks
    assert_complete_smoke_run(resumed_run)  # one trainer process, killed and resumed


def episodes(out: Path) -> list[tuple[int, int]]:
    """(step, episode index) of every episode row in OUT/data, a dataset like collect's."""
    from obsspec.runs import read_rows

    rows = read_rows(out)
    by_shard = sorted((out / "data").glob("step-*.parquet"))
    steps = [int(p.stem.removeprefix("step-")) for p in by_shard for _ in range(4)]
    assert len(rows) == len(steps) and all(r["run_id"].startswith("rl-") for r in rows)
    return sorted(zip(steps, (r["episode_index"] for r in rows), strict=True))


def test_a_run_killed_mid_step_stops_clearly_and_resumes_the_same_steps(
    killed_run, resumed_run, reference_run, rl_tasks, warm_tiny_policy
):
    """Stopped after step 1 (its worker killed during step 2), resumed: steps 2 and 3 are
    the uninterrupted run's (within the float rounding that its two ranks make)."""
    assert killed_run.returncode == 1, killed_run.stderr[-3000:]
    assert "step 2: a worker died" in killed_run.stderr and "--resume" in killed_run.stderr
    assert killed_run.steps == [1]
    assert killed_run.status == "failed"
    assert not killed_run.orphans

    same = same_engine_weights(reference_run, resumed_run)
    assert_same_steps(metrics(reference_run), metrics(resumed_run), same_engine=same)
    assert episodes(resumed_run) == episodes(reference_run)  # step 2's first try left nothing

    # Nothing to do once every step is done; other settings are refused, naming the first.
    assert rl(rl_tasks, warm_tiny_policy, resumed_run, "--resume").returncode == 0
    other = rl(rl_tasks, warm_tiny_policy, resumed_run, "--resume", "--lr", "1e-3")
    assert other.returncode == 1
    assert "grpo.lr" in other.stderr and "other settings" in other.stderr


def test_wandb_marks_the_killed_run_failed_and_the_resume_continues_it(killed_run, resumed_run):
    failed, resumed = offline_runs(resumed_run.parent / "wandb")
    assert failed.id == resumed.id == json.loads((resumed_run / "wandb-run.json").read_text())["id"]
    assert (failed.exit_code, resumed.exit_code) == (1, 0)
    assert [row["step"] for row in failed.history + resumed.history] == [1, 2, 3]
    last = metrics(resumed_run)[-1]
    assert resumed.history[-1]["rl/reward_mean"] == pytest.approx(last["reward_mean"])
    assert resumed.config["run_dir"] == str(resumed_run.resolve())
    assert resumed.config["resume"] is True and failed.config["steps"] == 3


def test_a_policy_trainer_sharded_over_two_ranks_learns_the_same_steps(reference_run, resumed_run):
    """FSDP2 over two trainer processes (gloo on CPUs) in the loop: the same steps as one
    process, within float rounding; weights synced and checkpointed by rank 0."""
    reference = metrics(reference_run)
    assert any(row["trained_episodes"] for row in reference[:2])  # an update was compared
    same = same_engine_weights(reference_run, resumed_run)
    assert_same_steps(metrics(resumed_run), reference, same_engine=same)
    for step in ("step-00000002", "step-00000003"):
        assert (reference_run / "checkpoints" / step / "policy" / "trainer.pt").is_file()


def test_co_training_one_step_behind_gives_the_same_updates_as_synchronous(
    reference_run, synchronous_run
):
    """The world-model engine one update behind during the rollouts (step 2's here: step 1's
    update ran during it) changes which predictions match, never what is kept: the policy
    learns the same steps, and the world model the same updates in the same order."""
    import torch
    from safetensors.torch import load_file

    behind, synchronous = metrics(reference_run), metrics(synchronous_run)
    assert_complete_smoke_run(synchronous_run)  # the reference's checked beside the resumed
    assert [row["cotrain_overlap"] for row in behind] == [True] * 3
    assert [row["cotrain_overlap"] for row in synchronous] == [False] * 3
    learned = tuple(key for key in LEARNED if key != "wm_loss")
    same = same_engine_weights(synchronous_run, reference_run)
    assert_same_steps(synchronous, behind, learned, same_engine=same)
    # behind, row N reports the update on step N-1's rows: synchronous row N-1's
    for late, own in zip(behind[1:], synchronous[:-1], strict=True):
        assert late["wm_trained_on_step"] == own["wm_trained_on_step"] == own["step"]
        assert late["wm_loss"] == pytest.approx(own["wm_loss"], rel=1e-4, abs=1e-6)
    assert behind[0]["wm_wait_s"] is None and behind[1]["wm_wait_s"] >= 0
    weights = "checkpoints/step-00000003/world_model/model/model.safetensors"
    want, got = load_file(synchronous_run / weights), load_file(reference_run / weights)
    assert want.keys() == got.keys()
    for name, tensor in want.items():
        assert torch.allclose(got[name].float(), tensor.float(), rtol=1e-5, atol=1e-6), name


def engines_under(driver: int) -> list:
    """The vLLM engine processes of this run: descendants of its driver (through its local Ray).
    Only these are looked at afterwards: engines of other tests running at the same time (in
    another pytest-xdist process) are none of this run's business."""
    import psutil

    engines = []
    for child in psutil.Process(driver).children(recursive=True):
        with contextlib.suppress(psutil.Error):  # a process that ended meanwhile
            if " ".join(child.cmdline()).startswith("VLLM"):
                engines.append(child)
    return engines


def orphaned(engines: list, grace: float = 60) -> list[int]:
    """The pids of those engines still alive GRACE seconds after the run's driver exited (a
    killed worker's engines, left running). An engine notices its parent's death and exits on
    its own, but not at once: on a loaded machine that takes seconds, so this waits rather than
    looking once. Any still alive are killed, so that they do not burden the tests after."""
    import psutil

    def running(process) -> bool:  # is_running: the same process (pid and start time), not a reuse
        try:
            return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + grace
    alive = [process for process in engines if running(process)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.5)
        alive = [process for process in alive if running(process)]
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    return [process.pid for process in alive]


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
