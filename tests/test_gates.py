"""CI gates (obsspec.gates, cli.gate_options): parsed with errors that name the flag, checked
against dotted keys, a null figure failing its gate, exit code 3 and a line per gate."""

from __future__ import annotations

import pytest
import typer

from obsspec.cli.exits import GATE_FAILED
from obsspec.cli.gate_options import exit_on_failed_gate, gated
from obsspec.errors import ConfigError
from obsspec.gates import check_gates, parse_gates

REPORT = {
    "latency_reduction": 0.07,
    "match_rate_wm": None,  # no world model asked: not measured
    "tokens_wasted_fraction": 0.3,
    "lossless_violations": 0,
    "by_concurrency": {"8": {"latency_reduction": 0.02}},
    "config": {"policy": "p"},
    "speculated": True,
}
KNOWN = list(REPORT)


def verdicts(under: list[str], over: list[str] = ()) -> list[bool]:
    return [r.passed for r in check_gates(REPORT, parse_gates(under, over, KNOWN))]


def test_under_and_over_gates_each_way_and_on_their_bound():
    assert verdicts(["latency_reduction=0.05"]) == [True]
    assert verdicts(["latency_reduction=0.08"]) == [False]
    assert verdicts(["latency_reduction=0.07"], ["tokens_wasted_fraction=0.3"]) == [True, True]
    assert verdicts([], ["tokens_wasted_fraction=0.2", "lossless_violations=0"]) == [False, True]
    assert verdicts(["by_concurrency.8.latency_reduction=0.05"]) == [False]


def test_a_figure_that_was_not_measured_fails_its_gate_either_way():
    (result,) = check_gates(REPORT, parse_gates(["match_rate_wm=0"], [], KNOWN))
    assert not result.passed and result.value is None
    assert result.line() == "gate FAILED: match_rate_wm >= 0, measured not measured (null)"
    assert verdicts([], ["match_rate_wm=1"]) == [False]


@pytest.mark.parametrize(
    ("flag_texts", "message"),
    [
        ((["latency_reduction"], []), r"--fail-under 'latency_reduction': expected KEY=NUMBER"),
        ((["=0.5"], []), r"expected KEY=NUMBER"),
        (([], ["tokens_wasted_fraction=lots"]), r"--fail-over .*'lots' is not a number"),
        ((["latency_reduction=nan"], []), r"must be a finite number"),
        ((["latncy_reduction=0.1"], []), r"no figure 'latncy_reduction' \(did you mean "),
    ],
)
def test_bad_gates_are_refused_naming_the_flag(flag_texts, message):
    with pytest.raises(ConfigError, match=message):
        parse_gates(*flag_texts, KNOWN)


def test_a_dotted_key_that_leads_nowhere_or_to_no_number_is_an_error():
    for key, message in (
        ("by_concurrency.4.latency_reduction", r"by_concurrency has no '4'; it has: 8"),
        ("config.policy", r"holds 'p' there, not a number"),
        ("speculated", r"holds True there, not a number"),
    ):
        with pytest.raises(ConfigError, match=message):
            check_gates(REPORT, parse_gates([f"{key}=0"], [], KNOWN))


def test_gated_reports_carry_their_gates_and_a_failed_one_exits_3(capsys):
    assert gated(REPORT, []) is REPORT  # no gate: the report as it was, exit as before
    exit_on_failed_gate(REPORT)
    passed = gated(REPORT, parse_gates(["latency_reduction=0.05"], [], KNOWN))
    assert passed["gates"] == [
        {
            "key": "latency_reduction",
            "direction": "under",
            "bound": 0.05,
            "value": 0.07,
            "passed": True,
        }
    ]
    exit_on_failed_gate(passed)
    failed = gated(REPORT, parse_gates(["latency_reduction=0.1"], ["lossless_violations=0"], KNOWN))
    with pytest.raises(typer.Exit) as stop:
        exit_on_failed_gate(failed)
    assert stop.value.exit_code == GATE_FAILED == 3
    stderr = capsys.readouterr().err
    assert "gate FAILED: latency_reduction >= 0.1, measured 0.07" in stderr
    assert "gate passed: lossless_violations <= 0, measured 0" in stderr
    assert "1 gate(s) failed: latency_reduction" in stderr
