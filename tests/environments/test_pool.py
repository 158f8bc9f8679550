import asyncio

import pytest

from obsspec.environments.gc import gc_containers, obsspec_containers, owner_alive
from obsspec.environments.pool import SandboxPool
from obsspec.environments.sandbox import LABEL_PID, LABEL_RUN, DockerSandbox

pytestmark = pytest.mark.docker


async def wait_warm(pool: SandboxPool, count: int, timeout_s: float = 60) -> None:
    for _ in range(int(timeout_s * 10)):
        if pool.ready >= count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the pool did not warm up")


async def test_warm_acquire_is_fast_and_release_removes(docker_client, base_image, run_id):
    async with SandboxPool(docker_client, base_image, size=2, run_id=run_id) as pool:
        await wait_warm(pool, 2)
        sandbox = await pool.acquire()
        assert pool.stats.warm_hits == 1 and pool.stats.acquire_ms[0] < 50
        assert (await sandbox.run("echo ready")).stdout == "ready\n"
        container_id = sandbox.id
        await pool.release(sandbox)
        ids = {c.id for c in obsspec_containers(docker_client, run_id)}
        assert container_id not in ids
        await wait_warm(pool, 2)  # refilled in the background
    assert obsspec_containers(docker_client, run_id) == []


async def test_settle_waits_for_the_refills_in_flight(docker_client, base_image, run_id):
    async with SandboxPool(docker_client, base_image, size=2, run_id=run_id) as pool:
        await pool.settle()  # the first two start in the background
        assert pool.ready == 2
        await pool.release(await pool.acquire())  # a refill set off by each
        await pool.settle()
        assert pool.ready == 2


async def test_cold_start_when_empty_and_close_removes_leased(docker_client, base_image, run_id):
    pool = SandboxPool(docker_client, base_image, size=0, run_id=run_id)
    async with pool:
        leased = [await pool.acquire(), await pool.acquire()]
        assert pool.stats.cold_starts == 2
        assert [(await s.run("true")).exit_code for s in leased] == [0, 0]
    assert obsspec_containers(docker_client, run_id) == []  # leased ones removed too


async def test_cancelled_start_leaves_no_container(docker_client, base_image, run_id):
    sandbox = DockerSandbox(docker_client, base_image, run_id=run_id)
    task = asyncio.create_task(sandbox.start())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert obsspec_containers(docker_client, run_id) == []


def test_gc_removes_containers_of_dead_owners_only(docker_client, base_image, run_id, monkeypatch):
    # This process's gc runs on a host of its own: any other obsspec process on this machine (a
    # collect in another pytest-xdist process) collects dead owners' containers on the real
    # host, and would otherwise remove this test's "dead" container before it is looked at.
    import socket

    host = f"pytest-host-{run_id}"
    monkeypatch.setattr(socket, "gethostname", lambda: host)
    dead = docker_client.containers.run(
        base_image,
        ["sleep", "infinity"],
        detach=True,
        labels={LABEL_RUN: run_id, LABEL_PID: "999999999", "obsspec.host": "elsewhere"},
    )
    assert not owner_alive("999999999") and owner_alive("1")
    report = gc_containers(docker_client)  # another host's container: kept
    assert dead.short_id not in report.removed and report.kept_other_host >= 1
    dead.remove(force=True)

    here = docker_client.containers.run(
        base_image,
        ["sleep", "infinity"],
        detach=True,
        labels={LABEL_RUN: run_id, LABEL_PID: "999999999", "obsspec.host": host},
    )
    report = gc_containers(docker_client, dry_run=True)
    assert here.short_id in report.removed and obsspec_containers(docker_client, run_id)
    report = gc_containers(docker_client)
    assert here.short_id in report.removed and obsspec_containers(docker_client, run_id) == []
