"""Which observations vary between two runs of the same commands (issue 25).

A world model must predict each command's observation exactly; an output that carries a date,
a commit hash, a pid or a timing differs between two runs of the same commands, and no model
can predict it. This module measures how often that happens: each task's reference solution
is played command by command (Task.solution_commands(), what an agent would type) in N fresh
sandboxes of the task's image, one after the other, and the canonical observations
(obsspec.types.render_observation) of runs 2..N are compared with those of run 1.

    reports = await measure_tasks(tasks, client, run_id, runs=2, concurrency=2)
    summary = summarize(reports)
    summary["overall"]["differ_share"]      # share of compared observations that differ
    summary["by_family"]["git-bisect"]      # the same figures for one family
    summary["differences"][0]["first_line"] # e.g. ["Date: Mon ...", "Date: Tue ..."]

The runs of one task are sequential (never at once), so that two runs a second apart show a
clock that `date` prints to the second. A task that cannot run (its image does not build, it
has no solution, a sandbox fails) is reported with the reason, never dropped.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from obsspec.environments.errors import ImageBuildError, TaskFormatError
from obsspec.environments.sandbox import DockerSandbox, NetworkPolicy, with_network
from obsspec.environments.tasks.images import TaskImages
from obsspec.environments.tasks.model import Task
from obsspec.errors import ObsspecError
from obsspec.types import first_differing_line, render_observation

EXTERNAL_FAMILY = "external"  # tasks without a built-in family (Harbor, Terminal-Bench)
DEFAULT_COMMAND_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Difference:
    """One observation that differs between run 1 and another run of the same command."""

    task: str
    family: str
    index: int  # the command's position in the solution, from 0
    command: str
    run: int  # the run (from 1) whose observation differs from run 1's
    line: int  # the first differing line, from 1
    first_line: tuple[str, str]  # that line in run 1 and in `run` ("" past the end)

    def row(self) -> dict:
        return {
            "task": self.task,
            "family": self.family,
            "index": self.index,
            "command": self.command,
            "run": self.run,
            "line": self.line,
            "first_line": list(self.first_line),
        }


@dataclass
class TaskDeterminism:
    """One task's runs: the commands played and each run's observations, or why it could not
    run (`error`)."""

    task: str
    family: str
    commands: list[str] = field(default_factory=list)
    runs: list[list[str]] = field(default_factory=list)  # [run][command] observation
    error: str | None = None
    seconds: float = 0.0

    @property
    def ran(self) -> bool:
        return self.error is None

    def compared(self) -> int:
        """Observations compared: each command of each run after the first."""
        return len(self.commands) * max(len(self.runs) - 1, 0) if self.ran else 0

    def differences(self) -> list[Difference]:
        return compare_runs(self.task, self.family, self.commands, self.runs) if self.ran else []


def compare_runs(
    task: str, family: str, commands: Sequence[str], runs: Sequence[Sequence[str]]
) -> list[Difference]:
    """Every observation of runs 2..N that differs from run 1's for the same command."""
    differences = []
    if not runs:
        return differences
    reference = runs[0]
    for run_number, observations in enumerate(runs[1:], start=2):
        for index, command in enumerate(commands):
            found = first_differing_line(reference[index], observations[index])
            if found is not None:
                line, line_a, line_b = found
                differences.append(
                    Difference(task, family, index, command, run_number, line, (line_a, line_b))
                )
    return differences


def family_of(task: Task) -> str:
    """The built-in family a generated task records, else EXTERNAL_FAMILY."""
    return str(task.metadata.get("family") or EXTERNAL_FAMILY)


async def play(sandbox, commands: Sequence[str], timeout_s: float) -> list[str]:
    """Each command's canonical observation, typed one at a time in one sandbox's shell."""
    observations = []
    for command in commands:
        result = await sandbox.run(command, timeout_s=timeout_s)
        observations.append(render_observation(result))
    return observations


async def measure_task(
    task: Task,
    client,
    images: TaskImages,
    run_id: str,
    *,
    runs: int = 2,
    network: NetworkPolicy = NetworkPolicy.none,
    command_timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S,
    deterministic: bool | None = None,
) -> TaskDeterminism:
    """Play a task's solution in `runs` fresh sandboxes, one after the other. `deterministic`
    overrides the task's own setting (None: keep it), to measure with and without."""
    report = TaskDeterminism(task.id, family_of(task))
    start = time.monotonic()
    try:
        report.commands = task.solution_commands()
        if not report.commands:
            raise_no_solution(task)
        image = await images.ensure(task)
        limits = with_network(task.limits, network)
        if deterministic is not None:
            limits = limits.model_copy(update={"deterministic": deterministic})
        for _ in range(runs):
            async with DockerSandbox(client, image, limits, run_id=run_id) as sandbox:
                report.runs.append(await play(sandbox, report.commands, command_timeout_s))
    except ImageBuildError as e:
        report.error = e.with_log()  # the report is the place for the build log
    except ObsspecError as e:
        report.error = str(e)
    report.seconds = time.monotonic() - start
    return report


def not_loaded(path: Path, error: Exception) -> TaskDeterminism:
    """The report of a task directory that does not load: not run, with the reason."""
    return TaskDeterminism(path.name, EXTERNAL_FAMILY, error=str(error))


def raise_no_solution(task: Task) -> None:
    raise TaskFormatError(
        task.path,
        "no reference solution (or an empty one): there are no commands to play",
        field="solution",
        hint="add solution/solve.sh (Harbor) or solution.sh (Terminal-Bench v1)",
    )


async def measure_tasks(
    tasks: Sequence[Task],
    client,
    run_id: str,
    *,
    runs: int = 2,
    concurrency: int = 1,
    on_done: Callable[[TaskDeterminism], None] = lambda _: None,
    on_log: Callable[[str], None] = lambda _: None,
    image_map: Mapping[str, str] | None = None,
    network: NetworkPolicy = NetworkPolicy.none,
    command_timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S,
    deterministic: bool | None = None,
) -> list[TaskDeterminism]:
    """measure_task for every task, `concurrency` tasks at once, in the order given."""
    if runs < 2:
        raise ValueError(f"runs must be at least 2 to compare runs, got {runs}")
    images = TaskImages(
        client,
        image_map=image_map,
        max_parallel_builds=concurrency,
        on_log=on_log,
        network=network,  # builds too, under the sandbox ceiling
    )
    gate = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> TaskDeterminism:
        async with gate:
            report = await measure_task(
                task,
                client,
                images,
                run_id,
                runs=runs,
                network=network,
                command_timeout_s=command_timeout_s,
                deterministic=deterministic,
            )
        on_done(report)
        return report

    return list(await asyncio.gather(*(one(t) for t in tasks)))


def figures(reports: Sequence[TaskDeterminism]) -> dict:
    """Tasks run, observations compared, those that differ and their share (None: none)."""
    compared = sum(r.compared() for r in reports)
    differ = sum(len(r.differences()) for r in reports)
    return {
        "tasks": sum(r.ran for r in reports),
        "not_run": sum(not r.ran for r in reports),
        "commands": sum(len(r.commands) for r in reports if r.ran),
        "compared": compared,
        "differ": differ,
        "differ_share": round(differ / compared, 4) if compared else None,
    }


def summarize(reports: Sequence[TaskDeterminism], runs: int = 2) -> dict:
    """The JSON report: overall and per-family figures, every differing observation, and
    the tasks that could not run with the reason."""
    families: dict[str, list[TaskDeterminism]] = defaultdict(list)
    for report in reports:
        families[report.family].append(report)
    return {
        "runs": runs,
        "overall": figures(reports),
        "by_family": {name: figures(group) for name, group in sorted(families.items())},
        "differences": [d.row() for r in reports for d in r.differences()],
        "not_run": [
            {"task": r.task, "family": r.family, "error": r.error} for r in reports if not r.ran
        ],
        "tasks": [
            {
                "task": r.task,
                "family": r.family,
                "commands": len(r.commands),
                "differ": len(r.differences()),
                "seconds": round(r.seconds, 2),
                "error": r.error,
            }
            for r in reports
        ],
    }
