"""Progress while a model trains and is evaluated (`train-wm`, `sft`).

On a terminal, one rich progress display with a training bar (loss, tokens/s) and a bar per
evaluation phase; otherwise a line on stderr every ~10 s.
"""

from __future__ import annotations

import time

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from obsspec.cli.common import err

LINE_EVERY_S = 10.0


class TrainView:
    """A context manager; `on_step`, `on_prediction` and `on_episodes` are the library's
    callbacks (training steps, world-model predictions, evaluation episodes)."""

    def __init__(self, *, live: bool = True, quiet: bool = False) -> None:
        self.quiet = quiet
        self.live = live and err.is_terminal and not quiet
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeRemainingColumn(),
            console=err,
            transient=True,
        )
        self._tasks: dict[str, int] = {}
        self._last_line = 0.0

    def __enter__(self) -> TrainView:
        if self.live:
            self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.live:
            self.progress.stop()

    def _update(self, name: str, done: int, total: int, detail: str) -> None:
        if name not in self._tasks:
            self._tasks[name] = self.progress.add_task(name, total=total, detail=detail)
        self.progress.update(self._tasks[name], completed=done, total=total, detail=detail)

    def _line_due(self, last: bool) -> bool:
        now = time.monotonic()
        if last or now - self._last_line >= LINE_EVERY_S:
            self._last_line = now
            return True
        return False

    def on_step(self, p) -> None:
        detail = f"loss {p.loss:.4f}  {p.tokens_per_s:.0f} tok/s"
        if self.live:
            self._update("training", p.step, p.total_steps, detail)
        elif not self.quiet and self._line_due(p.step == p.total_steps):
            eta = p.elapsed_s / p.step * (p.total_steps - p.step) if p.step else 0
            err.print(
                f"step {p.step}/{p.total_steps}  epoch {p.epoch + 1}  {detail}  "
                f"lr {p.lr:.2e}  eta {eta:.0f}s",
                highlight=False,
            )

    def on_prediction(self, done: int, total: int) -> None:
        if self.live:
            self._update("predicting", done, total, "")
        elif not self.quiet and self._line_due(done == total):
            err.print(f"predicted {done}/{total} held-out turns", highlight=False)

    def on_episodes(self, arm: str, done: int, total: int) -> None:
        if self.live:
            self._update(f"episodes ({arm})", done, total, "")
        elif not self.quiet and self._line_due(done == total):
            err.print(f"{arm}: {done}/{total} held-out episodes", highlight=False)


def fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def trainer_table(title: str, summary: dict, data_rows: list[tuple[str, object]]) -> Table:
    """The trainer's outcome (obsspec.train.loop.TrainOutcome fields), then data_rows."""
    table = Table(title=title, show_header=False)
    losses = f"{fmt(summary['first_loss'])} -> {fmt(summary['last_loss'])}"
    rows = [
        ("out", summary["out"]),
        ("steps", summary["steps"]),
        ("device / dtype", f"{summary['device']} / {summary['dtype']}"),
        ("loss first -> last step", losses),
    ]
    if summary.get("eval_loss_before") is not None or summary.get("eval_loss_after") is not None:
        held_out = f"{fmt(summary['eval_loss_before'])} -> {fmt(summary['eval_loss_after'])}"
        rows.append(("held-out loss before -> after", held_out))
    if summary.get("eval_loss_by_epoch"):
        losses = ", ".join(f"{epoch}: {fmt(loss)}" for epoch, loss in summary["eval_loss_by_epoch"])
        rows.append(("held-out loss by epoch", losses))
    rows += [("tokens", summary["tokens"]), ("seconds", f"{summary['seconds']:.0f}")]
    for name, value in rows + data_rows:
        table.add_row(name, str(value))
    return table
