"""How `obsspec collect` shows progress: a live panel on a terminal, else one line per event."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress_bar import ProgressBar
from rich.table import Table

from obsspec.rollout.events import (
    AttemptFailed,
    EpisodeDone,
    Event,
    Note,
    ShardWritten,
    TaskSkipped,
)
from obsspec.rollout.stats import CollectStats


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


def progress_text(stats: CollectStats) -> str:
    reward = "-" if stats.mean_reward is None else f"{stats.mean_reward:.2f}"
    return (
        f"{stats.collected}/{stats.total} episodes, mean reward {reward}, "
        f"{stats.rate(stats.episodes) * 60:.1f} ep/min, ETA {duration(stats.eta_s())}"
    )


def event_line(event: Event, stats: CollectStats) -> str | None:
    """The log line of an event (None for events only the live view shows)."""
    match event:
        case EpisodeDone():
            reward = "not verified" if event.reward is None else f"{event.reward:g}"
            spec = event.speculation
            guessed = f", {spec.matched}/{spec.attempted} guessed" if spec else ""
            return (
                f"{event.task_id} #{event.episode_index}: reward {reward} ({event.finish_reason}, "
                f"{event.turns} turns{guessed}, {event.seconds:.1f} s) | {progress_text(stats)}"
            )
        case AttemptFailed():
            then = "gave up (a rerun retries it)" if event.final else "retrying"
            if not event.retryable:
                then = "not retried: the task is broken"
            return (
                f"{event.task_id} #{event.episode_index}: attempt {event.attempt} failed, "
                f"{event.error_type}: {event.error} ({then})"
            )
        case TaskSkipped():
            return f"skipped task {event.task_id}: {event.reason}"
        case ShardWritten():
            return f"wrote {event.name} ({event.episodes} episodes)"
        case Note():
            return event.message
    return None


def plain_line(console: Console) -> Callable[[Event, CollectStats], None]:
    def show(event: Event, stats: CollectStats) -> None:
        line = event_line(event, stats)
        if line is not None:
            console.print(escape(line), markup=True, highlight=False, soft_wrap=True)

    return show


class CollectView:
    """The live panel; it also remembers how many episodes reached a shard (for Ctrl-C)."""

    def __init__(self) -> None:
        self.stats: CollectStats | None = None
        self._live: Live | None = None

    @property
    def saved(self) -> int:
        return self.stats.saved if self.stats else 0

    @contextlib.contextmanager
    def live(self, console: Console) -> Iterator[None]:
        with Live(self, console=console, refresh_per_second=2, transient=False) as live:
            self._live = live
            yield

    def live_update(self, event: Event, stats: CollectStats) -> None:
        self.stats = stats
        if self._live is not None and isinstance(event, AttemptFailed | TaskSkipped | Note):
            self._live.console.print(escape(event_line(event, stats) or ""), soft_wrap=True)

    def __rich__(self):
        stats = self.stats
        if stats is None:
            return "starting..."
        grid = Table.grid(padding=(0, 2))
        grid.add_row(
            ProgressBar(total=max(stats.total, 1), completed=stats.collected, width=40),
            f"{stats.collected}/{stats.total} episodes",
            f"ETA {duration(stats.eta_s())}",
        )
        reward = "-" if stats.mean_reward is None else f"{stats.mean_reward:.3f}"
        errors = ", ".join(f"{k} {v}" for k, v in stats.failures.items()) or "none"
        details = Table.grid(padding=(0, 2))
        details.add_row(
            f"turns/s {stats.rate(stats.turns):.2f}",
            f"tokens/s {stats.rate(stats.tokens):.1f}",
            f"mean reward {reward}",
            f"retries {stats.retries}",
            f"errors: {errors}",
            f"shards {stats.shards}",
        )
        if stats.speculation is None:
            return Group(grid, details)
        spec = stats.speculation.summary()
        rate = spec["match_rate_attempted"]
        speculation = Table.grid(padding=(0, 2))
        speculation.add_row(
            f"speculated {spec['attempted']}/{spec['command_turns']} commands",
            f"exact {'-' if rate is None else f'{rate:.0%}'}",
            f"kept {spec['kept']}",
            f"overlapped {spec['overlap_s']:.1f} s",
            f"discarded {spec['tokens_wasted']} tokens",
        )
        return Group(grid, details, speculation)


def summary_table(summary: dict) -> Table:
    table = Table(title=f"collected into {summary['out']} ({summary['status']})", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for key in ("episodes", "turns", "mean_reward", "success_rate", "episodes_per_min"):
        value = summary[key]
        table.add_row(
            key,
            "-" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value),
        )
    table.add_row("already done", str(summary["already_done"]))
    table.add_row("missing", str(summary["missing"]))
    table.add_row(
        "failures", ", ".join(f"{k}: {v}" for k, v in summary["failures"].items()) or "none"
    )
    if summary["skipped_tasks"]:
        table.add_row("skipped tasks", "\n".join(summary["skipped_tasks"]))
    if summary.get("speculation"):
        table.add_row("speculation", speculation_line(summary["speculation"]))
    table.add_row("seconds", f"{summary['elapsed_s']:.1f}")
    return table


def speculation_line(s: dict) -> str:
    """Pooled over the invocation's episodes: what was tried, what hit, what it cost."""

    def pct(rate: float | None) -> str:
        return "-" if rate is None else f"{rate:.0%}"

    return (
        f"{s['attempted']}/{s['command_turns']} commands predicted, "
        f"{s['matched']} exact ({pct(s['match_rate_attempted'])}; "
        f"world model alone {pct(s.get('match_rate_wm'))} of {s.get('wm_asked', 0)}), "
        f"{s['kept']} replies kept, {s['exec_won']} too late, {s['failed']} failed; "
        f"{s['overlap_s']:.1f} s overlapped; {s['tokens_wasted']} policy tokens discarded"
    )
