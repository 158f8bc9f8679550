"""The run's sandbox ceiling: a task asking more than it gets it, and the run says so."""

import shutil
from collections import Counter
from pathlib import Path

import pytest

from obsspec.environments.ceiling import SandboxCeiling, capped, capped_note, within_machine
from obsspec.environments.disk_limit import DEFAULT_STORAGE_MB
from obsspec.environments.sandbox import SandboxLimits
from obsspec.environments.tasks import load_task
from obsspec.environments.tasks.images import TaskImages
from obsspec.environments.validate import validate_task
from obsspec.rollout.config import CollectConfig
from obsspec.rollout.events import Note
from obsspec.rollout.sandboxes import TaskPools, build_images

TASK_DIR = Path(__file__).parent.parent / "fixtures" / "tasks" / "harbor-greeting"


def test_a_task_within_the_ceiling_keeps_its_limits():
    limits = SandboxLimits(cpus=2, memory_mb=4096, storage_mb=2048)
    assert capped(limits, SandboxCeiling()) == (limits, [])


def test_each_limit_past_the_ceiling_is_lowered_and_named():
    greedy = SandboxLimits(cpus=64, memory_mb=512 * 1024, pids=100_000, storage_mb=10**6)
    ceiling = SandboxCeiling(max_cpus=2, max_memory_mb=4096, max_pids=256, max_storage_mb=1024)
    limits, lowered = capped(greedy, ceiling)
    assert (limits.cpus, limits.memory_mb, limits.pids, limits.storage_mb) == (2, 4096, 256, 1024)
    assert lowered == [
        "cpus 64 -> 2",
        "memory 524288 MiB -> 4096 MiB",
        "pids 100000 -> 256",
        "storage 1000000 MiB -> 1024 MiB",
    ]


def test_the_default_disk_is_capped_without_a_word():
    """A task that names no storage gets the default; a ceiling below it is the user's own
    choice, not something the task asked for."""
    limits, lowered = capped(SandboxLimits(), SandboxCeiling(max_storage_mb=100))
    assert (limits.disk_mb, lowered) == (100, [])
    limits, _ = capped(SandboxLimits(), SandboxCeiling())
    assert (limits.storage_mb, limits.disk_mb) == (None, DEFAULT_STORAGE_MB)


def test_the_note_names_the_task_and_what_it_got():
    notes = capped_note(
        [("greedy", SandboxLimits(memory_mb=512 * 1024)), ("modest", SandboxLimits())],
        SandboxCeiling(),
    )
    assert len(notes) == 1
    assert "task greedy" in notes[0] and "memory 524288 MiB -> 8192 MiB" in notes[0]


def test_the_ceiling_is_a_run_setting():
    config = CollectConfig(tasks="t", out=Path("o"), sandbox={"max_memory_mb": 1024})
    assert config.sandbox.max_memory_mb == 1024 and config.sandbox.max_cpus == 4
    with pytest.raises(ValueError, match="max_memory"):
        CollectConfig(tasks="t", out=Path("o"), sandbox={"max_memory": 1024})


@pytest.mark.docker
async def test_a_task_asking_512g_gets_the_ceiling_and_a_warning(
    tmp_path, docker_client, base_image, run_id
):
    task_dir = tmp_path / "greedy"
    shutil.copytree(TASK_DIR, task_dir)
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace("memory_mb = 1024", 'memory = "512G"'))
    task = load_task(task_dir)
    assert task.limits.memory_mb == 512 * 1024
    tasks, planned, ceiling = {task.id: task}, Counter({task.id: 1}), SandboxCeiling()
    events = []
    images = await build_images(docker_client, tasks, planned, True, events.append, ceiling=ceiling)
    notes = [e.message for e in events if isinstance(e, Note) and "ceiling" in e.message]
    assert len(notes) == 1 and "memory 524288 MiB -> 8192 MiB" in notes[0]
    async with TaskPools(docker_client, run_id, tasks, images, planned, ceiling=ceiling) as pools:
        pool = await pools.pool(task)
        sandbox = await pool.acquire()
        host = docker_client.api.inspect_container(sandbox.id)["HostConfig"]
        assert host["Memory"] == 8192 * 1024 * 1024
        await pool.release(sandbox)


@pytest.mark.docker
async def test_env_validate_caps_and_reports_it(tmp_path, docker_client, base_image, run_id):
    task_dir = tmp_path / "greedy"
    shutil.copytree(TASK_DIR, task_dir)
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace("memory_mb = 1024", 'memory = "512G"'))
    report = await validate_task(
        load_task(task_dir), docker_client, TaskImages(docker_client), run_id
    )
    assert report.ok, report.errors
    assert report.warnings == ["capped by the sandbox ceiling: memory 524288 MiB -> 8192 MiB"]


@pytest.mark.docker
async def test_the_api_caps_with_a_warning(tmp_path, docker_client, base_image):
    from obsspec import api

    task_dir = tmp_path / "greedy"
    shutil.copytree(TASK_DIR, task_dir)
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace("memory_mb = 1024", 'memory = "512G"'))
    with pytest.warns(UserWarning, match="memory 524288 MiB -> 8192 MiB"):
        async with api.docker_sandboxes(api.load_task(task_dir)) as sandboxes:
            sandbox = await sandboxes.acquire()
            host = docker_client.api.inspect_container(sandbox.id)["HostConfig"]
            assert host["Memory"] == 8192 * 1024 * 1024
            await sandboxes.release(sandbox)


class FakeDaemon:
    def __init__(self, cores: int) -> None:
        self.cores = cores

    def info(self) -> dict:
        return {"NCPU": self.cores}


def test_the_cpus_ceiling_is_no_more_than_the_machine_has():
    assert within_machine(SandboxCeiling(), FakeDaemon(2)).max_cpus == 2
    assert within_machine(SandboxCeiling(), FakeDaemon(64)).max_cpus == 4


@pytest.mark.docker
async def test_a_task_asking_more_cpus_than_the_machine_has_still_starts(
    tmp_path, docker_client, base_image, run_id
):
    """Docker refuses a cpu quota past the machine's cores ("Range of CPUs is from 0.01 to
    2.00"): the task gets the machine's cores, with the note, instead of failing every try."""
    cores = docker_client.info()["NCPU"]
    task_dir = tmp_path / "wide"
    shutil.copytree(TASK_DIR, task_dir)
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace("cpus = 1", f"cpus = {cores + 1}"))
    task = load_task(task_dir)
    tasks, planned = {task.id: task}, Counter({task.id: 1})
    ceiling = SandboxCeiling(max_cpus=cores + 8)
    events = []
    images = await build_images(docker_client, tasks, planned, True, events.append, ceiling=ceiling)
    assert any(f"cpus {cores + 1} -> {cores}" in getattr(e, "message", "") for e in events)
    async with TaskPools(docker_client, run_id, tasks, images, planned, ceiling=ceiling) as pools:
        pool = await pools.pool(task)
        sandbox = await pool.acquire()
        host = docker_client.api.inspect_container(sandbox.id)["HostConfig"]
        assert host["NanoCpus"] == cores * 10**9
        await pool.release(sandbox)
