"""A sandbox's disk limit on a real Docker engine: a quota where the storage driver gives one,
else the watchdog (environments/disk_limit.py); either way, writing past the limit ends the
episode and frees the disk."""

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import docker.errors
import pytest

from obsspec.agent.episode import EpisodeLimits, run_episode
from obsspec.environments.disk_limit import DEFAULT_STORAGE_MB
from obsspec.environments.errors import DiskLimitExceeded
from obsspec.environments.oneshot import run_once
from obsspec.environments.pool import SandboxPool
from obsspec.environments.sandbox import DockerSandbox, SandboxLimits
from obsspec.environments.tasks import load_task
from obsspec.environments.tasks.images import TaskImages
from obsspec.inference.scripted import ScriptedEngine

pytestmark = pytest.mark.docker
SMALL = SandboxLimits(storage_mb=50)
OBSSPEC = str(Path(sys.executable).with_name("obsspec"))
TASK_DIR = Path(__file__).parent.parent / "fixtures" / "tasks" / "harbor-greeting"


def gone(client, container_id: str) -> bool:
    try:
        client.api.inspect_container(container_id)
    except docker.errors.NotFound:
        return True
    return False


async def test_a_command_past_the_disk_limit_ends_and_the_container_is_gone(
    docker_client, base_image, run_id
):
    async with DockerSandbox(docker_client, base_image, SMALL, run_id=run_id) as sandbox:
        ok = await sandbox.run("fallocate -l 10M /tmp/small && echo ok", timeout_s=30)
        assert ok.stdout == "ok\n"  # within the limit: nothing happens
        container_id = sandbox.id
        with pytest.raises(DiskLimitExceeded, match="50 MiB"):
            await sandbox.run("fallocate -l 200M /tmp/big; echo written", timeout_s=30)
        assert gone(docker_client, container_id)  # removed at once: the disk is free again
        with pytest.raises(DiskLimitExceeded):  # and the sandbox stays stopped
            await sandbox.run("echo again", timeout_s=30)


async def test_a_background_writer_is_stopped_between_commands(docker_client, base_image, run_id):
    async with DockerSandbox(docker_client, base_image, SMALL, run_id=run_id) as sandbox:
        await sandbox.run("(sleep 0.5; fallocate -l 200M /tmp/big) >/dev/null 2>&1 &", 30)
        container_id = sandbox.id
        deadline = time.monotonic() + 10
        while not gone(docker_client, container_id) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)  # no command runs: only the watchdog can see it
        assert gone(docker_client, container_id)
        with pytest.raises(DiskLimitExceeded):
            await sandbox.run("echo after", timeout_s=30)


async def test_a_long_writer_is_stopped_before_its_command_ends(docker_client, base_image, run_id):
    async with DockerSandbox(docker_client, base_image, SMALL, run_id=run_id) as sandbox:
        start = time.monotonic()
        with pytest.raises(DiskLimitExceeded):
            await sandbox.run("fallocate -l 200M /tmp/big; sleep 50", timeout_s=60)
        assert time.monotonic() - start < 15


def test_env_run_past_the_disk_limit_is_stopped(docker_client, base_image):
    start = time.monotonic()
    limits = SandboxLimits(storage_mb=50)
    result = run_once(docker_client, base_image, "fallocate -l 200M /tmp/big; sleep 50", 60, limits)
    assert result.disk_limit is not None and "50 MiB" in result.disk_limit
    assert time.monotonic() - start < 15
    quick = run_once(docker_client, base_image, "fallocate -l 200M /tmp/big", 60, limits)
    assert quick.disk_limit is not None  # ended before a poll: the last measurement sees it
    fits = run_once(docker_client, base_image, "fallocate -l 10M /tmp/big && echo ok", 60, limits)
    assert (fits.stdout, fits.disk_limit) == ("ok\n", None)


def test_a_sandbox_without_storage_gets_the_default(docker_client, base_image, run_id):
    assert SandboxLimits().storage_mb is None
    assert SandboxLimits().disk_mb == DEFAULT_STORAGE_MB


async def test_an_episode_past_the_disk_limit_ends_unrewarded(
    docker_client, base_image, run_id, tokenizer, builder
):
    """The episode ends at the command that crossed the limit (finish reason disk_limit, a
    policy outcome: data, not retried), the verifier does not run, and the reward is 0."""
    task = load_task(TASK_DIR)
    task = task.model_copy(update={"limits": task.limits.model_copy(update={"storage_mb": 50})})
    image = await TaskImages(docker_client).ensure(task)
    replies = ["```bash\nfallocate -l 200M /tmp/big\n```", "```bash\ndone\n```"]
    engine = ScriptedEngine(tokenizer, lambda text: replies[text.count("assistant\n") > 1])
    async with SandboxPool(docker_client, image, task.limits, size=0, run_id=run_id) as pool:
        traj = await run_episode(task, pool, engine, builder, EpisodeLimits(), seed=1)
    assert (traj.finish_reason, traj.error_kind, traj.reward) == ("disk_limit", "model", 0.0)
    assert traj.error_type == "DiskLimitExceeded" and "50 MiB" in traj.error
    assert traj.verifier_output == "" and traj.verifier_s == 0.0  # the verifier did not run
    assert len(traj.turns) == 1


def test_obsspec_env_run_past_the_disk_limit_is_an_error(base_image):
    """`obsspec env run` gets the same limit (--storage-mb, default DEFAULT_STORAGE_MB): the
    command is stopped, its output kept, and the run ends with an error that says why."""
    start = time.monotonic()
    run = subprocess.run(
        [
            OBSSPEC,
            "env",
            "run",
            "--storage-mb",
            "50",
            "--",
            "echo before; fallocate -l 200M /x; sleep 50",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert time.monotonic() - start < 30
    assert run.returncode == 1 and run.stdout == "before\n"
    assert "past its disk limit of 50 MiB" in run.stderr and "--storage-mb" in run.stderr
