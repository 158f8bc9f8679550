"""Checking tasks end to end: the reference solution must earn reward 1, doing nothing 0.

Each task gets its image, then two fresh sandboxes: one runs the reference solution command by
command (each timed: the share of slow commands is part of the report) and is verified; the
other is verified untouched.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from environments.sandbox import DockerSandbox
from environments.tasks.images import TaskImages
from environments.tasks.model import Task
from environments.tasks.verifier import verify
from obsspec.errors import ObsspecError

SLOW_COMMAND_S = 1.0


@dataclass
class TaskValidation:
    task: str
    family: str
    solution_reward: float | None = None
    noop_reward: float | None = None
    command_seconds: list[float] = field(default_factory=list)
    failed_commands: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.solution_reward == 1.0 and self.noop_reward == 0.0

    def problems(self) -> list[str]:
        found = [self.error] if self.error else []
        if self.solution_reward is not None and self.solution_reward != 1.0:
            found.append(f"reference solution got reward {self.solution_reward:g}, not 1")
        if self.noop_reward is not None and self.noop_reward != 0.0:
            found.append(f"doing nothing got reward {self.noop_reward:g}, not 0")
        found += [f"solution command failed: {c}" for c in self.failed_commands]
        return found


async def validate_task(task: Task, client, images: TaskImages, run_id: str) -> TaskValidation:
    report = TaskValidation(task.id, str(task.metadata.get("family", "")))
    start = time.monotonic()
    try:
        image = await images.ensure(task)
        solved, untouched = await asyncio.gather(
            run_solution(task, client, image, run_id, report),
            verify_untouched(task, client, image, run_id),
        )
        report.solution_reward, report.noop_reward = solved, untouched
    except ObsspecError as e:
        report.error = str(e)
    report.seconds = time.monotonic() - start
    return report


async def run_solution(task: Task, client, image: str, run_id: str, report: TaskValidation):
    if task.solution is None:
        raise ObsspecError(f"task {task.id} has no reference solution")
    async with DockerSandbox(client, image, task.limits, run_id=run_id) as sandbox:
        for command in task.solution_commands():
            result = await sandbox.run(command, timeout_s=task.agent_timeout_s)
            report.command_seconds.append(result.duration_s)
            if result.exit_code != 0:
                report.failed_commands.append(command)
        return (await verify(task, sandbox)).reward


async def verify_untouched(task: Task, client, image: str, run_id: str) -> float:
    async with DockerSandbox(client, image, task.limits, run_id=run_id) as sandbox:
        return (await verify(task, sandbox)).reward


async def validate_tasks(
    tasks: list[Task],
    client,
    run_id: str,
    *,
    concurrency: int = 2,
    on_done: Callable[[TaskValidation], None] = lambda _: None,
    on_log: Callable[[str], None] = lambda _: None,
) -> list[TaskValidation]:
    images = TaskImages(client, max_parallel_builds=concurrency, on_log=on_log)
    gate = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> TaskValidation:
        async with gate:
            report = await validate_task(task, client, images, run_id)
        on_done(report)
        return report

    return list(await asyncio.gather(*(one(t) for t in tasks)))


def summarize(reports: list[TaskValidation]) -> dict:
    seconds = [s for r in reports for s in r.command_seconds]
    families = sorted({r.family for r in reports if r.family})
    return {
        "tasks": len(reports),
        "solution_pass": sum(r.solution_reward == 1.0 for r in reports),
        "noop_fail": sum(r.noop_reward == 0.0 for r in reports),
        "ok": sum(r.ok for r in reports),
        "families": families,
        "solution_commands": len(seconds),
        "slow_command_share": round(sum(s >= SLOW_COMMAND_S for s in seconds) / len(seconds), 3)
        if seconds
        else 0.0,
        "failures": [{"task": r.task, "problems": r.problems()} for r in reports if not r.ok],
    }
