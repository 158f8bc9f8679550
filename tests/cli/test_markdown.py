"""--summary markdown: the tables a command shows, as Markdown a CI summary page renders."""

from __future__ import annotations

from obsspec.cli.gate_options import gated
from obsspec.cli.markdown import gate_table, markdown
from obsspec.cli.profile_view import figures_table
from obsspec.gates import parse_gates
from obsspec.profile.run import LevelPlayed, report_keys


def test_a_profile_report_and_its_gates_as_markdown_tables():
    figures = LevelPlayed(1, "", [], [], {}).figures()  # a report of no episode: all nulls
    report = {**figures, "latency_reduction": 0.069, "by_concurrency": {"1": figures}}
    report = gated(report, parse_gates(["latency_reduction=0.05"], ["lossless_violations=0"],
                                       report_keys()))  # fmt: skip
    text = markdown(figures_table(report), None, gate_table(report))
    lines = text.splitlines()
    assert lines[0] == "**profile of 0 episode(s) per arm, 1 at once**"
    assert lines[2:4] == ["| figure | value |", "|---|---|"]
    assert "| latency reduction | 6.9% pooled, - median |" in lines
    assert "| gate | bound | measured | result |" in lines
    assert "| latency_reduction | >= 0.05 | 0.069 | passed |" in lines
    assert "| lossless_violations | <= 0 | 0 | passed |" in lines
    assert all(line.count("|") in (0, 3, 5) for line in lines)  # no cell broke a row


def test_a_pipe_in_a_cell_is_escaped():
    from rich.table import Table

    table = Table("a", "b")
    table.add_row("x | y", "z\nw")
    assert markdown(table).splitlines()[-1] == "| x \\| y | z w |"
