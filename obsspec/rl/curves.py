"""The run's learning curves as one PNG: OUT/curves.png, redrawn after every checkpoint.

    write_curves(rows, out / "curves.png")

Four panels over steps, from the metrics rows: reward (mean, and success rate), the
speculation match rates (attempted, and the world model alone, with the shares of
attempts the command won and of command turns rolled back) with the world model's loss
on each step's new observations (its drift), the policy's loss and clip fraction, and where
each step's seconds went (rollout, train, sync, stacked). Drawn on a bare matplotlib Figure
(Agg), like the profile's plots.
"""

from __future__ import annotations

from pathlib import Path

DPI = 110


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    """Steps and values of `key`, skipping steps where it is null."""
    points = [(row["step"], row[key]) for row in rows if row.get(key) is not None]
    return [s for s, _ in points], [v for _, v in points]


def share(rows: list[dict], key: str, of: str) -> tuple[list[int], list[float]]:
    """Steps and row[key] / row[of], where both are known and row[of] is not 0."""
    points = [(r["step"], r[key] / r[of]) for r in rows if r.get(key) is not None and r.get(of)]
    return [s for s, _ in points], [v for _, v in points]


def write_curves(rows: list[dict], path: Path) -> Path | None:
    """The PNG, or None with no rows to draw."""
    if not rows:
        return None
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(11, 7), dpi=DPI, layout="constrained")
    reward, match, policy, seconds = figure.subplots(2, 2).flat
    reward.plot(*series(rows, "reward_mean"), marker="o", label="reward (mean)")
    reward.plot(*series(rows, "success_rate"), marker=".", ls="--", label="success rate")
    reward.set(title="reward", xlabel="step", ylim=(-0.05, 1.05))
    match.plot(*series(rows, "spec_match_rate"), marker="o", color="#2ca02c",
               label="match rate (attempted)")  # fmt: skip
    match.plot(*series(rows, "spec_match_rate_wm"), marker="s", ls=":", color="#17becf",
               label="world model alone (first guess)")  # fmt: skip
    match.plot(*share(rows, "spec_exec_won", "spec_attempted"), marker="x", ls=":",
               color="#8c564b", label="exec won / attempted")  # fmt: skip
    match.plot(*share(rows, "rollback", "spec_attempted"), marker="+", ls=":",
               color="#7f7f7f", label="rollback / attempted")  # fmt: skip
    match.set(title="speculation and the world model", xlabel="step", ylim=(-0.05, 1.05))
    drift = match.twinx()
    drift.plot(*series(rows, "wm_loss"), marker=".", color="#d62728", label="wm loss (new data)")
    drift.set_ylabel("world-model loss")
    policy.plot(*series(rows, "policy_loss"), marker="o", label="policy loss")
    clip = policy.twinx()
    clip.plot(*series(rows, "clip_fraction"), marker=".", color="#9467bd", label="clip fraction")
    policy.set(title="policy update", xlabel="step")
    if not series(rows, "policy_loss")[0]:
        policy.text(0.5, 0.5, "no update yet:\nevery group's rewards were equal",
                    transform=policy.transAxes, ha="center", va="center")  # fmt: skip
    steps = [row["step"] for row in rows]
    bottom = [0.0] * len(rows)
    for key, color in (
        ("rollout_seconds", "#4c72b0"),
        ("train_seconds", "#dd8452"),
        ("sync_seconds", "#55a868"),
    ):
        values = [row.get(key) or 0.0 for row in rows]
        seconds.bar(steps, values, bottom=bottom, color=color, label=key.split("_")[0])
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    seconds.set(title="seconds per step", xlabel="step")
    for axes in (reward, match, policy, seconds):
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    for axes in (reward, seconds):
        axes.legend(loc="best", fontsize="small")
    for left, right in ((match, drift), (policy, clip)):
        lines = left.get_lines() + right.get_lines()
        left.legend(lines, [line.get_label() for line in lines], loc="best", fontsize="small")
    tmp = path.with_name(f".{path.name}.tmp")
    figure.savefig(tmp, format="png")
    tmp.replace(path)
    return path
