"""train-wm's table: the headline with the near-miss rate, then family, length and content
tables."""

from io import StringIO

from rich.console import Console

import obsspec.cli.train_wm_view as view


def group(wm: float, cascade: float, near: float, turns: int = 4) -> dict:
    rates = {"match_rate_wm": wm, "cascade_match_rate": cascade, "near_miss_rate": near}
    return {"turns": turns, **rates}


def test_the_table_shows_near_misses_and_lengths_in_order(monkeypatch):
    buffer = StringIO()
    monkeypatch.setattr(view, "out", Console(file=buffer, width=120, no_color=True))
    report = {"turns": 12, "held_out_tasks": 2, **group(0.5, 0.75, 0.125)}
    report["by_family"] = {"csv-json": group(0.5, 0.75, 0.125, 12)}
    report["by_length"] = {
        "129+": group(0.0, 0.25, 0.5),
        "33-128": group(0.25, 0.5, 0.25),
        "9-32": group(1.0, 1.0, 0.0),
    }
    report["by_source"] = {"lm": {"answered": 12, "matched": 6, "match_rate": 0.5}}
    report["by_content"] = {"seen": group(0.75, 0.875, 0.0, 8), "new": group(0.0, 0.5, 0.25)}
    view.render_evaluation(report, json_output=False)
    text = buffer.getvalue()
    assert "near_miss_rate" in text and "0.125" in text
    lines = [line for line in text.splitlines() if "│" in line]
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in lines]
    by_length = [row for row in cells if row[0] in ("9-32", "33-128", "129+")]
    assert [row[0] for row in by_length] == ["9-32", "33-128", "129+"]  # by size, not by name
    assert by_length[2] == ["129+", "4", "0.000", "0.250", "0.500"]
    assert ["new lines", "4", "0.000", "0.500"] in cells
    assert ["all seen", "8", "0.750", "0.875"] in cells
