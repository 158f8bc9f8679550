"""`obsspec collect`: many episodes into a dataset, resumable, on one machine or on Ray.

    summary = await collect(config, models_dir, on_event)

It reads top to bottom:

    check the policy's model (and the world model's tokenizer) and load the tasks (broken
    ones are reported and skipped, or fatal with strict)
    check the run directory, touching nothing: a new run, the same run resumed (its tasks
    unchanged), or a run with no finished episode replaced; another run there is refused
    unless overwrite; then make it (writable, free space), lock it, and claim it
    read which episodes the finished shards already hold; plan the rest
    run them: in this process, or split across Ray workers
    every event updates the totals; shards update the manifest; failed attempts and skipped
    tasks go to failures.jsonl; the manifest's status says how the invocation ended:
    complete (every episode asked for is in the dataset), incomplete (some are), empty (none
    is: e.g. every task is broken), interrupted or failed
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from obsspec.environments.tasks.model import Task
from obsspec.errors import ObsspecError
from obsspec.inference.base import Engine
from obsspec.rollout.config import CollectConfig
from obsspec.rollout.dataset import completed_episodes
from obsspec.rollout.events import AttemptFailed, Event, Note, ShardWritten, TaskSkipped
from obsspec.rollout.plan import WorkItem, check_unchanged, load_task_set, plan_items
from obsspec.rollout.policy import check_policy_model, playable_tasks
from obsspec.rollout.rundir import RunDir, now
from obsspec.rollout.speculation import check_world_model
from obsspec.rollout.stats import CollectStats
from obsspec.rollout.worker import WorkerJob, run_worker

OnEvent = Callable[[Event, CollectStats], None]


async def collect(
    config: CollectConfig,
    models_dir: Path,
    on_event: OnEvent = lambda _event, _stats: None,
    *,
    engine: Engine | None = None,
    wm_engine: Engine | None = None,
) -> dict:
    """Run the episodes config asks for that the run directory lacks; the summary."""
    # Bad input fails before anything is made: an unknown model or world model (or one with
    # another tokenizer, or one that does not load), no tasks, a broken task under strict, a
    # Ray address where no cluster answers, a run directory this run may not use.
    check_policy_model(config, models_dir)
    check_world_model(config, models_dir)
    tasks, broken = load_task_set(config.tasks, strict=config.strict)
    if config.is_oracle:  # a task whose solution the oracle cannot play is skipped, named
        tasks, refused = playable_tasks(tasks, config.limits.action_format, strict=config.strict)
        broken.update(refused)
    if config.workers and config.ray_address:
        from obsspec.rollout.ray_workers import check_answers

        check_answers(config.ray_address)  # no cluster there: fail before anything is made
    task_set = {task.id: task.content_hash for task in tasks}
    identity = config.identity(task_set)
    inputs = {"--tasks": config.tasks, "--policy": config.policy}
    rundir = RunDir(config.out)
    verdict = rundir.check(identity, overwrite=config.overwrite, tasks=task_set, inputs=inputs)
    if verdict.resumes:
        check_unchanged(tasks, completed_episodes(rundir.data))
    rundir.preflight(config.min_free_mb)
    with rundir.locked():
        manifest = rundir.claim(identity, overwrite=config.overwrite, inputs=inputs) or {
            "run_id": f"collect-{uuid.uuid4().hex[:8]}",
            "created_at": now(),
        }
        rundir.clean_partial()
        done = completed_episodes(rundir.data)
        items = plan_items(tasks, config.episodes_per_task, config.seed, set(done))
        # Every task found is asked for: one that does not load, or that its image or the
        # oracle cannot run, counts as missing episodes, wherever it was found broken.
        total = (len(tasks) + len(broken)) * config.episodes_per_task
        stats = CollectStats(
            total=total, already_done=len(tasks) * config.episodes_per_task - len(items)
        )
        manifest.update(
            identity=identity,  # a resumed run's identity as written now (with its task set)
            config=config.model_dump(mode="json"),
            tasks=task_set,
            episodes_total=total,
            status="running",
        )

        def handle(event: Event) -> None:
            stats.update(event)
            if isinstance(event, AttemptFailed):
                rundir.record_failure({"event": "attempt_failed", **asdict(event)})
            if isinstance(event, TaskSkipped):
                rundir.record_failure({"event": "task_skipped", **asdict(event)})
            if isinstance(event, ShardWritten | TaskSkipped):
                write_progress(rundir, manifest, stats)
            on_event(event, stats)

        if verdict.note:
            handle(Note(verdict.note))
        for path, reason in broken.items():
            handle(TaskSkipped(path, reason, config.episodes_per_task))
        write_progress(rundir, manifest, stats)
        try:
            await run_workers(
                config, models_dir, tasks, items, manifest["run_id"], handle, engine, wm_engine
            )
        except BaseException as e:
            stopped = isinstance(e, asyncio.CancelledError | KeyboardInterrupt)
            write_progress(rundir, manifest, stats, status="interrupted" if stopped else "failed")
            if isinstance(e, ObsspecError) and e.details:  # e.g. --strict and a build's log
                keep_details(rundir, e)
            raise
        status = run_status(stats)
        write_progress(rundir, manifest, stats, status=status)
    return {**stats.summary(), "out": str(config.out), "status": status}


async def run_workers(
    config: CollectConfig,
    models_dir: Path,
    tasks: list[Task],
    items: list[WorkItem],
    run_id: str,
    handle: Callable[[Event], None],
    engine: Engine | None,
    wm_engine: Engine | None = None,
) -> None:
    session = uuid.uuid4().hex[:8]  # shard names of this invocation never collide
    workers = max(config.workers, 1)
    jobs = [
        WorkerJob(
            config,
            models_dir,
            tasks,
            items[index::workers],  # interleaved: every worker gets a mix of tasks
            run_id,
            f"shard-{session}-w{index:02d}",
            index,
            # A local Ray cluster's workers share this machine's cores: each places its
            # engines in its own slice. On a joined cluster each node's cores are its own.
            share=(index, workers) if config.workers and not config.ray_address else (0, 1),
        )
        for index in range(workers)
    ]
    if config.workers == 0:
        await run_worker(jobs[0], handle, engine=engine, wm_engine=wm_engine)
    else:
        from obsspec.rollout.ray_workers import run_on_ray

        await run_on_ray(jobs, config.ray_address, handle)


def run_status(stats: CollectStats) -> str:
    if stats.missing == 0:
        return "complete"
    return "incomplete" if stats.collected else "empty"


def keep_details(rundir: RunDir, error: ObsspecError) -> None:
    """The error's extra lines move to failures.jsonl, and its hint says so: the message the
    user reads stays one line."""
    rundir.record_failure(
        {
            "event": "run_failed",
            "error_type": type(error).__name__,
            "error": str(error),
            "log_tail": error.details,
        }
    )
    where = f"the log's last lines are in {rundir.failures_path}"
    error.hint = f"{error.hint}; {where}" if error.hint else where
    error.details = []


def write_progress(
    rundir: RunDir, manifest: dict, stats: CollectStats, *, status: str | None = None
) -> None:
    if status is not None:
        manifest["status"] = status
    manifest.update(
        episodes_done=stats.already_done + stats.saved,
        failed_attempts=stats.retries + stats.lost,
        skipped_tasks=stats.skipped_tasks,
    )
    rundir.write_manifest(manifest)
