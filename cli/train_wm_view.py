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


def rates_table(title: str, first: str, groups: dict[str, dict], near_miss: bool = False):
    """One row per group: its turns, the world model's and the cascade's match rates (and the
    near-miss rate)."""
    keys = ["match_rate_wm", "cascade_match_rate"] + (["near_miss_rate"] if near_miss else [])
    names = ["world model", "cascade"] + (["near miss"] if near_miss else [])
    table = Table(first, "turns", *names, title=title)
    for name, g in groups.items():
        table.add_row(name, str(g["turns"]), *(fmt(g[key]) for key in keys))
    return table


def render_evaluation(report: dict, json_output: bool) -> None:
    if json_output:
        emit_json(report)
        return
    head = Table(title="held-out exact match", show_header=False)
    for key in HEADLINE:
        value = report.get(key)
        head.add_row(key, f"{value:.0f}" if "_ms_" in key and value is not None else fmt(value))
    out.print(head)
    out.print(rates_table("by command family", "family", report["by_family"]))
    from obsspec.world_model.evaluate import length_bucket_names  # not at every CLI start

    by_length = report["by_length"]
    ordered = {name: by_length[name] for name in length_bucket_names() if name in by_length}
    out.print(rates_table("by length", "tokens", ordered, near_miss=True))
    labels = {"seen": "all seen", "new": "new lines"}
    contents = {labels[name]: g for name, g in report.get("by_content", {}).items()}
    if contents:
        out.print(rates_table("by content", "output", contents))
    sources = Table("source", "answered", "matched", "match rate", title="cascade answers")
    for name, g in report["by_source"].items():
        sources.add_row(name, str(g["answered"]), str(g["matched"]), fmt(g["match_rate"]))
    out.print(sources)
