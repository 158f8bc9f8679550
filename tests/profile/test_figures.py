"""Profile figures from hand-made rows: pooled, per-episode medians, intervals, breakdowns."""

from __future__ import annotations

import pytest

from obsspec.profile.figures import ArmEpisodes, profile_figures


def record(**fields) -> dict:
    base = {
        "attempted": True,
        "source": "lm",
        "predictions": 1,
        "matched": False,
        "exec_won": False,
        "failed": False,
        "gated": False,
        "rollback": False,
        "level": 0,
        "tokens_ahead": 0,
        "tokens_committed": 0,
        "tokens_wasted": 0,
        "wm_tokens": 0,
        "overlap_s": 0.0,
        "lossless_violation": False,
        "error": "",
    }
    return base | fields


def turn(command: str, exec_s: float, predict_s: float = 0.0, speculation=None, tokens=10):
    return {
        "action": "command",
        "command": command,
        "action_ids": list(range(tokens)),
        "exec_s": exec_s,
        "predict_s": predict_s,
        "speculation": speculation,
    }


def row(agent_s: float, turns: list[dict]) -> dict:
    done = {"action": "done", "command": "", "action_ids": [1, 2], "exec_s": 0.0}
    return {
        "agent_s": agent_s,
        "sandbox_start_s": 1.0,
        "verifier_s": 0.5,
        "turns": [*turns, done | {"predict_s": 0.0, "speculation": None}],
    }


def episodes() -> list[ArmEpisodes]:
    seq_turns = [turn("make", 2.0), turn("ls", 0.01)]
    hit = record(matched=True, tokens_committed=12, overlap_s=1.5)
    miss = record(rollback=True, tokens_wasted=6)
    late = record(exec_won=True, predictions=0, source="")
    return [
        ArmEpisodes(
            seq=row(10.0, seq_turns),
            spec=row(8.0, [turn("cd src && make", 2.0, 0.5, hit), turn("ls", 0.01, 0.0, late)]),
            oracle=row(6.0, seq_turns),
        ),
        ArmEpisodes(
            seq=row(20.0, seq_turns),
            spec=row(10.0, [turn("make -j2", 4.0, 1.0, miss), turn("grep x f", 1.0, 0.25, hit)]),
            oracle=row(10.0, seq_turns),
        ),
    ]


def test_latency_figures_are_pooled_and_per_episode():
    figures = profile_figures(episodes())
    assert figures["latency_reduction"] == pytest.approx(1 - 18 / 30)
    assert figures["latency_reduction_median"] == pytest.approx((0.2 + 0.5) / 2)
    assert figures["oracle_latency_reduction"] == pytest.approx(1 - 16 / 30, abs=1e-4)
    assert figures["oracle_fraction"] == pytest.approx(0.4 / (14 / 30), abs=1e-3)
    low, high = figures["latency_reduction_ci95"]
    assert 0.2 <= low <= figures["latency_reduction"] <= high <= 0.5


def test_match_rates_speedup_waste_and_violations():
    figures = profile_figures(episodes())
    assert figures["match_rate_attempted"] == pytest.approx(2 / 4, abs=1e-4)
    assert figures["match_rate_used"] == pytest.approx(
        2 / 3, abs=1e-4
    )  # the late guess: not "used"
    assert figures["exec_won_rate"] == pytest.approx(1 / 4, abs=1e-4)
    assert figures["predictor_speedup_p50"] == pytest.approx(4.0)  # 2/.5, 4/1, 1/.25
    committed = 4 * 10 + 2 * 2  # every action token of the speculative arm
    assert figures["tokens_wasted_fraction"] == pytest.approx(6 / committed, abs=1e-4)
    assert figures["lossless_violations"] == 0
    broken = episodes()
    broken[0].spec["turns"][0]["speculation"] = record(lossless_violation=True)
    assert profile_figures(broken)["lossless_violations"] == 1


def test_breakdowns_by_family_and_source():
    figures = profile_figures(episodes())
    make = figures["by_family"]["make"]
    assert make["command_turns"] == 2 and make["matched"] == 1 and make["attempted"] == 2
    assert set(figures["by_family"]) == {"make", "ls", "grep"}
    assert figures["by_source"]["lm"]["attempted"] == 3
    assert figures["by_source"]["(no answer)"]["exec_won"] == 1
    assert figures["phases"]["spec"] == {
        "episodes": 2,
        "agent_s_mean": 9.0,
        "sandbox_start_s_mean": 1.0,
        "verifier_s_mean": 0.5,
    }


def test_one_episode_has_no_interval():
    figures = profile_figures(episodes()[:1])
    assert figures["latency_reduction_ci95"] is None
    assert figures["latency_reduction"] == pytest.approx(0.2)


def test_the_three_match_rates_side_by_side_at_the_top_and_per_family():
    """The world model alone (first guess), attempted (any source, any guess) and used."""
    wm_second = record(
        matched=True, predictions=2, wm_asked=True, wm_guesses=2, wm_matched_any=True
    )  # breadth 2: its first guess was wrong, its second right
    wm_first = record(
        matched=True, wm_asked=True, wm_guesses=1, wm_matched=True, wm_matched_any=True
    )
    cached = record(matched=True, source="cache")  # the world model was never asked
    late = record(exec_won=True, predictions=0, source="")
    seq = [turn("make", 2.0), turn("ls", 0.01), turn("make", 2.0)]
    spec = [turn("make", 2.0, 0.5, wm_second), turn("ls", 0.01, 0.0, cached)]
    spec2 = [turn("make -j2", 2.0, 0.5, wm_first), turn("ls", 0.01, 0.0, late)]
    figures = profile_figures(
        [
            ArmEpisodes(seq=row(10.0, seq), spec=row(8.0, spec), oracle=row(6.0, seq)),
            ArmEpisodes(seq=row(10.0, seq), spec=row(8.0, spec2), oracle=row(6.0, seq)),
        ]
    )
    assert figures["match_rate_wm"] == pytest.approx(1 / 2)
    assert figures["match_rate_wm_any"] == pytest.approx(2 / 2)
    assert figures["match_rate_attempted"] == pytest.approx(3 / 4)
    assert figures["match_rate_used"] == pytest.approx(3 / 3)
    make, ls = figures["by_family"]["make"], figures["by_family"]["ls"]
    assert (make["wm_asked"], make["wm_matched"], make["match_rate_wm"]) == (2, 1, 0.5)
    assert make["match_rate_attempted"] == 1.0 and make["match_rate_used"] == 1.0
    assert ls["match_rate_wm"] is None and ls["wm_asked"] == 0  # a cache hit, an exec-won
    assert ls["match_rate_attempted"] == 0.5 and ls["match_rate_used"] == 1.0


def test_no_fraction_of_a_ceiling_within_noise_of_zero():
    """An oracle policy's profile: the arms take the same time to within a hair, and the
    ratio of two numbers near 0 (-281% once) is no figure."""
    flat = [
        ArmEpisodes(seq=row(10.0, []), spec=row(10.001, []), oracle=row(9.9999, []))
        for _ in range(3)
    ]
    figures = profile_figures(flat)
    assert abs(figures["oracle_latency_reduction"]) < 0.001
    assert figures["oracle_fraction"] is None


def test_the_world_models_speed_up_is_reported_apart_from_instant_lookups():
    """A state-cache answer takes microseconds: pooled with it, the median says nothing of the
    world model (the paper's figure is the world model's)."""
    eps = episodes()
    state = record(source="state", matched=True)
    for name in ("f", "g", "h", "i"):
        eps[0].spec["turns"].append(turn(f"cat {name}", 1.0, 1e-5, state))
    figures = profile_figures(eps)
    assert figures["predictor_speedup_p50"] > 4.0  # pulled up by the lookups
    assert figures["wm_speedup_p50"] == pytest.approx(4.0)  # 2/.5, 4/1, 1/.25: lm's alone
