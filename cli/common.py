"""What every command shares: consoles, JSON output, the config options, progress lines."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from obsspec.config import GlobalConfig, load_global_config

# Tables and results go to stdout; progress, warnings and errors go to stderr, so that
# `--json` output can be piped into other tools untouched.
# emoji=False: a `:name:` in a task's text or a command's output is printed as typed.
out = Console(highlight=False, soft_wrap=True, emoji=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
if not out.is_terminal:
    out.width = 120  # rich's 80-column default for pipes folds paths in tables

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="TOML config file; flags override its values.",
        dir_okay=False,
        rich_help_panel="Configuration",
    ),
]
CacheDirOption = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        help="Model cache directory \\[default: ~/.cache/obsspec].",
        file_okay=False,
        rich_help_panel="Configuration",
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print one JSON object on stdout and nothing else there.")
]


def global_config(config_file: Path | None, cache_dir: Path | None = None) -> GlobalConfig:
    """Defaults < config file < the flags the user actually set."""
    overrides: dict[str, Any] = {}
    if cache_dir is not None:
        overrides["paths"] = {"cache_dir": cache_dir.expanduser()}
    return load_global_config(config_file, overrides)


def drop_unset(flags: dict[str, Any]) -> dict[str, Any]:
    """Only the flags the user set: unset options (None) and empty tables never override
    the config file."""
    return {k: v for k, v in flags.items() if v not in (None, {})}


def emit_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
    sys.stdout.flush()


def progress_printer(quiet: bool = False) -> Callable[[str], None]:
    """A callback for library progress messages: dim lines on stderr."""

    def show(message: str) -> None:
        if not quiet:
            err.print(f"[dim]{escape(message)}[/dim]", markup=True, soft_wrap=True)

    return show
