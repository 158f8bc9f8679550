"""The regime simulator on hand-made episodes: the event loop's arithmetic, the sweep's
directions, the grid flag, and calibration from a profile directory written to disk."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from obsspec.errors import ConfigError
from obsspec.profile.calibrate import (
    Calibration,
    EpisodeTimes,
    FamilyFigures,
    TimeStats,
    calibrate,
)
from obsspec.profile.event_loop import sequential_total
from obsspec.profile.simulate import (
    Grid,
    Speculation,
    parse_grid,
    run_turns,
    simulate_report,
    sweep,
    sweep_point,
    validate,
)
from obsspec.profile.workload import workload
from obsspec.rollout.dataset import ShardWriter


# --- hand-made calibrations -----------------------------------------------------------------
def episode(gen: list[float], exec_s: list[float | None], name: str = "t") -> EpisodeTimes:
    """exec_s None: the turn runs no command (the last one says done)."""
    return EpisodeTimes(
        task_id=name,
        episode_index=0,
        gen_s=gen,
        exec_s=[e or 0.0 for e in exec_s],
        family=[None if e is None else "make" for e in exec_s],
    )


def cal_of(*episodes: EpisodeTimes, hit_rate: float = 1.0) -> Calibration:
    gen = [g for ep in episodes for g in ep.gen_s]
    exe = [e for ep in episodes for e, f in zip(ep.exec_s, ep.family, strict=True) if f]
    return Calibration(
        source="profile",
        run_dir="hand-made",
        depth=1,
        breadth=1,
        gate="always",
        oracle_delay_s=0.0,
        episodes=list(episodes),
        gen_s=TimeStats.of(gen),
        exec_s=TimeStats.of(exe),
        predict_s=TimeStats.of([0.0]),
        tokens_per_s=None,
        attempt_rate=1.0,
        hit_rate=hit_rate,
        kept_rate=hit_rate,
        families={
            "make": FamilyFigures(
                command_turns=len(exe),
                attempt_rate=1.0,
                hit_rate=hit_rate,
                kept_rate=hit_rate,
                predict_s=[0.0],
            )
        },
        measured=None,
    )


def point(cal: Calibration, *, depth=1, breadth=1, hit_rate=1.0, scale=1.0, load=1, **grid):
    settings = Grid(**({"contention": 0.0, "predict_s": 0.0, "episodes": 50} | grid))
    w = workload(cal, settings.episodes, 0, settings.predict_s)
    return sweep_point(w, cal, settings, depth, breadth, hit_rate, scale, load)


THREE_TURNS = episode([1.0, 1.0, 1.0], [2.0, 2.0, None])  # E >= G: every next reply can hide


# --- the event loop -------------------------------------------------------------------------
def test_sequential_latency_is_the_sum_of_replies_and_commands():
    cal = cal_of(THREE_TURNS, episode([3.0, 0.5], [0.25, None], "u"))
    w = workload(cal, episodes=2)
    assert sequential_total(w, w.exec, load=1, contention=0.02) == pytest.approx(7.0 + 3.75)
    nothing = np.zeros_like(w.command)
    end, waste = run_turns(w, w.gen, w.exec, Speculation(1, 1, nothing, nothing, w.predict))
    assert end.tolist() == pytest.approx([7.0, 3.75])
    assert waste.sum() == 0


def test_no_hit_saves_nothing_without_contention():
    assert point(cal_of(THREE_TURNS), hit_rate=0.0)["latency_reduction"] == 0.0


def test_every_hit_with_instant_guesses_hides_every_next_reply():
    # Sequential 1+2+1+2+1 = 7; replies 2 and 3 start with the commands before them: 1+2+2 = 5.
    figures = point(cal_of(THREE_TURNS), hit_rate=1.0)
    assert figures["latency_reduction"] == pytest.approx(2 / 7, abs=1e-4)
    assert figures["oracle_latency_reduction"] == pytest.approx(2 / 7, abs=1e-4)
    assert figures["oracle_fraction"] == pytest.approx(1.0)


def test_depth_two_runs_two_replies_inside_one_long_command():
    # A 4 s command then quick ones: at depth 2 reply 3 is generated on two guesses while
    # command 1 still runs. Sequential 9.3 s; depth 1 ends at 8 s, depth 2 at 7 s.
    cal = cal_of(episode([1.0] * 5, [4.0, 0.1, 0.1, 0.1, None]))
    one, two = point(cal, depth=1), point(cal, depth=2)
    assert one["latency_reduction"] == pytest.approx(1 - 8 / 9.3, abs=1e-4)
    assert two["latency_reduction"] == pytest.approx(1 - 7 / 9.3, abs=1e-4)


def test_a_prediction_slower_than_the_command_saves_nothing():
    assert point(cal_of(THREE_TURNS), predict_s=2.5)["latency_reduction"] == 0.0


def test_more_load_with_contention_lowers_the_reduction():
    cal = cal_of(episode([3.0, 3.0, 3.0, 1.0], [1.0, 1.0, 1.0, None]))
    settings = {"hit_rate": 0.5, "breadth": 2, "contention": 0.05}
    alone, crowded = point(cal, load=1, **settings), point(cal, load=16, **settings)
    assert crowded["latency_reduction"] < alone["latency_reduction"]
    assert crowded["slowdown"] > alone["slowdown"] >= 1.0


def test_the_oracle_bounds_every_point_and_runs_are_deterministic():
    cal = cal_of(THREE_TURNS, episode([2.0, 1.0, 0.5], [0.5, 3.0, None], "u"), hit_rate=0.5)
    grid = Grid(depth=[1, 2], hit_rate=[0.3, 0.7], tool_time_scale=[0.5, 2], load=[1, 4])
    points = sweep(cal, grid, seed=3)
    assert len(points) == 2 * 2 * 2 * 2 * 2
    for p in points:
        assert p["latency_reduction"] <= p["oracle_latency_reduction"] + 1e-9
    assert sweep(cal, grid, seed=3) == points
    assert sweep(cal, grid, seed=4) != points  # the draws do depend on the seed


# --- the grid flag --------------------------------------------------------------------------
def test_parse_grid_sets_the_axes_given_and_defaults_the_rest():
    grid = parse_grid("depth=1,2; hit_rate=0.3,0.6,0.9 ;tool_time_scale=1,4;contention=0.05")
    assert grid.depth == [1, 2] and grid.hit_rate == [0.3, 0.6, 0.9]
    assert grid.tool_time_scale == [1, 4] and grid.contention == 0.05
    assert grid.load == Grid().load
    assert parse_grid(None) == parse_grid("") == Grid()


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("depht=1,2", "'depht'"),
        ("hit_rate=0.3,lots", "hit_rate"),
        ("hit_rate=1.5", "hit_rate"),
        ("depth=0", "depth"),
        ("load=", "load"),
        ("contention=0.1,0.2", "contention"),
        ("tool_time_scale=nan", "tool_time_scale"),
    ],
)
def test_parse_grid_names_the_bad_axis(spec, named):
    with pytest.raises(ConfigError, match="--grid") as caught:
        parse_grid(spec)
    assert named in str(caught.value)


# --- calibration from disk ------------------------------------------------------------------
def record(*, matched=False, kept=0, exec_won=False) -> dict:
    return {
        "attempted": True,
        "source": "lm" if matched or kept else "",
        "predictions": 0 if exec_won else 1,
        "matched": matched,
        "exec_won": exec_won,
        "failed": False,
        "gated": False,
        "tokens_committed": kept,
        "overlap_s": 0.0,
    }


def turn(command: str, gen_s: float, exec_s: float, predict_s: float = 0.0, speculation=None):
    return {
        "action": "command" if command else "done",
        "command": command,
        "action_ids": [1, 2, 3, 4],
        "gen_s": gen_s,
        "exec_s": exec_s,
        "predict_s": predict_s,
        "speculation": speculation,
    }


def arm_row(task: str, agent_s: float, turns: list[dict]) -> dict:
    return {"task_id": task, "episode_index": 0, "agent_s": agent_s, "turns": turns}


def write_rows(run_dir: Path, rows: list[dict]) -> None:
    """A run directory's data/ as obsspec writes it (schema and all)."""
    (run_dir / "data").mkdir(parents=True)
    writer = ShardWriter(run_dir / "data", "shard")
    for row in rows:
        writer.add(row)
    writer.close()


def write_profile(out: Path) -> None:
    """Two episodes in three arms; the arms' agent seconds are what the event loop gives."""
    hit, late, done = record(matched=True, kept=4), record(exec_won=True), turn("", 1, 0)
    arms = {
        "seq": [
            arm_row("a", 5.5, [turn("make", 1, 2), turn("ls", 1, 0.5), done]),
            arm_row("b", 4.0, [turn("make -j2", 2, 1), done]),
        ],
        "spec": [  # a: make's guess kept, ls won by the command; b: a hit not branched on
            arm_row("a", 4.5, [turn("make", 1, 2, 0.5, hit), turn("ls", 1, 0.5, 0, late), done]),
            arm_row("b", 4.0, [turn("make -j2", 2, 1, 0.4, record(matched=True)), done]),
        ],
        "oracle": [
            arm_row("a", 4.0, [turn("make", 1, 2, 1e-4, hit), turn("ls", 1, 0.5, 1e-4, hit), done]),
            arm_row("b", 3.0, [turn("make -j2", 2, 1, 1e-4, hit), done]),
        ],
    }
    for arm, rows in arms.items():
        write_rows(out / "arms" / arm, rows)
    config = {"speculation": {"depth": 1, "breadth": 1, "gate": {"mode": "auto"}}}
    (out / "report.json").write_text(json.dumps({"config": config | {"oracle_delay_s": 0.0}}))


def test_calibrate_a_profile_and_validate_against_it(tmp_path):
    write_profile(tmp_path)
    cal = calibrate(tmp_path)
    assert cal.source == "profile" and len(cal.episodes) == 2
    assert cal.attempt_rate == 1.0 and cal.hit_rate == 1.0 and cal.kept_rate == 0.5
    make, ls = cal.families["make"], cal.families["ls"]
    assert (make.command_turns, make.hit_rate, make.kept_rate) == (2, 1.0, 0.5)
    assert make.predict_s == [0.5, 0.4] and ls.hit_rate is None  # the command won: no figure
    assert cal.measured.latency_reduction == pytest.approx(1 - 8.5 / 9.5, abs=1e-4)
    assert cal.measured.oracle_latency_reduction == pytest.approx(1 - 7 / 9.5, abs=1e-4)

    validation = validate(cal)
    predicted = validation["predicted_latency_reduction"]
    error = abs(predicted - validation["measured_latency_reduction"])
    assert validation["simulation_error"] == pytest.approx(error, abs=1e-4)
    assert validation["predicted_oracle_latency_reduction"] == pytest.approx(1 - 7 / 9.5, abs=1e-3)
    assert validation["oracle_simulation_error"] == pytest.approx(0.0, abs=1e-3)
    assert validation["replay"]["spec"]["replay_error"] == pytest.approx(0.0, abs=1e-4)
    assert validation["replay"]["oracle"]["replay_error"] == pytest.approx(0.0, abs=1e-3)


def test_simulate_report_writes_json_and_heat_map(tmp_path):
    write_profile(tmp_path / "prof")
    grid = parse_grid("depth=1,2;breadth=1;hit_rate=0.5,1;tool_time_scale=1,2;load=1,4")
    report = simulate_report(tmp_path / "prof", grid, tmp_path / "sim", seed=1)
    assert len(report["grid"]) == 16
    assert report["summary"]["best"]["latency_reduction"] == max(
        p["latency_reduction"] for p in report["grid"]
    )
    assert "what_would_reach_goals" in report["summary"]
    written = json.loads((tmp_path / "sim" / "simulation.json").read_text())
    assert written["validation"] == report["validation"]
    assert Path(report["heatmap"]).read_bytes()[:4] == b"\x89PNG"


def test_calibrate_refuses_what_it_cannot_read(tmp_path):
    with pytest.raises(ConfigError, match=r"--calibrate .* no such directory"):
        calibrate(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"--calibrate .*neither a profile"):
        calibrate(tmp_path / "empty")
    run = tmp_path / "talker"
    write_rows(run, [arm_row("a", 2.0, [turn("", 2, 0)])])
    with pytest.raises(ConfigError, match="no command"):
        calibrate(run)


def test_a_collect_run_without_speculation_has_no_hit_rate(tmp_path):
    write_rows(tmp_path, [arm_row("a", 4.0, [turn("make", 1, 2), turn("", 1, 0)])])
    cal = calibrate(tmp_path)
    assert cal.source == "collect" and cal.gate == "off"
    assert cal.hit_rate is None and cal.predict_s is None and cal.measured is None
    assert "note" in validate(cal)
    assert point(cal, hit_rate=1.0)["latency_reduction"] == pytest.approx(1 / 4, abs=1e-4)


def test_the_command_prints_json_only_and_names_bad_flags(tmp_path):
    from tests.cli.test_cli import obsspec

    write_profile(tmp_path / "prof")
    result = obsspec(
        "profile",
        "simulate",
        "--calibrate",
        str(tmp_path / "prof"),
        "--grid",
        "depth=1,2",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert "simulation_error" in report["validation"]
    assert (tmp_path / "prof" / "simulation.png").is_file()
    bad = obsspec("profile", "simulate", "--calibrate", str(tmp_path / "prof"), "--grid", "dpth=1")
    assert bad.returncode == 1 and "--grid" in bad.stderr and "dpth" in bad.stderr
    absent = obsspec("profile", "simulate", "--calibrate", str(tmp_path / "nope"))
    assert absent.returncode != 0 and "--calibrate" in absent.stderr
