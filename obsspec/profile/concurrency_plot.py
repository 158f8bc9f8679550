"""What speculation buys as more episodes share the policy engine: one plot over the levels.

    plot_by_concurrency(report["by_concurrency"], OUT/plots/by_concurrency.png)

Left: the latency reduction and the oracle's (the ceiling) against episodes at once, with
their bootstrap 95% intervals as error bars. Right: the fraction of the ceiling reached, with
its interval. `obsspec profile --concurrency 1,8` draws it into the report, and
bench/profile_concurrency.py for its sweep. Levels are spaced evenly (1, 4, 8, 16 read
better side by side than on a linear axis).
"""

from __future__ import annotations

from pathlib import Path

from obsspec.profile.plots import ARM_COLORS, _new_figure, _percent, _save


def plot_by_concurrency(by_concurrency: dict[str, dict], path: Path) -> Path | None:
    """None (nothing written) when no level has a figure to draw."""
    levels = sorted(by_concurrency, key=int)
    if not any(by_concurrency[n].get("latency_reduction") is not None for n in levels):
        return None
    fig = _new_figure(width=11.0, height=4.2)
    left, right = fig.subplots(1, 2)
    x = list(range(len(levels)))
    series = (
        ("latency_reduction", "speculative", ARM_COLORS["spec"], left),
        ("oracle_latency_reduction", "oracle (ceiling)", ARM_COLORS["oracle"], left),
        ("oracle_fraction", "fraction of the ceiling", ARM_COLORS["spec"], right),
    )
    for key, label, color, ax in series:
        _draw_series(ax, x, [by_concurrency[n] for n in levels], key, label, color)
    for ax, title in ((left, "latency reduction"), (right, "fraction of the oracle's saving")):
        ax.set_xticks(x, levels)
        ax.set_xlabel("episodes at once (policy engine shared)")
        ax.set_title(title)
        ax.yaxis.set_major_formatter(_percent())
        ax.axhline(0, color="#999", linewidth=0.8)
        if ax.get_legend_handles_labels()[0]:  # a panel with no figure at any level has none
            ax.legend(loc="best", fontsize=8)
    return _save(fig, path)


def _draw_series(ax, x: list[int], figures: list[dict], key: str, label: str, color: str):
    points = [(i, f[key], f.get(f"{key}_ci95")) for i, f in zip(x, figures, strict=True)]
    points = [(i, value, ci) for i, value, ci in points if value is not None]
    if not points:
        return
    below = [value - ci[0] if ci else 0.0 for _, value, ci in points]
    above = [ci[1] - value if ci else 0.0 for _, value, ci in points]
    ax.errorbar(
        [i for i, _, _ in points],
        [value for _, value, _ in points],
        yerr=[[max(b, 0.0) for b in below], [max(a, 0.0) for a in above]],
        marker="o",
        capsize=4,
        color=color,
        label=label,
        linestyle="-" if key != "oracle_latency_reduction" else "--",
    )
