"""A profile's plots, as PNG files: where each arm spent its time, and what speculation saved.

    paths = write_plots(out_dir, episodes, report)   # {"timeline": OUT/plots/timeline.png, ...}

Five plots, from the episodes (ArmEpisodes) and the report (profile_figures) of one profile:

    latency_by_episode   agent seconds of each episode in each arm (grouped bars)
    latency_cdf          empirical CDF of agent seconds per arm
    timeline             one episode turn by turn, one lane per arm: generation, execution
                         and (thinner, hatched) prediction, so their overlap shows
    match_by_family      exact-match rate of the speculative arm per command family
    savings              per episode and pooled: seq - spec (achieved) next to seq - oracle
                         (possible)

A plot with nothing to draw (no episodes; no command turn, so no family) is not written and
is absent from the returned dict; with zero episodes the dict is empty and plots/ is not
created. The HTML report (obsspec.profile.html_report) says which plots were left out.

Figures are drawn on a bare `matplotlib.figure.Figure`, which renders PNGs with Agg, rather
than through pyplot: no global backend is switched, no figure stays open in pyplot's registry,
and matplotlib is imported only here, inside the functions, so `import obsspec.profile.run`
stays light.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from obsspec.profile.figures import ArmEpisodes

ARMS = ("seq", "spec", "oracle")
ARM_COLORS = {"seq": "#7f7f7f", "spec": "#1f77b4", "oracle": "#2ca02c"}
ARM_NAMES = {"seq": "sequential", "spec": "speculative", "oracle": "oracle"}
PHASE_COLORS = {"generation": "#4c72b0", "execution": "#dd8452", "prediction": "#55a868"}
PLOT_NAMES = ("latency_by_episode", "latency_cdf", "timeline", "match_by_family", "savings")
DPI = 110


@dataclass(frozen=True)
class Span:
    """One stretch of an episode's turns: a phase, from `start` seconds, for `duration`."""

    turn: int
    phase: str  # "generation" | "execution" | "prediction"
    start: float
    duration: float


def write_plots(out_dir: Path, episodes: Sequence[ArmEpisodes], report: dict) -> dict[str, Path]:
    """Every plot that has something to draw, under out_dir/plots/ (name -> path)."""
    plots = out_dir / "plots"
    drawn = {
        "latency_by_episode": plot_latency_by_episode(episodes, plots / "latency_by_episode.png"),
        "latency_cdf": plot_latency_cdf(episodes, plots / "latency_cdf.png"),
        "timeline": plot_timeline(episodes, plots / "timeline.png"),
        "match_by_family": plot_match_by_family(
            report.get("by_family") or {}, plots / "match_by_family.png"
        ),
        "savings": plot_savings(episodes, plots / "savings.png"),
    }
    return {name: path for name, path in drawn.items() if path is not None}


def plot_latency_by_episode(episodes: Sequence[ArmEpisodes], path: Path) -> Path | None:
    if not episodes:
        return None
    n = len(episodes)
    fig, ax = _figure(width=_width(n, per_item=1.0))
    width = 0.8 / len(ARMS)
    for k, arm in enumerate(ARMS):
        values = [agent_s(getattr(e, arm)) for e in episodes]
        bars = ax.bar(
            [i + (k - 1) * width for i in range(n)],
            values,
            width,
            label=ARM_NAMES[arm],
            color=ARM_COLORS[arm],
        )
        if n <= 12:
            ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=2)
    _episode_ticks(ax, episodes)
    ax.set_ylabel("agent time (s)")
    ax.set_title("Agent time per episode, by arm (lower is better)")
    ax.legend(loc="best", fontsize=8)
    ax.margins(y=0.12)
    return _save(fig, path)


def plot_latency_cdf(episodes: Sequence[ArmEpisodes], path: Path) -> Path | None:
    if not episodes:
        return None
    fig, ax = _figure(width=7.5)
    for arm in ARMS:
        values = [agent_s(getattr(e, arm)) for e in episodes]
        label = f"{ARM_NAMES[arm]} (median {statistics.median(values):.1f} s)"
        ax.ecdf(values, label=label, color=ARM_COLORS[arm], linewidth=2)
    ax.set_xlabel("agent time per episode (s)")
    ax.set_ylabel("fraction of episodes at or below")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"Agent time CDF by arm ({len(episodes)} episodes; left is better)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return _save(fig, path)


def plot_timeline(episodes: Sequence[ArmEpisodes], path: Path) -> Path | None:
    """The episode that speculation shortened most, turn by turn, in each arm."""
    if not episodes:
        return None
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    index, chosen = max(enumerate(episodes), key=lambda p: agent_s(p[1].seq) - agent_s(p[1].spec))
    fig, ax = _figure(width=12, height=4.6)
    lanes = {arm: len(ARMS) - 1 - k for k, arm in enumerate(ARMS)}  # seq on top
    labels, reconstructed = [], False
    for arm, y in lanes.items():
        row = getattr(chosen, arm)
        spans, measured = turn_spans(row)
        _draw_lane(ax, spans, y)
        ax.plot([agent_s(row)] * 2, [y - 0.45, y + 0.45], color="black", linewidth=1.5)
        labels.append(f"{ARM_NAMES[arm]}{'' if measured else ' *'}\n{agent_s(row):.1f} s")
        reconstructed |= not measured
    ax.set_yticks(list(lanes.values()), labels)
    ax.tick_params(axis="y", length=0)
    ax.set_ylim(-0.6, len(ARMS) - 0.4)
    ax.set_xlim(left=0)
    ax.set_xlabel("seconds since the episode's first turn")
    ax.grid(axis="x", alpha=0.3)
    saving = agent_s(chosen.seq) - agent_s(chosen.spec)
    title = (
        f"Turns of {_label(chosen.seq, index)}, the episode with the largest seq - spec saving "
        f"({saving:+.1f} s)"
    )
    if reconstructed:
        title += (
            "\n* start times not recorded: phases placed back to back, so an arm whose phases "
            "overlapped runs past its real end"
        )
    ax.set_title(title, fontsize=10)
    handles = [Patch(color=PHASE_COLORS[p], label=p) for p in ("generation", "execution")]
    handles.append(
        Patch(
            facecolor=PHASE_COLORS["prediction"],
            hatch="////",
            edgecolor="white",
            label="prediction",
        )
    )
    handles.append(Line2D([], [], color="black", linewidth=1.5, label="episode end (agent_s)"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4, fontsize=8)
    return _save(fig, path)


def turn_spans(row: dict) -> tuple[list[Span], bool]:
    """The spans of a row's turns, and whether every start was recorded.

    Turns carry `gen_start_s`, `exec_start_s` and `predict_start_s` (seconds since the first
    turn) when the runner recorded them. Older rows do not: a turn's generation is then placed
    right after the previous turn, its execution right after its generation, and its
    prediction at its execution's start (the predictor is asked when the command is sent).
    """
    spans: list[Span] = []
    measured = True
    cursor = 0.0
    for position, turn in enumerate(row.get("turns") or []):
        number = turn.get("index", position)
        gen_start = _start(turn, "gen_start_s")
        measured &= gen_start is not None
        gen_start = cursor if gen_start is None else gen_start
        spans.append(Span(number, "generation", gen_start, _seconds(turn, "gen_s")))
        cursor = gen_start + _seconds(turn, "gen_s")
        if turn.get("action") != "command":
            continue
        exec_start = _start(turn, "exec_start_s")
        measured &= exec_start is not None
        exec_start = cursor if exec_start is None else exec_start
        spans.append(Span(number, "execution", exec_start, _seconds(turn, "exec_s")))
        cursor = max(cursor, exec_start + _seconds(turn, "exec_s"))
        if _seconds(turn, "predict_s") > 0:
            predict_start = _start(turn, "predict_start_s")
            measured &= predict_start is not None
            predict_start = exec_start if predict_start is None else predict_start
            spans.append(Span(number, "prediction", predict_start, _seconds(turn, "predict_s")))
    return spans, measured


def plot_match_by_family(by_family: dict[str, dict], path: Path) -> Path | None:
    if not by_family:
        return None
    names = list(by_family)
    fig, ax = _figure(width=_width(len(names), per_item=0.9))
    for i, name in enumerate(names):
        family = by_family[name]
        attempted, rate = family.get("attempted", 0), family.get("match_rate_attempted")
        if not attempted or rate is None:
            ax.text(i, 0.02, "not attempted", rotation=90, ha="center", va="bottom", fontsize=8)
            continue
        ax.bar(i, rate, 0.6, color=ARM_COLORS["spec"])
        ax.text(i, rate + 0.02, f"{family.get('matched', 0)}/{attempted}", ha="center", fontsize=8)
    labels = [f"{_short(n, 16)}\n({by_family[n].get('command_turns', 0)} turns)" for n in names]
    ax.set_xticks(range(len(names)), labels, fontsize=8, rotation=45 if len(names) > 8 else 0)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylim(0, 1.15)
    ax.yaxis.set_major_formatter(_percent())
    ax.set_ylabel("exact matches / attempted")
    ax.set_title(
        "Exact-match rate of predictions by command family (speculative arm)\n"
        "bar labels: matched / attempted",
        fontsize=10,
    )
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def plot_savings(episodes: Sequence[ArmEpisodes], path: Path) -> Path | None:
    if not episodes:
        return None
    n = len(episodes)
    fig = _new_figure(width=_width(n, per_item=0.8) + 3, height=4.5)
    per_episode, pooled = fig.subplots(1, 2, width_ratios=[max(n, 2), 2], sharey=False)
    for k, arm in enumerate(("spec", "oracle")):
        savings = [agent_s(e.seq) - agent_s(getattr(e, arm)) for e in episodes]
        xs = [i + (k - 0.5) * 0.38 for i in range(n)]
        per_episode.bar(xs, savings, 0.38, color=ARM_COLORS[arm], label=_saving_label(arm))
    per_episode.axhline(0, color="black", linewidth=0.8)
    _episode_ticks(per_episode, episodes)
    per_episode.set_ylabel("seconds saved vs sequential")
    per_episode.set_title("Per episode")
    per_episode.legend(fontsize=8, loc="best")
    _draw_pooled(pooled, episodes)
    fig.suptitle("Time saved (speculative) vs time possible (oracle)", fontsize=11)
    return _save(fig, path)


def _draw_pooled(ax, episodes: Sequence[ArmEpisodes]) -> None:
    base = sum(agent_s(e.seq) for e in episodes)
    saved = {
        arm: base - sum(agent_s(getattr(e, arm)) for e in episodes) for arm in ("spec", "oracle")
    }
    for i, (arm, seconds) in enumerate(saved.items()):
        ax.bar(i, seconds, 0.6, color=ARM_COLORS[arm])
        share = f" ({seconds / base:.0%})" if base > 0 else ""
        ax.annotate(
            f"{seconds:.1f} s{share}",
            (i, seconds),
            xytext=(0, 3 if seconds >= 0 else -12),
            textcoords="offset points",
            ha="center",
            fontsize=8,
        )
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks([0, 1], ["achieved\n(spec)", "possible\n(oracle)"], fontsize=8)
    ax.set_xlim(-0.7, 1.7)
    ax.margins(y=0.15)
    title = f"Pooled over {len(episodes)} episodes\n(of {base:.1f} s sequential)"
    if saved["oracle"] > 0:
        title += f"\nspec got {saved['spec'] / saved['oracle']:.0%} of the possible"
    ax.set_title(title, fontsize=9)


def _draw_lane(ax, spans: list[Span], y: float) -> None:
    """Three rows in the lane, generation over execution over a thinner hatched prediction,
    so phases that ran at the same time (a reply generated, or an output predicted, while the
    command ran) sit one above the other instead of hiding each other."""
    for phase, (bottom, height) in {
        "generation": (y + 0.14, 0.28),
        "execution": (y - 0.16, 0.28),
        "prediction": (y - 0.40, 0.2),
    }.items():
        bars = [(s.start, s.duration) for s in spans if s.phase == phase and s.duration > 0]
        if not bars:
            continue
        hatch = "////" if phase == "prediction" else None
        ax.broken_barh(
            bars,
            (bottom, height),
            facecolors=PHASE_COLORS[phase],
            edgecolor="white",
            linewidth=0.5,
            hatch=hatch,
        )


def _episode_ticks(ax, episodes: Sequence[ArmEpisodes]) -> None:
    labels = [_label(e.seq, i) for i, e in enumerate(episodes)]
    rotate = len(labels) > 3 or max(len(label) for label in labels) > 14
    ax.set_xticks(
        range(len(labels)),
        labels,
        rotation=30 if rotate else 0,
        ha="right" if rotate else "center",
        fontsize=8,
    )


def _saving_label(arm: str) -> str:
    return "achieved: seq - spec" if arm == "spec" else "possible: seq - oracle"


def agent_s(row: dict) -> float:
    return float(row.get("agent_s") or 0.0)


def _label(row: dict, position: int) -> str:
    task = row.get("task_id")
    if task is None:
        return f"episode {position}"
    return f"{_short(str(task), 28)}#{row.get('episode_index', 0)}"


def _short(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, its dollar signs escaped: users' task ids and
    commands must not be parsed as matplotlib mathtext (a stray `$\\x$` would raise)."""
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.replace("$", r"\$")


def _start(turn: dict, key: str) -> float | None:
    value = turn.get(key)
    return None if value is None else float(value)


def _seconds(turn: dict, key: str) -> float:
    return float(turn.get(key) or 0.0)


def _width(items: int, *, per_item: float) -> float:
    return min(max(7.0, 2.5 + per_item * items), 20.0)


def _new_figure(*, width: float, height: float = 4.5):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _figure(*, width: float, height: float = 4.5):
    fig = _new_figure(width=width, height=height)
    return fig, fig.subplots()


def _percent():
    from matplotlib.ticker import PercentFormatter

    return PercentFormatter(xmax=1.0)


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png")
    return path
