"""`obsspec profile compare` on hand-made reports: a significant regression fails (exit 3),
the same figures on few episodes do not; intervals from the reports' own bootstrap intervals
and counts; reports with no level in common are refused; --summary markdown."""

from __future__ import annotations

import json

import pytest

from obsspec.cli.profile_compare import read_report
from obsspec.errors import ConfigError
from obsspec.profile.compare import compare_reports
from tests.cli.test_cli import obsspec


def level(reduction: float, half_width: float, matched: int, attempted: int) -> dict:
    return {
        "latency_reduction": reduction,
        "latency_reduction_ci95": [reduction - half_width, reduction + half_width],
        "oracle_fraction": None,  # not measured: shown, never judged
        "oracle_fraction_ci95": None,
        "oracle_latency_reduction": 0.15,
        "oracle_latency_reduction_ci95": [0.13, 0.17],
        "match_rate_wm": matched / attempted,
        "match_rate_attempted": matched / attempted,
        "match_rate_used": matched / attempted,
        "exec_won_rate": 0.0,
        "tokens_wasted_fraction": 0.1,
        "speculation": {
            "attempted": attempted,
            "matched": matched,
            "exec_won": 0,
            "failed": 0,
            "empty": 0,
            "wm_asked": attempted,
            "wm_matched": matched,
        },
    }


def report(*levels: tuple[str, dict], tasks: str = "tasks/") -> dict:
    return {
        **levels[0][1],
        "by_concurrency": dict(levels),
        "config": {"tasks": tasks, "policy": "p", "limits": {"max_turns": 10}},
    }


def rows(result: dict, at: str = "1") -> dict[str, dict]:
    return {row["key"]: row for row in result["levels"][at]}


def test_a_large_drop_on_many_episodes_is_a_regression_and_a_small_one_is_not():
    old = report(("1", level(0.10, 0.02, 160, 200)))
    worse = compare_reports(old, report(("1", level(0.02, 0.02, 100, 200))))
    figures = rows(worse)
    assert figures["latency_reduction"]["regression"] and figures["match_rate_wm"]["regression"]
    low, high = figures["latency_reduction"]["diff_ci95"]
    assert low < -0.08 < high < 0  # -0.08 with the two intervals' errors in quadrature
    assert worse["regressions"] == [
        "latency_reduction at concurrency 1",
        "match_rate_wm at concurrency 1",
        "match_rate_attempted at concurrency 1",
        "match_rate_used at concurrency 1",
    ]
    assert figures["oracle_fraction"]["diff_ci95"] is None  # null: not judged
    assert figures["tokens_wasted_fraction"]["diff_ci95"] is None  # no counts to judge by

    noisy = compare_reports(
        report(("1", level(0.10, 0.09, 8, 10))), report(("1", level(0.05, 0.09, 6, 10)))
    )
    assert noisy["regressions"] == [] and not rows(noisy)["latency_reduction"]["significant"]


def test_a_rate_of_one_against_a_lower_one_still_gets_an_interval():
    perfect = compare_reports(
        report(("1", level(0.1, 0.01, 50, 50))), report(("1", level(0.1, 0.01, 30, 50)))
    )
    row = rows(perfect)["match_rate_attempted"]
    assert row["diff"] == pytest.approx(-0.4) and row["regression"]  # Agresti-Caffo: no 0-width


def test_levels_are_compared_where_both_have_them_and_differences_in_setup_are_noted():
    old = report(("1", level(0.1, 0.02, 8, 10)), ("8", level(0.06, 0.02, 8, 10)))
    new = report(("8", level(0.06, 0.02, 8, 10)), ("16", level(-0.3, 0.02, 8, 10)), tasks="b/")
    result = compare_reports(old, new)
    assert list(result["levels"]) == ["8"]
    assert result["notes"] == ["tasks differs: OLD 'tasks/', NEW 'b/'"]
    with pytest.raises(ConfigError, match="no level in common"):
        compare_reports(report(("1", level(0.1, 0.02, 8, 10))), new)
    with pytest.raises(ConfigError, match="NEW is not a profile report"):
        compare_reports(old, {"episodes": 3})


def test_the_cli_exits_3_on_a_regression_and_prints_markdown(tmp_path):
    old, new, same = tmp_path / "old.json", tmp_path / "new", tmp_path / "same.json"
    old.write_text(json.dumps(report(("1", level(0.10, 0.02, 160, 200)))))
    new.mkdir()  # a profile's --out holds report.json
    (new / "report.json").write_text(json.dumps(report(("1", level(0.02, 0.02, 100, 200)))))
    same.write_text(old.read_text())

    failed = obsspec("profile", "compare", str(old), str(new), "--summary", "markdown")
    assert failed.returncode == 3, failed.stderr
    assert "| latency_reduction | 0.1000 | 0.0200 | -0.0800 |" in failed.stdout
    assert "REGRESSION" in failed.stdout and "significant regression: latency_reduction" in (
        failed.stderr
    )
    passed = obsspec("profile", "compare", str(old), str(same), "--json")
    assert passed.returncode == 0, passed.stderr
    assert json.loads(passed.stdout)["regressions"] == []
    with pytest.raises(ConfigError, match=r"NEW .*nowhere: no profile report"):
        read_report(tmp_path / "nowhere", "NEW")
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(ConfigError, match="not a profile report"):
        read_report(tmp_path / "list.json", "OLD")
