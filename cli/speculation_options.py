"""The speculation flags `collect` and `profile` share (obsspec.speculation.runner settings)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from obsspec.cli.common import drop_unset
from obsspec.speculation.gate import GateMode

SPECULATION = "Speculation"

WorldModelOption = Annotated[
    str | None,
    typer.Option(
        "--world-model",
        help="World model (name or HF dir, same tokenizer as the policy) behind the cache "
        "and rule predictors \\[default: none].",
        rich_help_panel=SPECULATION,
    ),
]
DepthOption = Annotated[
    int | None,
    typer.Option(
        "--depth",
        min=1,
        max=8,
        help="Turns the policy may run ahead on guesses \\[default: 1].",
        rich_help_panel=SPECULATION,
    ),
]
BreadthOption = Annotated[
    int | None,
    typer.Option(
        "--breadth",
        min=1,
        max=8,
        help="Distinct guesses tried per command \\[default: 1].",
        rich_help_panel=SPECULATION,
    ),
]
GateOption = Annotated[
    GateMode | None,
    typer.Option(
        "--gate",
        help="When to speculate: always, never, or auto (when the expected saving beats "
        "the expected cost) \\[default: auto].",
        rich_help_panel=SPECULATION,
    ),
]


def speculation_flags(depth: int | None, breadth: int | None, gate: GateMode | None) -> dict:
    """The runner settings the flags set (unset flags leave the config file's values)."""
    flags: dict[str, Any] = {"depth": depth, "breadth": breadth}
    flags["gate"] = {"mode": gate} if gate else None
    return drop_unset(flags)
