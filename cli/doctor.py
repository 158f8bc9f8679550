"""`obsspec doctor`: a table of what works on this machine, with a fix for what does not."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

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

STYLE = {"ok": "[green]ok[/green]", "warn": "[yellow]warn[/yellow]", "fail": "[red]FAIL[/red]"}


def doctor(
    json_output: JsonOption = False,
    cache_dir: CacheDirOption = None,
    config: ConfigOption = None,
    set_keys: SetOption = None,
) -> None:
    """Check Python, torch, vLLM, Ray, the Docker daemon, the base image and the default model.

    Exits 1 when a required check fails.
    """
    from obsspec.doctor import all_ok, run_checks

    settings = global_config(config, cache_dir, sets=config_sets(set_keys))
    if json_output:
        checks = run_checks(settings)
    else:
        with err.status("checking this machine"):
            checks = run_checks(settings)
    ok = all_ok(checks)
    if json_output:
        emit_json({"ok": ok, "checks": [c.as_dict() for c in checks]})
    else:
        with_fixes = any(c.hint for c in checks)
        table = Table(title="obsspec doctor")
        for column in ("check", "status", "detail", "fix")[: 4 if with_fixes else 3]:
            table.add_column(column, overflow="fold")
        for c in checks:
            row = [c.name, STYLE[c.status], escape(c.detail), escape(c.hint)]
            table.add_row(*row[: 4 if with_fixes else 3])
        out.print(table)
        out.print("[green]ready[/green]" if ok else "[red]not ready: fix the failing rows[/red]")
    if not ok:
        raise typer.Exit(1)
