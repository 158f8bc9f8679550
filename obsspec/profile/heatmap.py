"""The simulated latency reduction as heat maps, written to a PNG.

    write_heatmap(path, points, x="tool_time_scale", y="hit_rate",
                  fixed={"depth": 1, "breadth": 1, "load": 1}, marker=(1.0, 0.45),
                  extra=[Panel(x="load", y="depth", fixed={...})])

`points` are the sweep's (obsspec.profile.simulate): one dict per grid point with the axes
and `latency_reduction`. A panel keeps the points whose `fixed` axes match, lays
latency_reduction over x by y, writes the percentage in each cell, and marks `marker` (the
calibrated point; its position is interpolated between grid values, in log space on the
multiplicative axes). Cells are green where speculation saves time and red where it costs.

Drawn on a bare `matplotlib.figure.Figure` (Agg renders the PNG): no pyplot state, and
matplotlib is imported only when a plot is written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

LOG_AXES = {"tool_time_scale", "load"}
LABELS = {
    "tool_time_scale": "tool-time scale (x calibrated command seconds)",
    "hit_rate": "hit rate per guess",
    "load": "concurrent episodes per engine",
    "depth": "depth",
    "breadth": "breadth",
}
DPI = 110


@dataclass(frozen=True)
class Panel:
    x: str
    y: str
    fixed: dict = field(default_factory=dict)
    marker: tuple[float, float] | None = None  # (x, y) of the calibrated point


def nearest(values: Sequence[float], target: float) -> float:
    """The grid value closest to target (ties: the smaller)."""
    return min(sorted(values), key=lambda v: abs(v - target))


def cells(points: Sequence[dict], panel: Panel) -> tuple[list, list, list[list[float | None]]]:
    """x values, y values, and latency_reduction[y][x] (None where no point)."""
    chosen = [p for p in points if all(_same(p[k], v) for k, v in panel.fixed.items())]
    xs = sorted({p[panel.x] for p in chosen})
    ys = sorted({p[panel.y] for p in chosen})
    grid: list[list[float | None]] = [[None] * len(xs) for _ in ys]
    for p in chosen:
        grid[ys.index(p[panel.y])][xs.index(p[panel.x])] = p["latency_reduction"]
    return xs, ys, grid


def write_heatmap(
    path: Path,
    points: Sequence[dict],
    x: str = "tool_time_scale",
    y: str = "hit_rate",
    fixed: dict | None = None,
    marker: tuple[float, float] | None = None,
    extra: Sequence[Panel] = (),
) -> Path:
    """One panel (x by y at `fixed`), then each of `extra`, side by side; returns path."""
    from matplotlib.figure import Figure

    panels = [Panel(x, y, fixed or {}, marker), *extra]
    drawable = [(panel, cells(points, panel)) for panel in panels]
    drawable = [(panel, data) for panel, data in drawable if data[0] and data[1]]
    fig = Figure(figsize=(6.2 * max(len(drawable), 1), 5.0), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, max(len(drawable), 1), squeeze=False)[0]
    # One colour scale for every panel, symmetric so that 0 is neutral.
    found = [abs(v) for _, (_, _, grid) in drawable for row in grid for v in row if v is not None]
    limit = max([0.05, *found])
    image = None
    for ax, (panel, data) in zip(axes, drawable, strict=False):
        image = _draw(ax, panel, *data, limit=limit)
    if image is not None:
        fig.colorbar(image, ax=list(axes), label="latency reduction", shrink=0.8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png")
    return path


def _draw(ax, panel: Panel, xs: list, ys: list, grid: list[list[float | None]], limit: float):
    import numpy as np

    values = np.array([[np.nan if v is None else v for v in row] for row in grid])
    image = ax.imshow(values, origin="lower", cmap="RdYlGn", vmin=-limit, vmax=limit, aspect="auto")
    for (row, col), value in np.ndenumerate(values):
        if not math.isnan(value):
            ax.text(col, row, f"{value:.0%}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(xs)), [f"{v:g}" for v in xs])
    ax.set_yticks(range(len(ys)), [f"{v:g}" for v in ys])
    ax.set_xlabel(LABELS.get(panel.x, panel.x))
    ax.set_ylabel(LABELS.get(panel.y, panel.y))
    fixed = ", ".join(f"{k}={v:g}" for k, v in panel.fixed.items())
    ax.set_title(f"latency reduction at {fixed}", fontsize=9)
    if panel.marker is not None:
        mx = _position(xs, panel.marker[0], panel.x in LOG_AXES)
        my = _position(ys, panel.marker[1], panel.y in LOG_AXES)
        # A ring, so the cell's percentage stays readable under it.
        ax.plot([mx], [my], marker="o", markersize=26, markerfacecolor="none", color="black")
        ax.annotate("calibrated", (mx, my), xytext=(12, 12), textcoords="offset points", fontsize=8)
    return image


def _position(values: list, value: float, log: bool) -> float:
    """Where value falls on a categorical axis of sorted values (index space)."""
    if len(values) == 1:
        return 0.0
    import numpy as np

    scale = (lambda v: math.log(max(v, 1e-9))) if log else (lambda v: v)
    return float(np.interp(scale(value), [scale(v) for v in values], range(len(values))))


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
