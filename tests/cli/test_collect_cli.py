"""`obsspec collect` as a user runs it: JSON summary, refusals, kill -9 and Ctrl-C."""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import datasets
import pytest

from tests.cli.test_cli import OBSSPEC, obsspec
from tests.helpers import containers_labelled

GREETING = Path(__file__).parent.parent / "fixtures" / "tasks" / "harbor-greeting"

pytestmark = pytest.mark.docker


@pytest.fixture
def tasks(tmp_path) -> Path:
    """Three tasks whose oracle episodes take over a second each, so that a signal sent after
    the first episode always lands while others are still running."""
    for name in ("greet-a", "greet-b", "greet-c"):
        shutil.copytree(GREETING, tmp_path / "tasks" / name)
        solution = tmp_path / "tasks" / name / "solution" / "solve.sh"
        solution.write_text(solution.read_text() + "sleep 1.5\n")
    return tmp_path / "tasks"


def small_shards(tmp_path) -> Path:
    config = tmp_path / "collect.toml"
    config.write_text("[collect]\nshard_episodes = 1\n")
    return config


def episodes_in(out: Path) -> list[tuple[str, int]]:
    files = [str(p) for p in sorted((out / "data").glob("*.parquet"))]
    if not files:
        return []
    rows = datasets.load_dataset("parquet", data_files=files, split="train")
    return sorted(zip(rows["task_id"], rows["episode_index"], strict=True))


def containers_of(pid: int) -> list[str]:
    return containers_labelled(f"obsspec.pid={pid}")


def test_json_summary_then_a_different_run_is_refused(tasks, tmp_path, base_image):
    out = tmp_path / "run"
    args = ["collect", "--tasks", str(tasks / "greet-a"), "--out", str(out), "--policy", "oracle"]
    result = obsspec(*args, "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    for key in ("episodes", "turns", "mean_reward", "episodes_per_min", "failures"):
        assert key in summary
    assert summary["episodes"] == 1 and summary["mean_reward"] == 1.0
    assert "greet-a #0: reward 1" in result.stderr  # plain progress lines when not a TTY

    refused = obsspec(*args, "-k", "2")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "different run (episodes_per_task: 1 there, 2 now)" in refused.stderr
    assert "--overwrite" in refused.stderr
    assert episodes_in(out) == [("greet-a", 0)]  # refusing lost nothing


def test_missing_flags_and_bad_values_are_named(tmp_path):
    result = obsspec("collect", "--out", str(tmp_path / "r"))
    assert result.returncode == 1 and "--tasks is required" in result.stderr
    result = obsspec("collect", "--tasks", str(tmp_path / "nothing"), "--out", str(tmp_path / "r"))
    assert result.returncode == 1 and "no task directories found" in result.stderr
    args = ["--tasks", str(GREETING), "--out", str(tmp_path / "r"), "--policy", "no-such-model"]
    result = obsspec("collect", *args)
    assert result.returncode == 1 and "'no-such-model' is neither a known model" in result.stderr
    assert not (tmp_path / "r").exists()  # refused before anything was made


def test_kill_9_at_any_moment_then_resume_gives_each_episode_once(tasks, tmp_path, base_image):
    out = tmp_path / "run"
    args = [OBSSPEC, "collect", "--tasks", str(tasks), "--out", str(out), "--policy", "oracle"]
    args += ["-k", "3", "-c", "2", "--config", str(small_shards(tmp_path))]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while not list((out / "data").glob("*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(random.uniform(0, 1.0))  # somewhere in the middle of the run
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = episodes_in(out)
    assert 1 <= len(before) < 9, "the kill should land mid-run"

    result = subprocess.run([*args, "--json"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["already_done"] == len(before) and summary["missing"] == 0
    expected = [(f"greet-{t}", i) for t in "abc" for i in range(3)]
    assert episodes_in(out) == expected  # every episode exactly once
    assert containers_of(proc.pid) == []  # the killed run's containers were collected


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_keeps_finished_episodes_and_leaves_no_containers(
    tasks, tmp_path, base_image, signum, code
):
    out = tmp_path / "run"
    args = [OBSSPEC, "collect", "--tasks", str(tasks), "--out", str(out), "--policy", "oracle"]
    proc = subprocess.Popen(
        [*args, "-k", "3"],
        stderr=subprocess.PIPE,
        text=True,
        # As in a terminal: a job started in the background (as CI may start this one)
        # inherits SIGINT ignored, and a process rightly keeps ignoring it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    first_episode = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)
            if ": reward " in line:
                first_episode.set()

    threading.Thread(target=read, daemon=True).start()
    assert first_episode.wait(180), "".join(lines)
    proc.send_signal(signum)
    assert proc.wait(60) == code, "".join(lines)
    time.sleep(0.2)
    saved = len(episodes_in(out))
    assert 1 <= saved < 9  # the finished episodes were written as a shard; the rest were not run
    assert any(f"interrupted: {saved} episodes" in line for line in lines), "".join(lines)
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"
    assert containers_of(proc.pid) == []


def test_collect_without_docker_is_one_line_then_resumes(tmp_path, base_image):
    out = tmp_path / "run"
    args = ["collect", "--tasks", str(GREETING), "--out", str(out), "--policy", "oracle"]
    result = obsspec(*args, env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "error: no Docker daemon answers at unix://" in result.stderr
    assert "hint: start one" in result.stderr
    assert json.loads((out / "manifest.json").read_text())["status"] == "failed"

    result = obsspec(*args, "--json")  # Docker is back: the same command resumes the run
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["missing"] == 0
    assert episodes_in(out) == [("harbor-greeting", 0)]
