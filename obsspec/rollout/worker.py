"""One collection worker: its share of the work items, played over one RolloutSession.

It reads top to bottom:

    open the session (Docker run scope and leftovers of dead runs, the images of its tasks:
    a task whose image fails is reported and skipped, the policy, the speculative loop if
    asked, the sandbox pools); a worker whose every task failed to build has nothing to do
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from obsspec.environments.tasks.model import Task
from obsspec.errors import ObsspecError
from obsspec.inference.base import Engine
from obsspec.rollout.config import CollectConfig
from obsspec.rollout.dataset import ShardWriter, trajectory_row
from obsspec.rollout.events import AttemptFailed, EpisodeDone, Event, ShardWritten, WorkerReady
from obsspec.rollout.plan import WorkItem
from obsspec.rollout.session import NoRunnableTask, RolloutSession
from obsspec.runs import DATA_DIR
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
    share: tuple[int, int] = (0, 1)  # (index, count) of the workers sharing this machine


async def run_worker(
    job: WorkerJob, emit: Emit, *, engine: Engine | None = None, wm_engine: Engine | None = None
) -> None:
    """Play the job's items; engine and wm_engine: engines the caller owns (tests share
    one), passed to the session."""
    config = job.config
    session = RolloutSession(
        config,
        job.models_dir,
        job.tasks,
        name=f"collect-w{job.worker}",
        planned=Counter(item.task_id for item in job.items),
        emit=emit,
        strict=config.strict,
        engine=engine,
        wm_engine=wm_engine,
        share=job.share,
    )
    try:
        await session.__aenter__()
    except NoRunnableTask:
        return  # nothing planned (a finished run resumed: its leftovers are gone), or
        # every task was reported skipped: their episodes are missing
    try:
        items = [item for item in job.items if session.can_play(item.task_id)]
        writer = ShardWriter(
            config.out / DATA_DIR,
            job.shard_prefix,
            shard_episodes=config.shard_episodes,
            shard_seconds=config.shard_seconds,
            on_shard=lambda path, rows: emit(ShardWritten(job.worker, path.name, len(rows))),
        )
        emit(WorkerReady(job.worker, len(items), session.opened_placement().as_dict()))
        try:
            await run_items(job, items, session, writer, emit)
        finally:
            writer.close()  # finished episodes are kept, whatever stopped the run
    finally:
        await session.aclose()


async def run_items(
    job: WorkerJob,
    items: list[WorkItem],
    session: RolloutSession,
    writer: ShardWriter,
    emit: Emit,
) -> None:
    failed_in_a_row = 0

    async def one(item: WorkItem) -> None:
        nonlocal failed_in_a_row
        row, lost = await run_item(job, item, session, emit)
        failed_in_a_row = failed_in_a_row + 1 if lost else 0  # a broken task is no outage
        if failed_in_a_row >= job.config.give_up_after:
            raise InfrastructureDown(
                f"{failed_in_a_row} episodes in a row failed on every attempt; stopping "
                f"(the last failures are in {job.config.out / 'failures.jsonl'})",
                hint="fix the cause (engine, Docker), then rerun the same command to resume",
            )
        if row is not None:
            writer.add(row)
        await session.finished(item.task_id)

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


async def run_item(
    job: WorkerJob, item: WorkItem, session: RolloutSession, emit: Emit
) -> tuple[dict | None, bool]:
    """One episode, retried while the infrastructure fails: (its row, False), or (None, True)
    if the infrastructure failed every attempt, or (None, False) if the task is broken (both
    recorded as failures, left for a rerun)."""
    config = job.config
    task = session.tasks[item.task_id]
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

    played = await session.play(task, item.seed, on_failure=failed)
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
