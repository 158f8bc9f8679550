"""`obsspec env generate|validate|shell`: the task suite and working inside a task's sandbox."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from cli.common import JsonOption, emit_json, err, out, progress_printer


def generate(
    out_dir: Annotated[Path, typer.Option("--out", help="Directory to write tasks into.")],
    n: Annotated[int, typer.Option("--n", min=1, help="Number of tasks.")] = 24,
    seed: Annotated[int, typer.Option("--seed", help="Same seed, byte-identical tasks.")] = 0,
    families: Annotated[
        str | None, typer.Option("--families", help="Comma-separated families \\[default: all].")
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Write N Harbor-format tasks from the built-in procedural families (round robin)."""
    from environments.suite import FAMILIES
    from environments.suite import generate as write_suite

    chosen = [f.strip() for f in families.split(",") if f.strip()] if families else None
    try:
        paths = write_suite(out_dir, n, seed, chosen)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--families") from None
    names = sorted({p.name.rsplit("-", 1)[0] for p in paths})
    if json_output:
        emit_json({"out": str(out_dir), "tasks": len(paths), "seed": seed, "families": names})
        return
    out.print(f"wrote {len(paths)} tasks ({len(names)} families of {len(FAMILIES)}) to {out_dir}")


def validate(
    tasks: Annotated[
        str, typer.Argument(help="A task directory, a directory of tasks, or a glob.")
    ],
    concurrency: Annotated[
        int, typer.Option(min=1, help="Tasks checked at once (1 gives honest command timings).")
    ] = 1,
    json_output: JsonOption = False,
) -> None:
    """Check every task: the reference solution must get reward 1, doing nothing reward 0.

    Exits 1 if any task fails; the JSON lists each failure with its reasons.
    """
    from environments.gc import run_scope
    from environments.tasks import load_tasks
    from environments.validate import summarize, validate_tasks

    loaded = load_tasks(tasks)
    done = 0

    def show(report) -> None:
        nonlocal done
        done += 1
        mark = "[green]ok[/green]" if report.ok else "[red]FAIL[/red]"
        err.print(
            f"[{done}/{len(loaded)}] {mark} {report.task} ({report.seconds:.1f} s)"
            + ("" if report.ok else f": {'; '.join(report.problems())}"),
            markup=True,
        )

    with run_scope("validate") as (client, run_id):
        reports = asyncio.run(
            validate_tasks(loaded, client, run_id, concurrency=concurrency, on_done=show)
        )
    summary = summarize(reports)
    if json_output:
        emit_json(summary)
    else:
        render_summary(summary)
    if summary["ok"] != summary["tasks"]:
        raise typer.Exit(1)


def render_summary(summary: dict) -> None:
    table = Table(title="task validation")
    table.add_column("tasks")
    table.add_column("solution gets 1")
    table.add_column("no-op gets 0")
    table.add_column("families")
    table.add_column("slow commands (>= 1 s)")
    table.add_row(
        str(summary["tasks"]),
        str(summary["solution_pass"]),
        str(summary["noop_fail"]),
        str(len(summary["families"])),
        f"{summary['slow_command_share']:.0%}",
    )
    out.print(table)
    for failure in summary["failures"]:
        out.print(f"[red]{failure['task']}[/red]: {'; '.join(failure['problems'])}")


def shell(
    task: Annotated[
        Path | None, typer.Argument(help="Task directory (its image is built).")
    ] = None,
    image: Annotated[str | None, typer.Option("--image", help="Use an image, not a task.")] = None,
    solution: Annotated[
        bool, typer.Option("--solution", help="Run the reference solution first.")
    ] = False,
    verify_after: Annotated[
        bool, typer.Option("--verify", help="Run the verifier at the end.")
    ] = False,
    timeout: Annotated[float, typer.Option(min=0.1, help="Seconds per command.")] = 120.0,
) -> None:
    """A persistent shell in a task's sandbox, for humans debugging tasks.

    Reads one command per line from stdin (a prompt when it is a terminal; a script when
    piped) and prints each command's observation exactly as the agent would see it.
    """
    if (task is None) == (image is None):
        raise typer.BadParameter("give a task directory or --image, not both")
    asyncio.run(_shell(task, image, solution, verify_after, timeout))


async def _shell(task_dir, image, solution, verify_after, timeout) -> None:
    from environments.gc import run_scope
    from environments.sandbox import DockerSandbox
    from environments.tasks import load_task
    from environments.tasks.images import TaskImages

    task = load_task(task_dir) if task_dir else None
    with run_scope("shell") as (client, run_id):
        if task is not None:
            image = await TaskImages(client, on_log=progress_printer()).ensure(task)
            err.print(f"[bold]{task.id}[/bold]: {task.instruction.strip()}", markup=True)
        limits = task.limits if task else None
        async with DockerSandbox(client, image, limits, run_id=run_id) as sb:
            await _session(task, sb, solution, verify_after, timeout)


async def _session(task, sb, solution, verify_after, timeout) -> None:
    """The reference solution (if asked), then stdin's commands, then the verifier."""
    from environments.tasks.verifier import verify
    from obsspec.types import render_observation

    commands = task.solution_commands() if (task and solution) else []
    for command in [*commands, *read_commands()]:
        if commands and command == commands[0]:
            err.print("[dim]-- reference solution --[/dim]", markup=True)
        result = await sb.run(command, timeout_s=timeout)
        if not sys.stdin.isatty() or command in commands:
            out.print(f"$ {command}", markup=False, highlight=False)
        out.print(render_observation(result), markup=False, highlight=False)
    if task is not None and verify_after:
        outcome = await verify(task, sb)
        out.print(f"reward: {outcome.reward:g} (verifier {outcome.seconds:.1f} s)")


def read_commands():
    """Lines from stdin; with a terminal, prompt for each and stop on EOF (Ctrl-D)."""
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            err.print("[bold cyan]sandbox$[/bold cyan] ", end="", markup=True)
        line = sys.stdin.readline()
        if not line:
            return
        if line.strip():
            yield line.rstrip("\n")
