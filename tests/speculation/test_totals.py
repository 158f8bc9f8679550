"""The three match rates from hand-made records: the world model alone, attempted, used."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from obsspec.speculation.totals import SpeculationTotals
from obsspec.trajectory import SpeculationRecord


def lm(**fields) -> SpeculationRecord:
    return SpeculationRecord(**{"attempted": True, "source": "lm", "wm_asked": True, **fields})


RECORDS = [
    # breadth 2: the world model's first guess was wrong, its second right (and kept)
    lm(predictions=2, matched=True, wm_guesses=2, wm_matched=False, wm_matched_any=True),
    # the cache answered: the world model was never asked, so it is not in its denominator
    SpeculationRecord(attempted=True, source="cache", predictions=1, matched=True),
    # the world model's greedy guess right
    lm(predictions=1, matched=True, wm_guesses=1, wm_matched=True, wm_matched_any=True),
    # the world model answered nothing usable (cut off): asked, a miss, an empty answer
    lm(predictions=0, source=""),
    # the real output came first: the world model's answer never arrived, nothing to score
    SpeculationRecord(attempted=True, exec_won=True),
    # unsure rules and an unsure world model: the rules' guess was chosen and right, the
    # world model's was wrong
    SpeculationRecord(
        attempted=True, source="rules/cd", predictions=1, matched=True, wm_asked=True, wm_guesses=1
    ),
    None,  # a sequential turn
]


def totals() -> SpeculationTotals:
    run = SpeculationTotals()
    for record in RECORDS:
        run.add(record)
    return run


def test_each_figure_has_its_own_numerator_and_denominator():
    run = totals()
    assert (run.wm_asked, run.wm_guesses, run.wm_matched, run.wm_matched_any) == (4, 4, 1, 2)
    rates = run.summary()
    assert rates["match_rate_wm"] == pytest.approx(1 / 4)  # first guesses only
    assert rates["match_rate_wm_any"] == pytest.approx(2 / 4)  # any of its guesses
    assert rates["match_rate_attempted"] == pytest.approx(round(4 / 6, 4))  # any source
    assert rates["match_rate_used"] == pytest.approx(4 / 4)  # exec-won and empty left out
    assert run.command_turns == 7 and run.attempted == 6


def test_rows_without_the_world_model_fields_read_as_zero():
    """Datasets written before the fields existed: no world-model figure, the rest intact."""
    old = [asdict(r) if r else None for r in RECORDS]
    for record in old:
        if record:
            for key in ("wm_asked", "wm_guesses", "wm_matched", "wm_matched_any"):
                del record[key]
    run = SpeculationTotals()
    for record in old:
        run.add(record)
    assert run.summary()["match_rate_wm"] is None and run.wm_asked == 0
    assert run.summary()["match_rate_attempted"] == totals().summary()["match_rate_attempted"]


def test_totals_add_up_across_episodes():
    first, second = SpeculationTotals(), SpeculationTotals()
    for record in RECORDS[:3]:
        first.add(record)
    for record in RECORDS[3:]:
        second.add(record)
    both = first + second
    assert both.summary() == totals().summary()


def test_a_near_miss_is_counted_apart_and_never_as_a_match():
    from obsspec.speculation.world_model_record import score_world_model

    real = "Ran 6 tests in 1.717s\n\nOK\n[exit code 0]"
    near, exact, far = SpeculationRecord(), SpeculationRecord(), SpeculationRecord()
    equal = str.__eq__
    score_world_model(near, [real.replace("1.717", "1.882")], real, equal)
    score_world_model(exact, [real], real, equal)
    score_world_model(far, ["bash: pytest: command not found\n[exit code 127]"], real, equal)
    assert (near.wm_matched, near.wm_near_miss) == (False, True)
    assert (exact.wm_matched, exact.wm_near_miss) == (True, False)
    assert (far.wm_matched, far.wm_near_miss) == (False, False)
    run = SpeculationTotals()
    for record in (near, exact, far):
        record.wm_asked = True
        run.add(record)
    rates = run.summary()
    assert rates["near_miss_rate"] == pytest.approx(1 / 3, abs=1e-4)  # rates are rounded
    assert rates["match_rate_wm"] == pytest.approx(1 / 3, abs=1e-4)
