"""`obsspec env determinism TASKS`: which observations vary between runs of the same commands.

    obsspec env determinism tasks/ --runs 2 --concurrency 2
    obsspec env determinism 'tasks/git-*' --json | jq .by_family

The logic is environments.determinism; this file parses flags and renders its summary.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from obsspec.cli.common import (
    ConfigOption,
    ImageMapOption,
    JsonOption,
    NetworkOption,
    SetOption,
    config_sets,
    emit_json,
    err,
    global_config,
    out,
    progress_printer,
)
from obsspec.cli.exits import PARTIAL
from obsspec.cli.limit_options import TIMEOUT_RANGE, timeout_seconds
from obsspec.environments.sandbox import NetworkPolicy

EXAMPLES_PER_FAMILY = 3  # differing observations shown per family in the table (all in --json)
LINE_CHARS = 70  # a differing line is cut to this many characters in the table


def determinism(
    tasks: Annotated[
        str, typer.Argument(help="A task directory, a directory of tasks, or a glob.")
    ],
    runs: Annotated[
        int, typer.Option(min=2, help="Fresh sandboxes per task; runs 2.. are compared with 1.")
    ] = 2,
    concurrency: Annotated[int, typer.Option(min=1, help="Tasks played at once.")] = 1,
    timeout: Annotated[
        float,
        typer.Option(callback=timeout_seconds, help=f"Seconds per command ({TIMEOUT_RANGE})."),
    ] = 120.0,
    deterministic: Annotated[
        bool | None,
        typer.Option(
            "--deterministic/--no-deterministic",
            help="Fix git dates, hash seed and $RANDOM in every task's shell, or in none "
            "(default: as each task says; on unless its task.toml sets deterministic = false).",
            show_default=False,
        ),
    ] = None,
    image_map: ImageMapOption = None,
    network: NetworkOption = None,
    json_output: JsonOption = False,
    config: ConfigOption = None,
    set_keys: SetOption = None,
) -> None:
    """Play each task's reference solution, command by command, in --runs fresh sandboxes and
    count the observations that differ from the first run's (dates, hashes, pids, timings).

    The commands are those an agent would type (the solution cut by bash's parser); each
    observation is the canonical text the world model must predict. Prints, by family and
    overall, the commands, the observations that differ and their share, then for the
    differing ones the task, the command and the first line that differs in each run
    (--json: one object with all of them). A task that cannot run (no solution, an image that
    does not build) is named with the reason; then the exit code is 3, else 0.
    """
    from obsspec.environments.determinism import measure_tasks, not_loaded, summarize
    from obsspec.environments.gc import run_scope
    from obsspec.environments.tasks.load import load_tasks_report

    settings = global_config(
        config, sets=config_sets(set_keys), image_map=image_map, runs_tasks=True
    )
    loaded, broken = load_tasks_report(tasks)
    total, done = len(loaded), 0

    def show(report) -> None:
        nonlocal done
        done += 1
        differ = len(report.differences())
        status = (
            Text(f"{differ} differ", style="yellow" if differ else "green")
            if report.ran
            else Text("not run", style="red")
        )
        err.print(
            Text.assemble(f"[{done}/{total}] ", status, f" {report.task} ({report.seconds:.1f} s)")
        )

    with run_scope("determinism") as (client, run_id):
        reports = asyncio.run(
            measure_tasks(
                loaded,
                client,
                run_id,
                runs=runs,
                concurrency=concurrency,
                on_done=show,
                on_log=progress_printer(),
                image_map=settings.images.map,
                network=network or NetworkPolicy.none,
                command_timeout_s=timeout,
                deterministic=deterministic,
            )
        )
    summary = summarize([*(not_loaded(path, e) for path, e in broken), *reports], runs=runs)
    summary["deterministic"] = "as each task says" if deterministic is None else deterministic
    if json_output:
        emit_json(summary)
    else:
        render(summary)
    if summary["not_run"]:
        raise typer.Exit(PARTIAL)


def render(summary: dict) -> None:
    """The by-family table, a few differing observations per family, the tasks not run."""
    table = Table(title=f"observations that differ between {summary['runs']} runs")
    for column in ("family", "tasks", "not run", "commands", "compared", "differ", "share"):
        table.add_column(column, justify="left" if column == "family" else "right")
    for name, row in summary["by_family"].items():
        table.add_row(Text(name), *figure_cells(row))
    table.add_row(Text("overall", style="bold"), *figure_cells(summary["overall"]))
    out.print(table)
    shown: dict[str, int] = {}
    for diff in summary["differences"]:
        shown[diff["family"]] = shown.get(diff["family"], 0) + 1
        if shown[diff["family"]] > EXAMPLES_PER_FAMILY:
            continue
        first, other = (cut(line) for line in diff["first_line"])
        out.print(Text(f"{diff['task']} #{diff['index']}: $ {cut(diff['command'])}", style="bold"))
        out.print(Text(f"  run 1, line {diff['line']}: {first}"))
        out.print(Text(f"  run {diff['run']}, line {diff['line']}: {other}"))
    hidden = sum(max(count - EXAMPLES_PER_FAMILY, 0) for count in shown.values())
    if hidden:
        out.print(f"... and {hidden} more differing observations (--json lists all)")
    for row in summary["not_run"]:
        out.print(Text.assemble(("not run: ", "red"), row["task"], f": {cut(row['error'], 200)}"))


def figure_cells(row: dict) -> list[str]:
    share = "-" if row["differ_share"] is None else f"{row['differ_share']:.1%}"
    counts = ("tasks", "not_run", "commands", "compared", "differ")
    return [*(str(row[key]) for key in counts), share]


def cut(text: str, chars: int = LINE_CHARS) -> str:
    """One line of at most `chars` characters (a command may span lines)."""
    line = text.replace("\n", "\\n")
    return line if len(line) <= chars else line[: chars - 3] + "..."
