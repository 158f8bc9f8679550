"""How `obsspec rl` shows progress: a live panel (recent steps and the current phase) on a
terminal, else one line per step."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from obsspec.rl.events import Event, Note, Phase, RolloutProgress, RunStarted, StepDone

COLUMNS = (
    ("step", "step", "{}"),
    ("reward", "reward_mean", "{:.3f}"),
    ("success", "success_rate", "{:.0%}"),
    ("match wm", "spec_match_rate_wm", "{:.0%}"),
    ("match", "spec_match_rate_attempted", "{:.0%}"),
    ("match used", "spec_match_rate_used", "{:.0%}"),
    ("wm loss", "wm_loss", "{:.3f}"),
    ("pg loss", "policy_loss", "{:+.4f}"),
    ("clip", "clip_fraction", "{:.1%}"),
    ("mismatch", "logprob_mismatch", "{:.4f}"),
    ("rollout s", "rollout_seconds", "{:.1f}"),
    ("train s", "train_seconds", "{:.1f}"),
    ("sync s", "sync_seconds", "{:.1f}"),
)
# Also on each plain line (logs, CI), where width costs nothing: why speculation paid or not.
LINE_ONLY = (
    ("exec won", "spec_exec_won", "{}"),  # commands that beat every prediction
    ("rollback", "rollback", "{}"),  # command turns whose speculative work was thrown away
    ("overlap s", "spec_overlap_s", "{:.1f}"),
    ("wm dropped", "wm_dropped_too_long", "{}"),
)
SHOWN_STEPS = 12


def cell(row: dict, key: str, fmt: str) -> str:
    value = row.get(key)
    return "-" if value is None else fmt.format(value)


def step_line(row: dict) -> str:
    return "  ".join(f"{name} {cell(row, key, fmt)}" for name, key, fmt in COLUMNS + LINE_ONLY)


def steps_table(rows: list[dict], title: str | None = None) -> Table:
    table = Table(title=title)
    for name, _, _ in COLUMNS:
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(*(cell(row, key, fmt) for _, key, fmt in COLUMNS))
    return table


class RLView:
    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.status = "starting Ray and the roles (engines load in about a minute)..."
        self.steps = 0
        self._live: Live | None = None

    @contextlib.contextmanager
    def live(self, console: Console) -> Iterator[None]:
        with Live(self, console=console, refresh_per_second=2, transient=False) as live:
            self._live = live
            yield

    def update(self, event: Event) -> None:
        match event:
            case RunStarted():
                self.steps = event.steps
                resumed = f", resumed from {event.resumed_from}" if event.resumed_from else ""
                self.status = f"{event.tasks} tasks, {event.workers} rollout worker(s){resumed}"
            case Phase():
                self.status = f"step {event.step}/{self.steps}: {event.name}"
            case RolloutProgress():
                retries = (
                    f", {event.failed_attempts} failed attempts" if event.failed_attempts else ""
                )
                self.status = (
                    f"step {event.step}/{self.steps}: rollout {event.done}/{event.total} "
                    f"episodes{retries}"
                )
            case StepDone():
                self.rows.append(event.row)
            case Note():
                if self._live is not None:
                    self._live.console.print(escape(event.text), soft_wrap=True)

    def __rich__(self):
        return Group(steps_table(self.rows[-SHOWN_STEPS:]), self.status)


def plain_line(console: Console):
    """One line per finished step and per note (logs, CI)."""

    def show(event: Event) -> None:
        if isinstance(event, StepDone):
            console.print(escape(step_line(event.row)), highlight=False, soft_wrap=True)
        elif isinstance(event, Note):
            console.print(escape(event.text), highlight=False, soft_wrap=True)
        elif isinstance(event, RunStarted):
            console.print(f"rl: steps {event.first_step}..{event.steps} on {event.tasks} tasks")

    return show
