"""`obsspec profile compare OLD NEW`: what changed between two profiles, and whether it is a
significant regression (obsspec.profile.compare)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from obsspec.cli.common import JsonOption, emit_json, err, out
from obsspec.cli.exits import GATE_FAILED
from obsspec.cli.markdown import markdown
from obsspec.errors import ConfigError

SummaryOption = Annotated[
    str | None,
    typer.Option(
        "--summary",
        metavar="markdown",
        help="Print the tables as Markdown, for a CI job's summary page "
        "(e.g. >> $GITHUB_STEP_SUMMARY).",
    ),
]


def compare(
    old: Annotated[Path, typer.Argument(help="The earlier profile: its --out, or a report.json.")],
    new: Annotated[Path, typer.Argument(help="The later profile: its --out, or a report.json.")],
    summary: SummaryOption = None,
    json_output: JsonOption = False,
) -> None:
    """Compare two profiles figure by figure: NEW - OLD with a 95% interval.

    Latency figures use each report's bootstrap interval; rates their counts. Exits 3 when a
    figure got significantly worse (its interval excludes 0 on the bad side), 0 otherwise.
    Levels of --concurrency both profiles measured are compared each.
    """
    from obsspec.profile.compare import compare_reports

    check_summary(summary, json_output)
    result = compare_reports(read_report(old, "OLD"), read_report(new, "NEW"))
    for note in result["notes"]:
        err.print(f"note: {note}", markup=False, highlight=False)
    if json_output:
        emit_json(result)
    elif summary:
        out.print(markdown(*comparison_tables(result)), markup=False, highlight=False)
    else:
        for table in comparison_tables(result):
            out.print(table)
    if result["regressions"]:
        err.print(f"error: significant regression: {'; '.join(result['regressions'])}")
        raise typer.Exit(GATE_FAILED)


def check_summary(summary: str | None, json_output: bool) -> None:
    if summary is not None and summary != "markdown":
        raise ConfigError(f"--summary {summary!r}: the one format is 'markdown'")
    if summary and json_output:
        raise ConfigError("--summary markdown and --json both want stdout: choose one")


def read_report(path: Path, name: str) -> dict:
    file = path / "report.json" if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(f"{name} {path}: no profile report (expected a profile's --out or a "
                          "report.json)")  # fmt: skip
    try:
        report = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{name} {file}: unreadable report: {e}") from e
    if not isinstance(report, dict):
        raise ConfigError(f"{name} {file}: not a profile report (not a JSON object)")
    return report


def comparison_tables(result: dict) -> list[Table]:
    tables = []
    for level, rows in result["levels"].items():
        table = Table(
            "figure", "old", "new", "new - old", "95% interval", "verdict",
            title=f"profile compare, {level} episode(s) at once",
        )  # fmt: skip
        for row in rows:
            table.add_row(
                row["key"],
                number(row["old"]),
                number(row["new"]),
                number(row["diff"], signed=True),
                "" if row["diff_ci95"] is None else "[{:+.4f}, {:+.4f}]".format(*row["diff_ci95"]),
                verdict(row),
            )
        tables.append(table)
    return tables


def number(value: float | None, *, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.4f}" if signed else f"{value:.4f}"


def verdict(row: dict) -> str:
    if row["regression"]:
        return "REGRESSION"
    if row["diff_ci95"] is None:
        return "not judged" if row["diff"] is not None else "-"
    if not row["significant"]:
        return "no significant change"
    return "better" if row["key"] != "oracle_latency_reduction" else "ceiling changed"
