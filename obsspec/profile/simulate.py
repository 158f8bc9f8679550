"""Where observation speculation pays, and by how much: a regime simulator calibrated on a run.

    cal = calibrate(Path("runs/prof"))        # obsspec.profile.calibrate
    validate(cal)                             # the profiled workload itself, vs the measurement
    points = sweep(cal, Grid())               # depth x breadth x hit rate x tool time x load
    report = simulate_report(Path("runs/prof"), Grid(), out=Path("runs/prof"))

The model, a discrete-event loop over turns (numpy runs the episodes side by side):

    episode      the calibrated turns: reply i takes G_i seconds, then (a command turn) its
                 command E_i. Sequential latency is sum(G_i + E_i): nothing overlaps.
    commands     run for real one at a time, in order: command i starts when its reply is
                 verified, max(ready_i, end of command i-1), and ends E_i later.
    prediction   asked for command i (always in the sweep; at the family's calibrated attempt
                 rate in validation) when reply i is ready and rests on fewer than `depth`
                 unverified guesses (else once enough earlier commands have ended); ready
                 P_i later. It hits at 1 - (1-p)^breadth for a per-guess rate p (sweep:
                 distinct guesses taken as independent, optimistic) or at the family's
                 calibrated kept rate (validation). A hit ready before command i ends starts
                 reply i+1 then, instead of at the command's end; anything else costs no
                 latency, only engine time.
    other turns  an invalid reply's corrective observation is certain: the next reply starts
                 at once. The last reply ends the episode once it is verified.
    engine       mean-field sharing: every reply is slowed by s = 1 + c * others, with
                 others = (L-1)*B + W; B is the request-seconds per second one episode keeps
                 in flight (replies and wasted branches), W its own wasted share (counted as
                 running beside its real reply: pessimistic at depth 1). One fixed-point step
                 from s = 1. A wrong guess's reply runs until the real output cancels it, at
                 most G_{i+1}; replies deeper on a wrong branch are ignored. The predictor has
                 its own engine: P is not slowed.
    oracle       every command predicted, always right, after the profile's oracle_delay_s.
    tool time    `tool_time_scale` multiplies every command's seconds (not replies, not
                 predictions): 4 means commands four times slower than calibrated.

The validation also replays each speculative arm's own episodes (their own seconds and kept
guesses) through the same loop: a small replay error with a large simulation error means the
arms' reply seconds drifted apart (warm-up, prefix caching), not that the model is wrong.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import numpy as np
from pydantic import Field, ValidationError

from obsspec.config import StrictModel
from obsspec.errors import ConfigError
from obsspec.profile.calibrate import Calibration, EpisodeTimes, calibrate, calibrate_levels
from obsspec.profile.event_loop import Speculation, evaluate, run_turns
from obsspec.profile.workload import Workload, pad, workload

GOAL_LATENCY_REDUCTION = 0.142  # the project's targets
GOAL_ORACLE_FRACTION = 0.7
PAYS = 0.05  # a latency reduction worth the machinery
SIMULATION_JSON = "simulation.json"
SIMULATION_PNG = "simulation.png"

Level = Annotated[int, Field(ge=1, le=8)]
Rate = Annotated[float, Field(ge=0, le=1)]
Scale = Annotated[float, Field(gt=0)]
Load = Annotated[int, Field(ge=1, le=4096)]


class Grid(StrictModel):
    depth: list[Level] = Field(default=[1, 2, 3], min_length=1, description="Depths.")
    breadth: list[Level] = Field(default=[1, 2], min_length=1, description="Guesses per command.")
    hit_rate: list[Rate] = Field(
        default=[0.2, 0.4, 0.6, 0.8, 1.0], min_length=1, description="Per-guess exact-hit rates."
    )
    tool_time_scale: list[Scale] = Field(
        default=[0.25, 0.5, 1, 2, 4, 8], min_length=1, description="Multipliers on command seconds."
    )
    load: list[Load] = Field(
        default=[1, 4, 16], min_length=1, description="Concurrent episodes on one engine."
    )
    contention: float = Field(
        default=0.02, ge=0, description="Slowdown of each reply per other request in flight."
    )
    episodes: int = Field(default=400, ge=1, le=100_000, description="Episodes per point.")
    predict_s: float | None = Field(
        default=None, ge=0, description="Seconds per prediction [default: the calibrated ones]."
    )


def parse_grid(spec: str | None) -> Grid:
    """`depth=1,2;hit_rate=0.3,0.6;tool_time_scale=1,4;contention=0.05` (unset axes default)."""
    values: dict[str, object] = {}
    for part in filter(str.strip, (spec or "").split(";")):
        name, _, text = (s.strip() for s in part.partition("="))
        field = Grid.model_fields.get(name)
        if field is None:
            raise ConfigError(
                f"--grid: unknown axis {name!r}; one of {', '.join(Grid.model_fields)}"
            )
        numbers = [_number(name, item.strip()) for item in text.split(",")]
        if getattr(field.annotation, "__origin__", None) is list:
            values[name] = numbers
        elif len(numbers) == 1:
            values[name] = numbers[0]
        else:
            raise ConfigError(f"--grid {name}: takes one value, got {text!r}")
    try:
        return Grid(**values)
    except ValidationError as e:
        first = e.errors()[0]
        raise ConfigError(f"--grid {first['loc'][0]}: {first['msg']}") from e


def _number(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"--grid {name}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ConfigError(f"--grid {name}: {text!r} is not a finite number")
    return int(value) if value.is_integer() else value


# --- validation ---------------------------------------------------------------------------
def validate(
    cal: Calibration,
    *,
    episodes: int = 400,
    seed: int = 0,
    contention: float = 0.02,
    load: int = 1,
    measured: Calibration | None = None,
):
    """The profiled workload simulated with its own rates and settings at `load` episodes at
    once, against the measurement (that of `measured`, another level of the same profile,
    when given; else cal's own)."""
    if cal.hit_rate is None:
        return {"note": "the calibration run has no speculation records: nothing to validate"}
    w = workload(cal, episodes, seed)
    attempt = w.command & (w.u_attempt < w.attempt_rate)
    spec = Speculation(cal.depth, cal.breadth, attempt, w.u_hit < w.kept_rate, w.predict)
    point = evaluate(w, spec, 1.0, load, contention, cal.oracle_delay_s)
    lr, olr, m = point["latency_reduction"], point["oracle_latency_reduction"], cal.measured
    if measured is not None:
        m = measured.measured
    m_lr, m_olr = m and m.latency_reduction, m and m.oracle_latency_reduction
    return {
        "predicted_latency_reduction": lr,
        "measured_latency_reduction": m_lr,
        "simulation_error": simulation_error(lr, m_lr),
        "measured_latency_reduction_ci95": m and m.latency_reduction_ci95,
        "predicted_oracle_latency_reduction": olr,
        "measured_oracle_latency_reduction": m_olr,
        "oracle_simulation_error": simulation_error(olr, m_olr),
        "measured_oracle_latency_reduction_ci95": m and m.oracle_latency_reduction_ci95,
        "predicted_oracle_fraction": point["oracle_fraction"],
        "measured_oracle_fraction": m and m.oracle_fraction,
        "replay": {}
        if measured is not None
        else {
            arm: replay(eps, cal.depth, cal.breadth, cal.gen_s.mean)
            for arm, eps in cal.replays.items()
        },
    }


def simulation_error(predicted: float | None, measured: float | None) -> float | None:
    """|predicted - measured| latency reduction, as a fraction (0.01 is one point)."""
    if predicted is None or measured is None:
        return None
    return round(abs(predicted - measured), 4)


def validate_levels(levels: dict[int, Calibration], *, episodes: int, seed: int, contention: float):
    """Per concurrency level of a profile: the level simulated on its own measured seconds
    (load 1: its replies already carry the sharing), and, when concurrency 1 was measured,
    the idle level simulated at load N with `contention` (the simulator's load model)."""
    idle = levels.get(1)
    out = {}
    for level, cal in sorted(levels.items()):
        own = validate(cal, episodes=episodes, seed=seed, contention=contention)
        if idle is not None and level != 1 and "note" not in own:
            from_idle = validate(
                idle, episodes=episodes, seed=seed, contention=contention, load=level, measured=cal
            )
            own["from_concurrency_1"] = {
                key: from_idle[key] for key in ("predicted_latency_reduction", "simulation_error")
            } | {"contention": contention}
        out[str(level)] = own
    return out


def replay(episodes: list[EpisodeTimes], depth: int, breadth: int, seq_gen_mean: float) -> dict:
    """An arm's own episodes, with their own seconds and kept guesses, through the loop."""
    w = Workload(
        gen=pad([ep.gen_s for ep in episodes]),
        exec=pad([ep.exec_s for ep in episodes]),
        command=pad([[f is not None for f in ep.family] for ep in episodes], bool),
        valid=pad([[True] * len(ep.family) for ep in episodes], bool),
        predict=pad([ep.predict_s or [] for ep in episodes]),
        # No draws and no rates: the outcomes are the arm's own.
        u_attempt=np.zeros(0),
        u_hit=np.zeros(0),
        attempt_rate=np.zeros(0),
        kept_rate=np.zeros(0),
    )
    kept = pad([ep.kept or [] for ep in episodes], bool)
    end, _ = run_turns(w, w.gen, w.exec, Speculation(depth, breadth, kept, kept, w.predict))
    measured = sum(ep.agent_s for ep in episodes)
    return {
        "measured_s": round(measured, 3),
        "replayed_s": round(float(end.sum()), 3),
        "replay_error": round(abs(float(end.sum()) - measured) / measured, 4) if measured else None,
        "gen_s_vs_seq": round(float(w.gen.sum()) / w.valid.sum() / seq_gen_mean, 4),
    }


# --- the sweep and what it says -----------------------------------------------------------
def sweep_point(w: Workload, cal: Calibration, grid: Grid, depth, breadth, hit_rate, scale, load):
    p_any = 1 - (1 - hit_rate) ** breadth
    spec = Speculation(depth, breadth, w.command, w.u_hit < p_any, w.predict)
    figures = evaluate(w, spec, scale, load, grid.contention, cal.oracle_delay_s)
    axes = {"depth": depth, "breadth": breadth, "hit_rate": hit_rate}
    return axes | {"tool_time_scale": scale, "load": load} | figures


def sweep(cal: Calibration, grid: Grid, *, seed: int = 0) -> list[dict]:
    """Every point of the grid (gate always: every command is predicted)."""
    w = workload(cal, grid.episodes, seed, grid.predict_s)
    return [
        sweep_point(w, cal, grid, d, b, p, s, load)
        for d in grid.depth
        for b in grid.breadth
        for p in grid.hit_rate
        for s in grid.tool_time_scale
        for load in grid.load
    ]


def calibrated_point(cal: Calibration) -> dict:
    """The run in sweep terms: its depth and breadth, per-guess hit rate, scale 1, load 1."""
    per_guess = None if cal.hit_rate is None else 1 - (1 - cal.hit_rate) ** (1 / cal.breadth)
    hit = None if per_guess is None else round(per_guess, 4)
    return {"depth": cal.depth, "breadth": cal.breadth, "hit_rate": hit, "tool_time_scale": 1.0}


def reaches_goals(point: dict) -> bool:
    fraction = point["oracle_fraction"]
    return point["latency_reduction"] >= GOAL_LATENCY_REDUCTION and (
        fraction is not None and fraction >= GOAL_ORACLE_FRACTION
    )


def what_would_reach_goals(cal: Calibration, grid: Grid, *, seed: int = 0) -> dict:
    """At the calibrated depth and breadth, load 1, one lever at a time (the others as
    measured): the least hit rate, the tool-time scales, and the most prediction seconds at
    which both goals are met (None: not within 0..1, 0.125..64, 0..2 s)."""
    w = workload(cal, grid.episodes, seed, grid.predict_s)
    hit = calibrated_point(cal)["hit_rate"]

    def point(hit_rate: float, scale: float = 1.0, predict_s: float | None = None) -> dict:
        here = w if predict_s is None else replace(w, predict=np.full(w.gen.shape, predict_s))
        return sweep_point(here, cal, grid, cal.depth, cal.breadth, hit_rate, scale, 1)

    min_hit = next((k / 100 for k in range(101) if reaches_goals(point(k / 100))), None)
    if hit is None:
        scales, speeds = [], []
    else:
        scales = [s for k in range(-12, 25) if reaches_goals(point(hit, s := 2 ** (k / 4)))]
        speeds = [p for k in range(41) if reaches_goals(point(hit, predict_s=(p := k / 20)))]
    return {
        "goals": {
            "latency_reduction": GOAL_LATENCY_REDUCTION,
            "oracle_fraction": GOAL_ORACLE_FRACTION,
        },
        "at": calibrated_point(cal) | {"load": 1},
        "now": None if hit is None else point(hit),
        "min_hit_rate": min_hit,
        "tool_time_scale_range": [round(scales[0], 3), round(scales[-1], 3)] if scales else None,
        "max_predict_s": max(speeds, default=None),
        "oracle_latency_reduction_at_scale_1": point(1.0)["oracle_latency_reduction"],
    }


def summarise(points: list[dict], cal: Calibration, grid: Grid, *, seed: int = 0) -> dict:
    """Where latency_reduction >= PAYS, the best points, and what would reach the goals."""
    paying = [p for p in points if p["latency_reduction"] >= PAYS]
    here = {"depth": cal.depth, "breadth": cal.breadth, "load": min(grid.load)}
    min_hit = {
        str(scale): min(
            (
                p["hit_rate"]
                for p in paying
                if p["tool_time_scale"] == scale and all(p[k] == v for k, v in here.items())
            ),
            default=None,
        )
        for scale in grid.tool_time_scale
    }
    ranked = sorted(points, key=lambda p: p["latency_reduction"], reverse=True)
    return {
        "pays": {
            "threshold": PAYS,
            "points": len(paying),
            "of": len(points),
            "min_hit_rate_by_tool_time_scale": {"at": here, "min_hit_rate": min_hit},
            "hit_rate_range": _span(p["hit_rate"] for p in paying),
            "tool_time_scale_range": _span(p["tool_time_scale"] for p in paying),
            "loads": sorted({p["load"] for p in paying}),
        },
        "best": ranked[0] if ranked else None,
        "top": ranked[:5],
        "what_would_reach_goals": what_would_reach_goals(cal, grid, seed=seed),
    }


def _span(values) -> list[float] | None:
    values = list(values)
    return [min(values), max(values)] if values else None


# --- the report ---------------------------------------------------------------------------
def simulate_report(
    run_dir: Path, grid: Grid | None = None, out: Path | None = None, seed: int = 0
) -> dict:
    """Calibrate on run_dir, validate, sweep, summarise; with out, write simulation.json and
    the heat map simulation.png there."""
    grid = grid or Grid()
    cal = calibrate(run_dir)
    points = sweep(cal, grid, seed=seed)
    validation = validate(cal, episodes=grid.episodes, seed=seed, contention=grid.contention)
    levels = calibrate_levels(run_dir)
    if levels:
        validation["by_concurrency"] = validate_levels(
            levels, episodes=grid.episodes, seed=seed, contention=grid.contention
        )
    report = {
        "calibration": cal.summary(),
        "validation": validation,
        "grid_axes": grid.model_dump(mode="json"),
        "grid": points,
        "summary": summarise(points, cal, grid, seed=seed),
        "heatmap": None,
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        report["heatmap"] = str(_heatmap(out / SIMULATION_PNG, points, cal, grid))
        (out / SIMULATION_JSON).write_text(json.dumps(report, indent=2))
    return report


def _heatmap(path: Path, points: list[dict], cal: Calibration, grid: Grid) -> Path:
    """Hit rate x tool time at the calibrated depth, breadth and least load, marked where the
    run is; and depth x load at the grid's hit rate nearest the calibrated one."""
    from obsspec.profile.heatmap import Panel, nearest, write_heatmap

    hit = calibrated_point(cal)["hit_rate"]
    breadth = nearest(grid.breadth, cal.breadth)
    fixed = {"depth": nearest(grid.depth, cal.depth), "breadth": breadth, "load": min(grid.load)}
    second = Panel(
        x="load",
        y="depth",
        fixed={
            "breadth": breadth,
            "hit_rate": nearest(grid.hit_rate, 0.5 if hit is None else hit),
            "tool_time_scale": nearest(grid.tool_time_scale, 1.0),
        },
        marker=(1, cal.depth),
    )
    marker = None if hit is None else (1.0, hit)
    return write_heatmap(path, points, "tool_time_scale", "hit_rate", fixed, marker, [second])
