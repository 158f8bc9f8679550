"""The node lock: two processes on one machine build a task image once; a killed holder
never leaves the lock held."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
from pathlib import Path

from obsspec.environments.node_lock import build_once_per_node, node_lock

BUILD_S = 0.5  # long enough that both processes ask is_built before either finishes


def build_in_process(root: str, start: multiprocessing.synchronize.Barrier) -> None:
    """One process's ensure(): the 'image' is a marker file; every build is recorded."""
    marker, calls = Path(root) / "built", Path(root) / "calls"

    async def is_built() -> bool:
        return marker.exists()

    async def build() -> None:
        with calls.open("a") as record:
            record.write(f"{os.getpid()}\n")
        await asyncio.sleep(BUILD_S)
        marker.touch()

    start.wait()  # both processes ask at the same moment
    asyncio.run(build_once_per_node("image:obsspec-task/x:abc", is_built, build, Path(root)))


def test_two_processes_build_once_and_both_find_it_built(tmp_path):
    context = multiprocessing.get_context("fork")
    start = context.Barrier(2)
    processes = [
        context.Process(target=build_in_process, args=(str(tmp_path), start)) for _ in range(2)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(30)
    assert [p.exitcode for p in processes] == [0, 0]
    assert len((tmp_path / "calls").read_text().splitlines()) == 1
    assert (tmp_path / "built").exists()


def hold_for_ever(root: str, held: multiprocessing.synchronize.Event) -> None:
    async def hold() -> None:
        async with node_lock("image:held", Path(root)):
            held.set()
            await asyncio.sleep(60)

    asyncio.run(hold())


async def test_a_killed_holder_releases_the_lock_and_a_cancelled_waiter_never_takes_it(tmp_path):
    context = multiprocessing.get_context("fork")
    held = context.Event()
    holder = context.Process(target=hold_for_ever, args=(str(tmp_path), held))
    holder.start()
    try:
        assert held.wait(10)

        async def take() -> None:
            async with node_lock("image:held", tmp_path):
                pass

        waiter = asyncio.ensure_future(take())
        await asyncio.sleep(0.3)
        assert not waiter.done()  # the holder has it
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)

        os.kill(holder.pid, signal.SIGKILL)
        holder.join(10)
        began = time.monotonic()
        await asyncio.wait_for(take(), 5)  # the kernel dropped the dead holder's lock
        assert time.monotonic() - began < 1
    finally:
        holder.kill()
        holder.join(10)
