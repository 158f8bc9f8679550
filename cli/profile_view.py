"""How `obsspec profile` shows its work: one line per arm episode, then the figures."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from obsspec.profile.levels import waves_first
from obsspec.profile.run import ArmDone, EpisodeLost
from obsspec.rollout.events import Note, TaskSkipped


def event_line(event) -> str | None:
    match event:
        case ArmDone(arm="seq"):
            return f"{_episode(event)} sequential: {event.agent_s:.1f} s, {event.turns} turns"
        case ArmDone():
            name = "speculative" if event.arm == "spec" else "oracle"
            return (
                f"{_episode(event)} {name}: {event.agent_s:.1f} s, "
                f"{event.turns} turns, {event.matched}/{event.attempted} guesses kept"
            )
        case EpisodeLost():
            return (
                f"{_episode(event)}: left out, the {event.arm} arm failed "
                f"every attempt ({event.error})"
            )
        case TaskSkipped():
            return f"skipped task {event.task_id}: {event.reason}"
        case Note():
            return event.message
    return None


def _episode(event: ArmDone | EpisodeLost) -> str:
    """`task #0`, and `[c8]` after it when played with other episodes at once."""
    level = f" [c{event.concurrency}]" if event.concurrency > 1 else ""
    return f"{event.task_id} #{event.episode_index}{level}"


def printer(console: Console):
    def show(event) -> None:
        line = event_line(event)
        if line is not None:
            console.print(escape(line), highlight=False, soft_wrap=True)

    return show


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def interval(values: list[float] | None) -> str:
    return "" if not values else f"  [{values[0]:.1%}, {values[1]:.1%}]"


def match_rates(figures: dict) -> str:
    """The three match rates side by side (defined in obsspec.speculation.totals)."""
    wm, wm_any = figures.get("match_rate_wm"), figures.get("match_rate_wm_any")
    any_guess = f" ({pct(wm_any)} any guess)" if wm_any != wm else ""
    return (
        f"{pct(wm)} world model{any_guess}, "
        f"{pct(figures.get('match_rate_attempted'))} of attempted, "
        f"{pct(figures.get('match_rate_used'))} of used"
    )


def prefix_cache(figures: dict) -> str:
    """The world model engine's prompt tokens found in its prefix cache over the level
    (obsspec.profile.prefix_cache); "-" when it looked nothing up or does not count."""
    return f"{pct(figures['hit_rate'])} of {figures['queried_tokens']:,} prompt tokens cached"


def figures_table(report: dict) -> Table:
    at_once = report.get("concurrency", 1)
    title = f"profile of {report['episodes']} episode(s) per arm, {at_once} at once"
    table = Table(title=title, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    phases = report["phases"]
    for arm, name in (("seq", "sequential"), ("spec", "speculative"), ("oracle", "oracle")):
        mean = phases[arm]["agent_s_mean"]
        table.add_row(f"{name} s/episode", "-" if mean is None else f"{mean:.2f}")
    table.add_row(
        "latency reduction",
        f"{pct(report['latency_reduction'])} pooled, "
        f"{pct(report['latency_reduction_median'])} median"
        + interval(report["latency_reduction_ci95"]),
    )
    table.add_row(
        "oracle (ceiling)",
        pct(report["oracle_latency_reduction"]) + interval(report["oracle_latency_reduction_ci95"]),
    )
    table.add_row("fraction of ceiling", pct(report["oracle_fraction"]))
    table.add_row("exact match", match_rates(report))
    table.add_row("real output first", pct(report["exec_won_rate"]))
    table.add_row("predictor speed-up p50", speedups(report))
    if report.get("wm_prefix_cache") is not None:  # a world model (and a report that has it)
        table.add_row("world model prefix cache", prefix_cache(report["wm_prefix_cache"]))
    table.add_row("policy tokens wasted", pct(report["tokens_wasted_fraction"]))
    table.add_row("lossless violations", str(report["lossless_violations"]))
    if report["lost_episodes"]:
        table.add_row("left out", str(len(report["lost_episodes"])))
    if report.get("arm_orders"):  # reports from before the orders alternated have none
        table.add_row("waves seq/spec first", waves_first(report["arm_orders"]))
    if report.get("arm_order_note"):
        table.add_row(Text("note", style="yellow"), Text(report["arm_order_note"], "yellow"))
    if str(report.get("prefix_caches", "")).startswith("shared"):  # later arms ran warmer
        table.add_row(
            Text("prefix caches", style="yellow"), Text(report["prefix_caches"], "yellow")
        )
    return table


def concurrency_table(report: dict) -> Table:
    """One row per concurrency level: the same episodes with N at once in each arm."""
    table = Table(title="by concurrency (the same episodes, N at once per arm)")
    for name in ("N", "episodes", "seq s/ep", "spec s/ep", "reduction", "oracle", "of oracle"):
        table.add_column(name, justify="right")
    table.add_column("ran at once", justify="right")
    table.add_column("waves seq/spec first", justify="right")
    notes = []
    for level, figures in report["by_concurrency"].items():
        if figures.get("arm_order_note"):
            notes.append(f"N={level}: {figures['arm_order_note']}")
        phases = figures["phases"]
        table.add_row(
            level,
            str(figures["episodes"]),
            _seconds(phases["seq"]["agent_s_mean"]),
            _seconds(phases["spec"]["agent_s_mean"]),
            pct(figures["latency_reduction"]) + interval(figures["latency_reduction_ci95"]),
            pct(figures["oracle_latency_reduction"])
            + interval(figures["oracle_latency_reduction_ci95"]),
            pct(figures["oracle_fraction"]) + interval(figures["oracle_fraction_ci95"]),
            "/".join(str(n) for n in figures["episodes_at_once"].values()),
            (waves_first(figures.get("arm_orders")) or "-")
            + (" *" if figures.get("arm_order_note") else ""),
        )
    if notes:  # a level whose waves ran in one order: its figures may carry the drift
        table.caption = Text("\n".join(f"* {note}" for note in notes), style="yellow")
        table.caption_justify = "left"
    return table


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def speedups(report: dict) -> str:
    """Every source's median speed-up over the command, and the world model's alone (reports
    from before it was apart have none)."""

    def times(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}x"

    shown = times(report["predictor_speedup_p50"])
    if "wm_speedup_p50" in report:
        shown += f", world model alone {times(report['wm_speedup_p50'])}"
    return shown
