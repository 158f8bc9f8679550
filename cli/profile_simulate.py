"""`obsspec profile simulate`: where speculation pays, simulated from a measured run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Group
from rich.table import Table

from obsspec.cli.common import JsonOption, emit_json, err, out


def simulate(
    calibrate: Annotated[
        Path,
        typer.Option(
            "--calibrate",
            help="A profile's --out (preferred), or a collect run directory, to calibrate on.",
            file_okay=False,
        ),
    ],
    grid: Annotated[
        str | None,
        typer.Option(
            "--grid",
            help='Axes to sweep, e.g. "depth=1,2;hit_rate=0.3,0.6,0.9;tool_time_scale=1,4" '
            "(also load, breadth; contention, episodes, predict_s take one value).",
        ),
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Write simulation.json and simulation.png here \\[default: the --calibrate dir].",
            file_okay=False,
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the simulated draws.")] = 0,
    json_output: JsonOption = False,
) -> None:
    """Simulate speculation over depth, breadth, hit rate, tool time and load.

    Calibrated on a measured run: its episodes' reply and command seconds, its prediction
    seconds and hit rates. The simulation is first checked against the run's own measured
    latency reduction (simulation error), then swept over --grid.
    """
    from obsspec.profile.simulate import parse_grid, simulate_report

    settings = parse_grid(grid)
    err.print(f"simulating {calibrate} ...", highlight=False)
    report = simulate_report(calibrate, settings, out_dir or calibrate, seed)
    if json_output:
        emit_json(report)
        return
    out.print(Group(*report_tables(report)))
    out.print(f"heat map: {report['heatmap']}")


def report_tables(report: dict) -> list[Table]:
    return [
        calibration_table(report["calibration"]),
        validation_table(report["validation"]),
        best_table(report["summary"]["top"]),
        goals_table(report["summary"]),
    ]


def calibration_table(cal: dict) -> Table:
    table = _pairs(f"calibration ({cal['source']}: {cal['run_dir']})")
    table.add_row("episodes / command turns", f"{cal['episodes']} / {cal['command_turns']}")
    table.add_row("depth, breadth, gate", f"{cal['depth']}, {cal['breadth']}, {cal['gate']}")
    for name in ("gen_s", "exec_s", "predict_s"):
        stats = cal[name]
        table.add_row(
            f"{name} mean / p50 / p90",
            "-"
            if stats is None
            else f"{stats['mean']:.2f} / {stats['p50']:.2f} / {stats['p90']:.2f}",
        )
    table.add_row("tokens per second", _num(cal["tokens_per_s"]))
    table.add_row("attempt rate", pct(cal["attempt_rate"]))
    table.add_row("hit rate (arrived) / kept", f"{pct(cal['hit_rate'])} / {pct(cal['kept_rate'])}")
    return table


def validation_table(validation: dict) -> Table:
    table = _pairs("validation: the run itself, simulated")
    if "note" in validation:
        table.add_row("", validation["note"])
        return table
    for arm, key in (("speculative", "latency_reduction"), ("oracle", "oracle_latency_reduction")):
        error = "simulation_error" if arm == "speculative" else "oracle_simulation_error"
        table.add_row(
            f"{arm}: predicted vs measured",
            f"{pct(validation['predicted_' + key])} vs {pct(validation['measured_' + key])}"
            f"  (error {pct(validation[error])})",
        )
    for level, figures in (validation.get("by_concurrency") or {}).items():
        if "note" in figures:
            continue
        row = (
            f"{pct(figures['predicted_latency_reduction'])} vs "
            f"{pct(figures['measured_latency_reduction'])}  (error "
            f"{pct(figures['simulation_error'])})"
        )
        idle = figures.get("from_concurrency_1")
        if idle is not None:
            row += (
                f"; from concurrency 1 at load {level}: "
                f"{pct(idle['predicted_latency_reduction'])} "
                f"(error {pct(idle['simulation_error'])})"
            )
        table.add_row(f"{level} at once: predicted vs measured", row)
    for arm, figures in validation["replay"].items():
        table.add_row(
            f"{arm} arm replayed",
            f"{figures['replayed_s']:.1f} s vs {figures['measured_s']:.1f} s measured "
            f"(error {pct(figures['replay_error'])}); replies x{figures['gen_s_vs_seq']:.2f} "
            "the sequential arm's",
        )
    return table


def best_table(top: list[dict]) -> Table:
    table = Table(title="best points")
    for name in ("depth", "breadth", "hit rate", "tool time", "load", "reduction", "of oracle"):
        table.add_column(name, justify="right")
    for p in top:
        table.add_row(
            str(p["depth"]),
            str(p["breadth"]),
            f"{p['hit_rate']:g}",
            f"x{p['tool_time_scale']:g}",
            str(p["load"]),
            pct(p["latency_reduction"]),
            pct(p["oracle_fraction"]),
        )
    return table


def goals_table(summary: dict) -> Table:
    goals, pays = summary["what_would_reach_goals"], summary["pays"]
    target = goals["goals"]
    table = _pairs(
        f"goals: reduction >= {target['latency_reduction']:.1%} and "
        f">= {target['oracle_fraction']:.0%} of the oracle"
    )
    now = goals["now"]
    if now is not None:
        table.add_row(
            "calibrated point",
            f"{pct(now['latency_reduction'])} ({pct(now['oracle_fraction'])} of the oracle's "
            f"{pct(now['oracle_latency_reduction'])})",
        )
    table.add_row("least hit rate", _num(goals["min_hit_rate"], "not reachable by hit rate"))
    scales = goals["tool_time_scale_range"]
    table.add_row(
        "tool-time scales", "none in 0.125-64" if scales is None else f"x{scales[0]} - x{scales[1]}"
    )
    table.add_row("most prediction seconds", _num(goals["max_predict_s"], "none in 0-2 s"))
    table.add_row(
        f"points with reduction >= {pays['threshold']:.0%}", f"{pays['points']} of {pays['of']}"
    )
    return table


def _pairs(title: str) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    return table


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _num(value: float | None, none: str = "-") -> str:
    return none if value is None else f"{value:g}"
