"""Episode-limit flags shared by the commands that run episodes (collect, profile)."""

from __future__ import annotations

from typing import Annotated

import typer

RUN = "Run"  # the help panel collect also puts its run flags in

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
