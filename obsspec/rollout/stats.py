"""Running totals of a collection, for the live view and the final summary."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from obsspec.rollout.events import (
    AttemptFailed,
    EpisodeDone,
    Event,
    ShardWritten,
    TaskSkipped,
    WorkerReady,
)
from obsspec.speculation.totals import SpeculationTotals


@dataclass
class CollectStats:
    total: int  # episodes the run asks for (tasks found, broken ones too, x episodes per task)
    already_done: int  # found in the run directory at start (a resumed run)
    started: float = field(default_factory=time.monotonic)
    collecting_since: float | None = None  # the first worker ready (images built, engine up)
    episodes: int = 0  # finished in this invocation (in the dataset once their shard is)
    turns: int = 0
    tokens: int = 0
    rewards: list[float] = field(default_factory=list)
    successes: int = 0
    finish_reasons: Counter = field(default_factory=Counter)
    failures: Counter = field(default_factory=Counter)  # error type -> episodes lost to it
    retries: int = 0
    skipped_tasks: dict[str, str] = field(default_factory=dict)
    skipped_episodes: int = 0
    shards: int = 0
    saved: int = 0  # episodes in shards written by this invocation
    speculation: SpeculationTotals | None = None  # pooled over speculative episodes
    placement: dict[int, dict] = field(default_factory=dict)  # worker -> its cores by role

    def update(self, event: Event) -> None:
        match event:
            case EpisodeDone():
                self.episodes += 1
                self.turns += event.turns
                self.tokens += event.tokens
                self.finish_reasons[event.finish_reason] += 1
                if event.reward is not None:
                    self.rewards.append(event.reward)
                    self.successes += event.reward == 1.0
                if event.speculation is not None:
                    self.speculation = (self.speculation or SpeculationTotals()) + event.speculation
            case AttemptFailed(final=True):
                self.failures[event.error_type] += 1
            case AttemptFailed():
                self.retries += 1
            case TaskSkipped():
                self.skipped_tasks[event.task_id] = event.reason
                self.skipped_episodes += event.episodes
            case WorkerReady():
                if self.collecting_since is None:
                    self.collecting_since = time.monotonic()
                if event.placement is not None:
                    self.placement[event.worker] = event.placement
            case ShardWritten():
                self.shards += 1
                self.saved += event.episodes

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    @property
    def lost(self) -> int:
        """Episodes the infrastructure failed on every attempt: not in the dataset, and a
        rerun of the same command retries them."""
        return sum(self.failures.values())

    @property
    def collected(self) -> int:
        """Episodes of the run that are done: found at start, or finished in this invocation."""
        return self.already_done + self.episodes

    @property
    def missing(self) -> int:
        """Episodes the run still lacks (not yet run, lost, or of a skipped task)."""
        return self.total - self.collected

    @property
    def remaining(self) -> int:
        """Episodes this invocation has yet to try."""
        return max(self.missing - self.lost - self.skipped_episodes, 0)

    @property
    def mean_reward(self) -> float | None:
        return sum(self.rewards) / len(self.rewards) if self.rewards else None

    @property
    def collecting_s(self) -> float:
        """Seconds since episodes started (image builds and engine start excluded)."""
        return 0.0 if self.collecting_since is None else time.monotonic() - self.collecting_since

    def rate(self, amount: float) -> float:
        return amount / self.collecting_s if self.collecting_s > 0 else 0.0

    def eta_s(self) -> float | None:
        if not self.episodes:
            return None
        return self.remaining * self.collecting_s / self.episodes

    def summary(self) -> dict:
        minutes = self.collecting_s / 60
        return {
            "episodes": self.episodes,
            "turns": self.turns,
            "tokens": self.tokens,
            "mean_reward": self.mean_reward,
            "success_rate": self.successes / len(self.rewards) if self.rewards else None,
            "episodes_per_min": self.episodes / minutes if minutes > 0 else 0.0,
            "failures": dict(self.failures),
            "finish_reasons": dict(self.finish_reasons),
            "retries": self.retries,
            "skipped_tasks": self.skipped_tasks,
            "already_done": self.already_done,
            "total": self.total,
            "missing": self.missing,
            "shards": self.shards,
            "elapsed_s": round(self.elapsed_s, 2),
            "collecting_s": round(self.collecting_s, 2),
            "speculation": self.speculation.summary() if self.speculation else None,
            "placement": self.placement_summary(),
        }

    def placement_summary(self) -> dict | None:
        """Where the roles ran: one worker's placement, or each worker's by index."""
        if len(self.placement) <= 1:
            return next(iter(self.placement.values()), None)
        return {str(worker): plan for worker, plan in sorted(self.placement.items())}
