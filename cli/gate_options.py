"""--fail-under and --fail-over: gates a CI job sets on a command's figures (obsspec.gates).

    gates = parse_gate_flags(fail_under, fail_over, known_keys)   # before the run: typos
    report = gated(report, gates)       # the report with "gates"; a line per gate on stderr
    ...show or emit the report...
    exit_on_failed_gate(report)         # exit 3 when a gate failed

The gate lines go to stderr so that --json keeps stdout to one object, which carries them
under "gates" as well.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

import typer
from rich.markup import escape

from obsspec.cli.common import err
from obsspec.cli.exits import GATE_FAILED
from obsspec.gates import Gate, check_gates, parse_gates

FailUnderOption = Annotated[
    list[str] | None,
    typer.Option(
        "--fail-under",
        metavar="KEY=NUMBER",
        help="Exit 3 if the figure KEY (its key in --json; dotted for a nested one, e.g. "
        "by_concurrency.8.latency_reduction) is below NUMBER or was not measured. Repeatable.",
        rich_help_panel="CI gates",
    ),
]
FailOverOption = Annotated[
    list[str] | None,
    typer.Option(
        "--fail-over",
        metavar="KEY=NUMBER",
        help="Exit 3 if the figure KEY (a cost, e.g. tokens_wasted_fraction) is above NUMBER "
        "or was not measured. Repeatable.",
        rich_help_panel="CI gates",
    ),
]


def parse_gate_flags(
    fail_under: list[str] | None, fail_over: list[str] | None, known: Iterable[str]
) -> list[Gate]:
    return parse_gates(fail_under or [], fail_over or [], known)


def gated(report: dict, gates: list[Gate]) -> dict:
    """The report with its gates' results under "gates" (none: the report as it was)."""
    if not gates:
        return report
    results = check_gates(report, gates)
    for result in results:
        style = "green" if result.passed else "bold red"
        err.print(f"[{style}]{escape(result.line())}[/{style}]", markup=True)
    return {**report, "gates": [result.as_dict() for result in results]}


def exit_on_failed_gate(report: dict) -> None:
    failed = [gate for gate in report.get("gates", []) if not gate["passed"]]
    if failed:
        keys = ", ".join(gate["key"] for gate in failed)
        err.print(f"error: {len(failed)} gate(s) failed: {keys}")
        raise typer.Exit(GATE_FAILED)
