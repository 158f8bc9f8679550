"""The `obsspec` command: a typer app whose subcommands live in the sibling modules."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from obsspec import __version__
from obsspec.cli import (
    collect,
    doctor,
    env,
    episode,
    exits,
    export,
    models,
    profile,
    rl,
    sft,
    train_wm,
)
from obsspec.cli.common import json_stdout, show_config_warnings

app = typer.Typer(
    name="obsspec",
    help="Observation speculation for RL of terminal agents: collect rollouts, train the "
    "world model, run RL, and profile how much speculation saves.",
    epilog=exits.EPILOG,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    rich_markup_mode="rich",
)
app.add_typer(models.app, name="models")
app.add_typer(env.app, name="env")
app.command("doctor")(doctor.doctor)
app.command("episode")(episode.episode)
app.command("collect")(collect.collect)
app.command("train-wm")(train_wm.train_wm)
app.command("sft")(sft.sft)
app.command("rl")(rl.rl)
app.command("export")(export.export)
app.add_typer(profile.app, name="profile")


def show_version(value: bool) -> None:
    if value:
        typer.echo(f"obsspec {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=show_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """obsspec: observation speculation for RL of terminal agents."""


def main() -> None:
    # The CLI is the edge where the process environment is read and set. No model hub is
    # used (models are local directories), so transformers must never try to reach one.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    # vLLM logs to stdout by default; unconfigured, its warnings go to stderr and stdout stays
    # ours (one JSON object under --json).
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    # A guess until the flag is parsed (a usage error stops before): words after `--` are a
    # command's (env run). Under torchrun only rank 0 prints (cli.training).
    words = sys.argv[1:]
    json_stdout.requested = "--json" in words[: words.index("--") if "--" in words else None]
    json_stdout.silent = os.environ.get("RANK", "0") != "0"
    show_config_warnings()
    sys.exit(exits.run(app, debug="--debug" in sys.argv[1:]))


if __name__ == "__main__":
    main()
