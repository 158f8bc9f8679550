"""One collection worker: many episodes at once over one engine and per-task sandbox pools.

It reads top to bottom:

    connect to Docker under a fresh run id (its containers are removed however it ends), and
    remove the containers that dead runs on this host left behind (e.g. a killed collect)
    build the images of its tasks (a task whose image fails is reported and skipped)
    load the policy (tokenizer + engine, or the oracle), and the speculative loop if asked
    (predictors, the world model's engine)
    run the work items, `concurrency` at a time; each episode is retried while the
    infrastructure fails (up to max_attempts), then written to the shard buffer; an episode
    whose task is broken (a verifier that gives no usable reward) is reported, not retried
    on any exit (done, error, Ctrl-C / cancellation): write the finished rows as a shard

The same function runs in the CLI process (no Ray) and inside each Ray actor; it reports
through `emit` and writes only its own shards, named by session and worker.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from environments.errors import ImageBuildError
from environments.gc import gc_containers, run_scope
from environments.pool import SandboxPool
from environments.sandbox import NetworkPolicy, denied_internet, with_network
from environments.tasks.images import TaskImages
from environments.tasks.model import Task
from obsspec.agent.episode import run_episode
from obsspec.errors import ObsspecError
from obsspec.inference.base import Engine
from obsspec.rollout.config import CollectConfig
from obsspec.rollout.dataset import ShardWriter, trajectory_row
from obsspec.rollout.events import (
    AttemptFailed,
    EpisodeDone,
    Event,
    Note,
    ShardWritten,
    TaskSkipped,
    WorkerReady,
)
from obsspec.rollout.plan import WorkItem
from obsspec.rollout.policy import Policy, open_policy
from obsspec.rollout.speculation import open_speculation
from obsspec.runs import DATA_DIR
from obsspec.speculation.runner import SpeculativeLoop
from obsspec.trajectory import Trajectory

Emit = Callable[[Event], None]


class InfrastructureDown(ObsspecError):
    """Episode after episode fails on the infrastructure: the run stops instead of spinning."""


@dataclass(frozen=True)
class WorkerJob:
    """Everything a worker needs; picklable, so that it can be sent to a Ray actor."""

    config: CollectConfig
    models_dir: Path
    tasks: list[Task]
    items: list[WorkItem]
    run_id: str  # the collection run (recorded in every row)
    shard_prefix: str  # unique per invocation and worker
    worker: int = 0


async def run_worker(
    job: WorkerJob, emit: Emit, *, engine: Engine | None = None, wm_engine: Engine | None = None
) -> None:
    config = job.config
    tasks = {task.id: task for task in job.tasks}
    with run_scope(f"collect-w{job.worker}") as (client, docker_run):
        # A run killed with SIGKILL leaves its containers; resuming it is the moment to go.
        leftovers = await asyncio.to_thread(gc_containers, client)
        if leftovers.removed:
            emit(Note(f"removed {len(leftovers.removed)} containers of dead runs"))
        images = await build_images(
            client, tasks, job.items, config.strict, emit, config.images.map, config.network
        )
        items = [item for item in job.items if item.task_id in images]
        if not items:
            return
        async with (
            open_policy(config, job.models_dir, engine=engine) as policy,
            open_speculation(config, job.models_dir, policy, wm_engine=wm_engine) as loop,
            TaskPools(
                client, docker_run, tasks, images, items, config.sandbox_cpuset, config.network
            ) as pools,
        ):
            writer = ShardWriter(
                job.config.out / DATA_DIR,
                job.shard_prefix,
                shard_episodes=config.shard_episodes,
                shard_seconds=config.shard_seconds,
                on_shard=lambda path, rows: emit(ShardWritten(job.worker, path.name, len(rows))),
            )
            emit(WorkerReady(job.worker, len(items)))
            try:
                await run_items(job, items, tasks, Runner(policy, loop), pools, writer, emit)
            finally:
                writer.close()  # finished episodes are kept, whatever stopped the run


async def build_images(
    client,
    tasks: dict[str, Task],
    items: list[WorkItem],
    strict: bool,
    emit: Emit,
    image_map: Mapping[str, str] | None = None,
    network: NetworkPolicy = NetworkPolicy.none,
) -> dict[str, str]:
    """task id -> image tag for every task with work whose image exists or builds (FROM
    images replaced as image_map says); says which tasks the network policy denies internet."""
    planned = Counter(item.task_id for item in items)
    builder = TaskImages(client, image_map=image_map)
    emit(Note(f"preparing {len(planned)} task images"))
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
            reason = f"image build failed: {e}"
            emit(TaskSkipped(task_id, reason, planned[task_id], tuple(e.log_tail)))
            return task_id, None

    built = await asyncio.gather(*(one(task_id) for task_id in planned))
    return {task_id: tag for task_id, tag in built if tag is not None}


async def run_items(
    job: WorkerJob,
    items: list[WorkItem],
    tasks: dict[str, Task],
    runner: Runner,
    pools: TaskPools,
    writer: ShardWriter,
    emit: Emit,
) -> None:
    gate = asyncio.Semaphore(job.config.concurrency)
    failed_in_a_row = 0

    async def one(item: WorkItem) -> None:
        nonlocal failed_in_a_row
        async with gate:
            row, lost = await run_item(job, item, tasks[item.task_id], runner, pools, emit)
        failed_in_a_row = failed_in_a_row + 1 if lost else 0  # a broken task is no outage
        if failed_in_a_row >= job.config.give_up_after:
            raise InfrastructureDown(
                f"{failed_in_a_row} episodes in a row failed on every attempt; stopping "
                f"(the last failures are in {job.config.out / 'failures.jsonl'})",
                hint="fix the cause (engine, Docker), then rerun the same command to resume",
            )
        if row is not None:
            writer.add(row)
        await pools.finished(item.task_id)

    async def flush_when_due() -> None:
        while True:
            await asyncio.sleep(1.0)
            writer.flush_if_due()

    flusher = asyncio.create_task(flush_when_due())
    try:
        async with asyncio.TaskGroup() as group:
            for item in items:
                group.create_task(one(item))
    except BaseExceptionGroup as failures:
        raise first_failure(failures) from None  # the others were cancelled because of it
    finally:
        flusher.cancel()


def first_failure(group: BaseExceptionGroup) -> BaseException:
    """The error to report from a task group: an obsspec error when there is one."""
    leaves = []
    stack = [group]
    while stack:
        for error in stack.pop().exceptions:
            (stack if isinstance(error, BaseExceptionGroup) else leaves).append(error)
    return next((e for e in leaves if isinstance(e, ObsspecError)), leaves[0])


@dataclass(frozen=True)
class Runner:
    """How a worker plays episodes: the policy, and the speculative loop (None: sequential)."""

    policy: Policy
    loop: SpeculativeLoop | None


async def run_item(
    job: WorkerJob, item: WorkItem, task: Task, runner: Runner, pools: TaskPools, emit: Emit
) -> tuple[dict | None, bool]:
    """One episode, retried while the infrastructure fails: (its row, False), or (None, True)
    if the infrastructure failed every attempt, or (None, False) if the task is broken (both
    recorded as failures, left for a rerun)."""
    config = job.config
    lost = False

    def failed(trajectory: Trajectory, attempt: int, final: bool) -> None:
        nonlocal lost
        error_type, error = trajectory.error_type or "Error", trajectory.error or ""
        index = item.episode_index
        retryable = trajectory.error_kind == "infra"
        lost = final and retryable
        emit(
            AttemptFailed(job.worker, task.id, index, attempt, error_type, error, final, retryable)
        )

    played = await play_with_retries(task, item, runner, pools, config, failed)
    if played is None:
        return None, lost
    trajectory, attempt = played
    emit(EpisodeDone.of(job.worker, item.episode_index, trajectory, attempt))
    row = trajectory_row(
        trajectory,
        run_id=job.run_id,
        episode_index=item.episode_index,
        policy=config.policy,
        attempts=attempt,
    )
    return row, False


async def play_with_retries(
    task: Task,
    item: WorkItem,
    runner: Runner,
    pools: TaskPools,
    config: CollectConfig,
    on_failure: Callable[[Trajectory, int, bool], None],
) -> tuple[Trajectory, int] | None:
    """One episode, run again while the infrastructure fails (up to config.max_attempts):
    the trajectory and the attempt that gave it, or None. A broken task (error_kind "task",
    e.g. a VerifierError) is not retried: its one attempt is final, and None. on_failure(
    trajectory, attempt, final) hears of every failed attempt."""
    policy = runner.policy
    limits = policy.limits_for(task, config.limits)
    for attempt in range(1, config.max_attempts + 1):
        trajectory = await run_episode(
            task,
            await pools.pool(task),
            policy.engine_for(task),
            policy.builder,
            limits,
            seed=item.seed,
            model=policy.name,
            loop=runner.loop,
        )
        if trajectory.error_kind == "task":
            on_failure(trajectory, attempt, True)  # the same task fails the same way again
            return None
        if trajectory.error_kind != "infra":
            return trajectory, attempt
        on_failure(trajectory, attempt, attempt == config.max_attempts)
    return None


class TaskPools:
    """One sandbox pool per task image, opened on first use, closed after the task's last
    episode; a task with more episodes to come keeps one sandbox warm."""

    def __init__(
        self,
        client,
        run_id: str,
        tasks: dict[str, Task],
        images: dict[str, str],
        items: list[WorkItem],
        cpuset: str | None = None,
        network: NetworkPolicy = NetworkPolicy.none,
    ) -> None:
        self.client = client
        self.cpuset = cpuset
        self.network = network
        self.run_id = run_id
        self.tasks = tasks
        self.images = images
        self.remaining = Counter(item.task_id for item in items)
        self._pools: dict[str, SandboxPool] = {}

    async def __aenter__(self) -> TaskPools:
        return self

    async def __aexit__(self, *exc) -> None:
        await asyncio.gather(*(pool.aclose() for pool in self._pools.values()))

    async def pool(self, task: Task) -> SandboxPool:
        if task.id not in self._pools:
            warm = 1 if self.remaining[task.id] > 1 else 0
            limits = with_network(task.limits, self.network)
            if self.cpuset is not None:
                limits = limits.model_copy(update={"cpuset": self.cpuset})
            pool = SandboxPool(
                self.client, self.images[task.id], limits, size=warm, run_id=self.run_id
            )
            self._pools[task.id] = await pool.__aenter__()
        return self._pools[task.id]

    async def finished(self, task_id: str) -> None:
        self.remaining[task_id] -= 1
        if self.remaining[task_id] == 0 and task_id in self._pools:
            await self._pools.pop(task_id).aclose()
