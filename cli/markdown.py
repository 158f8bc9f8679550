"""`--summary markdown`: the tables a command shows, as GitHub-flavoured Markdown, for a CI job's
summary page (`>> $GITHUB_STEP_SUMMARY`, a GitLab report artifact).

    print(markdown(figures_table(report), gate_table(report)))

A rich Table becomes a Markdown table with its title as a bold line above it and its caption
(one line each) below it; a table shown without a header gets the header "figure | value"
(Markdown requires one).
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text


def markdown(*tables: Table | None) -> str:
    return "\n".join(table_markdown(table) for table in tables if table is not None)


def table_markdown(table: Table) -> str:
    headers = [cell_text(c.header) for c in table.columns]
    if not table.show_header or not any(headers):
        headers = ["figure", "value", *[""] * (len(headers) - 2)][: len(headers)]
    columns = [[cell_text(cell) for cell in column._cells] for column in table.columns]
    rows = list(zip(*columns, strict=True))
    lines = [f"**{cell_text(table.title)}**", ""] if table.title else []
    lines.append("| " + " | ".join(headers) + " |")
    lines.append("|" + "|".join("---" for _ in headers) + "|")
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    if table.caption:
        caption = table.caption.plain if isinstance(table.caption, Text) else str(table.caption)
        lines += ["", *(line.strip() for line in caption.splitlines())]
    return "\n".join(lines) + "\n"


def cell_text(value) -> str:
    text = value.plain if isinstance(value, Text) else str(value or "")
    return text.replace("|", "\\|").replace("\n", " ").strip()


def gate_table(report: dict) -> Table | None:
    """The report's CI gates as a table (None without gates)."""
    if not report.get("gates"):
        return None
    table = Table("gate", "bound", "measured", "result", title="CI gates")
    for gate in report["gates"]:
        sign = ">=" if gate["direction"] == "under" else "<="
        value = "not measured" if gate["value"] is None else f"{gate['value']:.4g}"
        verdict = "passed" if gate["passed"] else "FAILED"
        table.add_row(gate["key"], f"{sign} {gate['bound']:g}", value, verdict)
    return table
