"""What `obsspec train-wm` shows after training and evaluating: tables on stdout, or one JSON
object with --json (progress meanwhile: cli.train_view)."""

from __future__ import annotations

from rich.table import Table

from obsspec.cli.common import emit_json, out
from obsspec.cli.train_view import fmt, trainer_table


def training_table(summary: dict) -> Table:
    data = [
        ("examples (train + held out)", summary["data"]["examples"]),
        ("skipped turns", summary["data"]["skipped"] or "none"),
    ]
    return trainer_table("world model training", summary, data)


HEADLINE = (
    "turns",
    "held_out_tasks",
    "match_rate_wm",  # the paper's figure (also under its old name exact_match_rate in --json)
    "cascade_match_rate",
    "near_miss_rate",  # not exact, within a tenth by edit distance: still a miss
    "new_content_rate",  # prints a line its context never showed
    "pred_ms_p50",
    "pred_ms_p90",
    "exec_to_pred_ratio_p50",
    "slow_turns",
)


def render_evaluation(report: dict, json_output: bool) -> None:
    if json_output:
        emit_json(report)
        return
    head = Table(title="held-out exact match", show_header=False)
    for key in HEADLINE:
        value = report.get(key)
        head.add_row(key, f"{value:.0f}" if "_ms_" in key and value is not None else fmt(value))
    out.print(head)
    families = Table("family", "turns", "world model", "cascade", title="by command family")
    for name, g in report["by_family"].items():
        families.add_row(
            name, str(g["turns"]), fmt(g["match_rate_wm"]), fmt(g["cascade_match_rate"])
        )
    out.print(families)
    lengths = Table("tokens", "turns", "world model", "cascade", "near miss", title="by length")
    from obsspec.world_model.evaluate import length_bucket_names  # not at every CLI start

    by_length = report["by_length"]
    for name in (name for name in length_bucket_names() if name in by_length):
        g = by_length[name]
        lengths.add_row(
            name,
            str(g["turns"]),
            fmt(g["match_rate_wm"]),
            fmt(g["cascade_match_rate"]),
            fmt(g["near_miss_rate"]),
        )
    out.print(lengths)
    contents = Table("output", "turns", "world model", "cascade", title="by content")
    for name, g in report.get("by_content", {}).items():
        label = "new lines" if name == "new" else "all seen"
        contents.add_row(
            label, str(g["turns"]), fmt(g["match_rate_wm"]), fmt(g["cascade_match_rate"])
        )
    if contents.row_count:
        out.print(contents)
    sources = Table("source", "answered", "matched", "match rate", title="cascade answers")
    for name, g in report["by_source"].items():
        sources.add_row(name, str(g["answered"]), str(g["matched"]), fmt(g["match_rate"]))
    out.print(sources)
