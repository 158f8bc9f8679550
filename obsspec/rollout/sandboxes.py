"""The sandbox side of a rollout session: task images, and one sandbox pool per task.

    images = await build_images(client, tasks, planned, strict, emit, image_map, network,
                                ceiling=ceiling)  # notes the tasks the ceiling caps
    require_images(images, planned, skipped)   # none built: NoRunnableTask
    async with TaskPools(client, run_id, tasks, images, planned, cpuset, network,
                         ceiling=ceiling) as pools:
        sandbox_pool = await pools.pool(task)      # opened on first use
        await pools.finished(task.id)              # after each episode; the last closes it

Pipelines go through the session; rl's driver also builds a local run's images before any
actor starts (its workers then find them built).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from obsspec.environments.ceiling import SandboxCeiling, capped, capped_note, within_machine
from obsspec.environments.errors import ImageBuildError
from obsspec.environments.pool import SandboxPool
from obsspec.environments.sandbox import NetworkPolicy, denied_internet, with_network
from obsspec.environments.tasks.images import TaskImages
from obsspec.environments.tasks.model import Task
from obsspec.errors import ObsspecError
from obsspec.rollout.events import Event, Note, TaskSkipped

Emit = Callable[[Event], None]


class NoRunnableTask(ObsspecError):
    """Every planned task's image failed to build: there is nothing to play."""


async def build_images(
    client,
    tasks: Mapping[str, Task],
    planned: Mapping[str, int],
    strict: bool,
    emit: Emit,
    image_map: Mapping[str, str] | None = None,
    network: NetworkPolicy = NetworkPolicy.none,
    on_log: Callable[[str], None] = lambda _: None,
    *,
    ceiling: SandboxCeiling | None = None,
) -> dict[str, str]:
    """task id -> image tag for every planned task whose image exists or builds (FROM images
    replaced as image_map says); a task whose build fails is reported as TaskSkipped with its
    planned episodes (with strict, the error is raised). Says which tasks the network policy
    denies internet, and which the sandbox ceiling caps (once per task)."""
    ceiling = within_machine(ceiling or SandboxCeiling(), client)
    # builds run under the run's network and the capped sandbox limits (TaskImages)
    builder = TaskImages(
        client, image_map=image_map, on_log=on_log, network=network, ceiling=ceiling
    )
    emit(Note(f"preparing {len(planned)} task images"))
    for line in capped_note(((t, tasks[t].limits) for t in planned), ceiling):
        emit(Note(line))
    denied = [t for t in planned if denied_internet(tasks[t].limits, network)]
    if denied:
        emit(
            Note(
                f"--network {network}: no network for {len(denied)} task(s) that allow "
                f"internet ({', '.join(sorted(denied)[:5])})"
            )
        )

    async def one(task_id: str) -> tuple[str, str | None]:
        try:
            return task_id, await builder.ensure(tasks[task_id])
        except ImageBuildError as e:
            if strict:
                raise
            reason = f"image build failed: {e}" + (f" ({e.hint})" if e.hint else "")
            emit(TaskSkipped(task_id, reason, planned[task_id], tuple(e.log_tail)))
            return task_id, None

    built = await asyncio.gather(*(one(task_id) for task_id in planned))
    return {task_id: tag for task_id, tag in built if tag is not None}


def require_images(
    images: Mapping[str, str], planned: Mapping[str, int], skipped: Mapping[str, str]
) -> None:
    """NoRunnableTask unless some planned task has an image (`skipped`: task id -> why not),
    said before any engine starts, which takes a minute."""
    if images:
        return
    if not planned:
        raise NoRunnableTask("no task to play: no episode is planned")
    first = next(iter(skipped.items()), ("", ""))
    raise NoRunnableTask(
        f"no task can run: every task image failed to build (e.g. {first[0]}: {first[1]})",
        hint="check the tasks with `obsspec env validate`",
    )


@dataclass
class TaskPools:
    """One sandbox pool per task image, opened on first use, closed after the task's last
    expected episode (`remaining`: task id -> episodes to come); a task with more episodes
    to come keeps one sandbox warm. Each task's limits are capped by `ceiling` (build_images
    said which)."""

    client: Any
    run_id: str
    tasks: Mapping[str, Task]
    images: Mapping[str, str]
    remaining: Counter[str]
    cpuset: str | None = None
    network: NetworkPolicy = NetworkPolicy.none
    ceiling: SandboxCeiling = field(default_factory=SandboxCeiling)
    _pools: dict[str, SandboxPool] = field(default_factory=dict)

    async def __aenter__(self) -> TaskPools:
        self.ceiling = await asyncio.to_thread(within_machine, self.ceiling, self.client)
        return self

    async def __aexit__(self, *exc) -> None:
        await asyncio.gather(*(pool.aclose() for pool in self._pools.values()))

    def expect(self, task_ids: Iterable[str]) -> None:
        """More episodes of these tasks are coming (one per id)."""
        self.remaining.update(task_ids)

    async def pool(self, task: Task) -> SandboxPool:
        if task.id not in self._pools:
            warm = 1 if self.remaining[task.id] > 1 else 0
            limits, _ = capped(with_network(task.limits, self.network), self.ceiling)
            if self.cpuset is not None:
                limits = limits.model_copy(update={"cpuset": self.cpuset})
            pool = SandboxPool(
                self.client, self.images[task.id], limits, size=warm, run_id=self.run_id
            )
            self._pools[task.id] = await pool.__aenter__()
        return self._pools[task.id]

    async def settle(self) -> None:
        """Wait until no pool is starting a sandbox in the background."""
        await asyncio.gather(*(pool.settle() for pool in list(self._pools.values())))

    async def finished(self, task_id: str) -> None:
        self.remaining[task_id] -= 1
        if self.remaining[task_id] <= 0 and task_id in self._pools:
            await self._pools.pop(task_id).aclose()
