"""What `obsspec sft` shows after training and evaluating: tables on stdout, or one JSON object
with --json (progress meanwhile: cli.train_view)."""

from __future__ import annotations

from rich.table import Table

from obsspec.cli.common import emit_json, out
from obsspec.cli.train_view import fmt, trainer_table

HEADLINE = ("valid_action_rate", "success_rate", "mean_turns", "done_rate", "episodes")


def training_table(summary: dict) -> Table:
    data = summary["data"]
    rows = [
        ("episodes learned from", f"{data['kept_episodes']} of {data['episodes']}"),
        ("action turns learned", data["turns"]),
        ("episodes filtered", data["filtered_episodes"] or "none"),
        ("turns skipped", data["skipped_turns"] or "none"),
    ]
    return trainer_table("policy training (SFT)", summary, rows)


def render_evaluation(report: dict, json_output: bool) -> None:
    if json_output:
        emit_json(report)
        return
    base = report.get("base") or {}
    head = Table("", "policy", "base", title=f"held-out episodes ({report['tasks']} tasks)")
    for key in HEADLINE:
        head.add_row(key, fmt(report.get(key)), fmt(base.get(key)))
    out.print(head)
    families = Table("family", "episodes", "policy successes", "base successes", title="by family")
    base_families = base.get("by_family", {})
    for name, counts in report["by_family"].items():
        base_successes = base_families.get(name, {}).get("successes")
        families.add_row(
            name, str(counts["episodes"]), str(counts["successes"]), fmt(base_successes)
        )
    out.print(families)
    out.print(f"runs: {report['run']}" + (f", {base['run']}" if base else ""))
