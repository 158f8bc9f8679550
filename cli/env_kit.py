"""`obsspec env kit TASKS`: fetch, ahead of a run, what the tasks' verifiers download at
verify time (environments.verifier_kit), and say what each verifier will be served."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from obsspec.cli.common import (
    CacheDirOption,
    ConfigOption,
    JsonOption,
    SetOption,
    config_sets,
    emit_json,
    err,
    global_config,
    out,
)


def kit(
    tasks: Annotated[
        str, typer.Argument(help="A task directory, a directory of tasks, or a glob.")
    ],
    json_output: JsonOption = False,
    cache_dir: CacheDirOption = None,
    config: ConfigOption = None,
    set_keys: SetOption = None,
) -> None:
    """Prepare the verifier kit for a task set: uv and the Python packages its verifiers
    fetch when they run, downloaded once with pip (its index or mirror: pip.conf,
    PIP_INDEX_URL) into the cache directory, beside the models.

    Runs whose verifiers have no network (--network none, the default) serve it to them
    (--verifier-kit auto); a run prepares what is missing by itself, so this command is for
    doing it ahead (a machine that loses its index later, a cluster's shared cache). Prints
    what each verifier will be served and what cannot be; exits 1 when something could not
    be fetched.
    """
    from obsspec.cli.env_tasks import load_or_report
    from obsspec.environments.verifier_kit.attach import task_kit_rows

    settings = global_config(config, cache_dir, sets=config_sets(set_keys))
    loaded, broken = load_or_report(tasks)
    rows, root = asyncio.run(task_kit_rows(loaded, settings.paths.cache_dir, progress))
    rows += [{"task": b.task, "problems": b.errors} for b in broken]
    failed = [r["task"] for r in rows if r.get("problems")]
    summary = {
        "kit_dir": str(root),
        "tasks": len(rows),
        "served": sum(bool(r.get("needs")) for r in rows),
        "failed": failed,
        "rows": rows,
    }
    if json_output:
        emit_json(summary)
    else:
        for row in rows:
            out.print(describe_row(row), markup=False, highlight=False)
        out.print(
            f"{summary['served']} of {len(rows)} verifiers served from {root}",
            markup=False,
            highlight=False,
        )
    if failed:
        raise typer.Exit(1)


def progress(message: str) -> None:
    err.print(f"[dim]{message}[/dim]", highlight=False)


def describe_row(row: dict) -> str:
    if row.get("needs") is None:
        problems = "; ".join(row.get("problems", [])) or "fetches nothing the kit serves"
        return f"{row['task']}: {problems}"
    parts = [f"uv {row['uv']}"] if row["uv"] else []
    requirements = row["needs"]["requirements"]
    if requirements:
        parts.append(f"{' '.join(requirements)} ({len(row['wheels'])} wheels)")
    text = f"{row['task']}: {', '.join(parts) or 'nothing'}"
    for line in (*row["problems"], *row["notes"]):
        text += f"\n  ! {line}"
    return text
