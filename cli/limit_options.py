"""Episode-limit flags shared by the commands that run episodes (collect, profile)."""

from __future__ import annotations

from typing import Annotated

import typer

RUN = "Run"  # the help panel collect also puts its run flags in
# The most seconds a --timeout may give (a week): past about 9e9 s a socket's or the event
# loop's timeout overflows the platform's time_t, and nothing a sandbox runs needs a week.
MIN_TIMEOUT_S, MAX_TIMEOUT_S = 0.1, 7 * 24 * 3600
TIMEOUT_RANGE = f"{MIN_TIMEOUT_S:g}<=x<={MAX_TIMEOUT_S}"


def timeout_seconds(value: float) -> float:
    """A --timeout within TIMEOUT_RANGE (nan is not), else a usage error giving the range."""
    if not MIN_TIMEOUT_S <= value <= MAX_TIMEOUT_S:
        raise typer.BadParameter(f"{value:g} is not in the range {TIMEOUT_RANGE} seconds")
    return value


MaxTurnsOption = Annotated[
    int | None,
    typer.Option(
        "--max-turns", min=1, help="Turns per episode \\[default: 15].", rich_help_panel=RUN
    ),
]
MaxTokensOption = Annotated[
    int | None,
    typer.Option(
        "--max-tokens", min=1, help="Tokens per reply \\[default: 384].", rich_help_panel=RUN
    ),
]
TemperatureOption = Annotated[
    float | None,
    typer.Option(
        "--temperature", min=0, help="Sampling temperature \\[default: 1.0].", rich_help_panel=RUN
    ),
]
