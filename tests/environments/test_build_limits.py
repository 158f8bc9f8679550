"""Task image builds run under the run's network and a sandbox's limits, and end when told:
at their timeout, or when the coroutine running them is cancelled (Ctrl-C, SIGTERM), with no
build container left behind."""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from pathlib import Path

import pytest

from obsspec.environments.errors import ImageBuildError
from obsspec.environments.sandbox import NetworkPolicy
from obsspec.environments.tasks import load_task
from obsspec.environments.tasks.images import TaskImages

GREETING = Path(__file__).parent.parent / "fixtures" / "tasks" / "harbor-greeting"

pytestmark = pytest.mark.docker


@pytest.fixture
def make_task(tmp_path, docker_client, base_image):
    """A task whose Dockerfile runs `run` (made unique, so that neither a cached layer nor
    an image of an earlier session stands in for the build); its images are removed after."""
    hashes: list[str] = []

    def make(run: str, **limits):
        root = tmp_path / f"task-{len(hashes)}"
        shutil.copytree(GREETING, root)
        token = uuid.uuid4().hex[:12]
        (root / "environment" / "Dockerfile").write_text(
            f"FROM {base_image}\nRUN {run} && echo build-{token}\n"
        )
        task = load_task(root)
        task = task.model_copy(update={"limits": task.limits.model_copy(update=limits)})
        hashes.append(task.content_hash)
        return task

    yield make
    for content_hash in hashes:
        label = f"obsspec.task_hash={content_hash}"
        for image in docker_client.images.list(filters={"label": label}):
            docker_client.images.remove(image.id, force=True)


class Log(list):
    """The build log, and the build containers it named (` ---> Running in <id>`)."""

    def __call__(self, line: str) -> None:
        self.append(line)

    @property
    def containers(self) -> list[str]:
        return [line.split()[-1] for line in self if line.startswith(" ---> Running in ")]


def exists(client, container_id: str) -> bool:
    import docker.errors

    try:
        client.api.inspect_container(container_id)
        return True
    except docker.errors.NotFound:
        return False


async def test_a_build_past_its_timeout_ends_then_and_leaves_no_container(make_task, docker_client):
    task = make_task("sleep 30").model_copy(update={"build_timeout_s": 1.5})
    log = Log()
    start = time.monotonic()
    with pytest.raises(ImageBuildError, match=r"took over 1\.5 s \(build_timeout_sec\)"):
        await TaskImages(docker_client, on_log=log).ensure(task)
    assert time.monotonic() - start < 1.5 + 4
    assert log.containers, log
    assert not [c for c in log.containers if exists(docker_client, c)]


async def test_cancelling_a_build_ends_it_at_once_and_leaves_no_container(make_task, docker_client):
    log = Log()
    building = asyncio.ensure_future(
        TaskImages(docker_client, on_log=log).ensure(make_task("sleep 30"))
    )
    deadline = time.monotonic() + 60
    while not log.containers and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert log.containers, log
    await asyncio.sleep(1)
    start = time.monotonic()
    building.cancel()
    with pytest.raises(asyncio.CancelledError):
        await building
    assert time.monotonic() - start < 4
    assert not exists(docker_client, log.containers[0])


async def test_a_build_follows_the_runs_network(make_task, docker_client):
    """`none`: only loopback, and a failed build's hint names the setting; `verify` (the
    verifier, the task author's code, gets a network): the build gets one too."""
    seen = "echo interfaces: $(ls /sys/class/net | tr '\\n' ' ')"
    log = Log()
    await TaskImages(docker_client, network=NetworkPolicy.none, on_log=log).ensure(make_task(seen))
    assert [line for line in log if line.startswith("interfaces:")] == ["interfaces: lo"]

    log = Log()
    images = TaskImages(docker_client, network=NetworkPolicy.verify, on_log=log)
    await images.ensure(make_task(seen))
    assert any(line.startswith("interfaces:") and "eth0" in line for line in log), log

    lookup = "python3 -c 'import socket; socket.getaddrinfo(\"deb.debian.org\", 80)'"
    with pytest.raises(ImageBuildError) as info:
        await TaskImages(docker_client, network=NetworkPolicy.none).ensure(make_task(lookup))
    assert "--network verify" in (info.value.hint or "")
    with pytest.raises(ImageBuildError) as info:  # a step that fails on its own: no such hint
        await TaskImages(docker_client, network=NetworkPolicy.none).ensure(make_task("exit 3"))
    assert info.value.hint is None


async def test_the_api_builds_and_starts_under_the_network_it_is_given(make_task, docker_client):
    """api.task_image and api.docker_sandboxes take the run's policy as collect does: none by
    default (the build sees only loopback), "verify" gives the build a network and the
    sandbox the verifier's network only."""
    from obsspec import api

    seen = 'test "$(ls /sys/class/net)" = lo'  # the build fails if it has a network
    await api.task_image(make_task(seen))
    with pytest.raises(ImageBuildError):
        await api.task_image(make_task(seen), network="verify")
    task = make_task("true")
    async with api.docker_sandboxes(task, network="verify") as sandboxes:
        sandbox = await sandboxes.acquire()
        assert sandbox.limits.network is NetworkPolicy.verify
        await sandboxes.release(sandbox)


@pytest.mark.parametrize(
    ("run", "limits"),
    [
        ("for i in $(seq 1 1000); do sleep 3 & done; wait", {"pids": 32}),
        ("python3 -c 'b = bytearray(400 * 2**20)'", {"memory_mb": 128}),
    ],
    ids=["pids", "memory"],
)
async def test_a_build_past_its_pids_or_memory_limit_fails(make_task, docker_client, run, limits):
    """The pids limit lands on the step's container milliseconds after it starts (the build
    API takes none): the loop's later forks fail. Without limits both steps succeed."""
    with pytest.raises(ImageBuildError, match="returned a non-zero code"):
        await TaskImages(docker_client).ensure(make_task(run, **limits))
