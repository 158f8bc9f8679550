"""A warm pool of started sandboxes for one image, so that an episode rarely waits for a start.

    async with SandboxPool(client, image, limits, size=4, run_id=run) as pool:
        sandbox = await pool.acquire()      # a warm one if ready, else started now
        ...
        await pool.release(sandbox)          # removed (never reused: its state is dirty)

A released sandbox is destroyed and a fresh one starts in the background. Closing the pool
(normally, on Ctrl-C or on an exception) removes every container it made, leased or warm;
containers of a process killed with SIGKILL are found later by `obsspec env gc`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from obsspec.environments.sandbox import DockerSandbox, SandboxLimits
from obsspec.environments.sandbox_protocol import Sandbox
from obsspec.environments.shell import ShellSettings


@dataclass
class PoolStats:
    warm_hits: int = 0
    cold_starts: int = 0
    acquire_ms: list[float] = field(default_factory=list)


class SandboxPool:
    """A SandboxProvider (environments.sandbox_protocol) of DockerSandboxes."""

    def __init__(
        self,
        client,
        image: str,
        limits: SandboxLimits | None = None,
        *,
        size: int = 2,
        run_id: str = "adhoc",
        shell: ShellSettings | None = None,
        max_parallel_starts: int = 2,
    ) -> None:
        self.client = client
        self.image = image
        self.limits = limits or SandboxLimits()
        self.size = size
        self.run_id = run_id
        self.shell = shell
        self.stats = PoolStats()
        self._warm: asyncio.Queue[DockerSandbox] = asyncio.Queue()
        self._leased: set[Sandbox] = set()
        self._refills: set[asyncio.Task] = set()
        self._starts = asyncio.Semaphore(max_parallel_starts)
        self._closed = False

    async def __aenter__(self) -> SandboxPool:
        for _ in range(self.size):
            self._refill()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    def _new(self) -> DockerSandbox:
        return DockerSandbox(
            self.client, self.image, self.limits, run_id=self.run_id, shell=self.shell
        )

    async def _start_one(self) -> DockerSandbox:
        async with self._starts:
            sandbox = self._new()
            await sandbox.start()
            return sandbox

    def _refill(self) -> None:
        if self._closed:
            return
        task = asyncio.create_task(self._warm_one())
        self._refills.add(task)
        task.add_done_callback(self._refills.discard)

    async def _warm_one(self) -> None:
        with contextlib.suppress(Exception):  # a failed warm start shows at acquire, cold
            sandbox = await self._start_one()
            if self._closed:
                await sandbox.aclose()
            else:
                self._warm.put_nowait(sandbox)

    @property
    def ready(self) -> int:
        """Started sandboxes waiting to be acquired."""
        return self._warm.qsize()

    async def acquire(self) -> DockerSandbox:
        """A started sandbox: warm when one is ready, else started now (a cold start)."""
        start = time.monotonic()
        try:
            sandbox = self._warm.get_nowait()
            self.stats.warm_hits += 1
        except asyncio.QueueEmpty:
            sandbox = await self._start_one()
            self.stats.cold_starts += 1
        else:
            self._refill()
        self._leased.add(sandbox)
        self.stats.acquire_ms.append((time.monotonic() - start) * 1000)
        return sandbox

    async def release(self, sandbox: Sandbox) -> None:
        self._leased.discard(sandbox)
        await sandbox.aclose()
        if self._warm.qsize() + len(self._refills) < self.size:
            self._refill()

    async def settle(self) -> None:
        """Wait for the sandboxes being started in the background (refills) to be ready."""
        await asyncio.gather(*list(self._refills), return_exceptions=True)

    async def aclose(self) -> None:
        """Remove every container of this pool; safe to call twice."""
        self._closed = True
        for task in list(self._refills):
            task.cancel()
        await asyncio.gather(*self._refills, return_exceptions=True)
        sandboxes = list(self._leased)
        while not self._warm.empty():
            sandboxes.append(self._warm.get_nowait())
        self._leased.clear()
        await asyncio.gather(*(s.aclose() for s in sandboxes), return_exceptions=True)
