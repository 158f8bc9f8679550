"""What speculation costs under the current load, measured as it happens (the gate's inputs).

    regimes = Regimes(window=20, clock=time.monotonic)
    regime = regimes.now()                         # the load right now (episodes at once)
    with regimes.predicting(): await predictor...  # the world model is busy
    regime.answered(on_time=False, latency_s=1.3)  # its answer came after the command
    span = regimes.span(); ...; regime.policy.add(s_per_token, regimes.busy_fraction(span))

A regime is how many episodes share the engines now, in powers of two (1, 2, 3-4, 5-8, 9-16,
17-32, 33+): the figures of one load say nothing of another's (8 episodes at once on 2 cores
saved 6% with speculation, 16 lost 33%: docs/benchmarks.md). Per regime it keeps:

    on_time     of the last `window` world-model questions, those answered, with a guess,
                before the command ended (an answer after it, no answer, a failure: not)
    latency     the world model's seconds to answer
    policy      seconds per token of the policy's real replies while the world model was
                busy (at least half of the reply's time) against while it was idle (at most a
                tenth): how much the world model's work slows the policy's engine
    commands    commands' seconds over their expected seconds, busy against idle: how much it
                slows the sandboxes (on a CPU machine they may share its cores)

`busy` is measured on one clock: the seconds during which at least one world-model question
was in flight (`predicting`), so any span's busy fraction is a difference of two marks.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

Clock = Callable[[], float]
BUSY, IDLE = 0.5, 0.1  # busy fractions at or above which / at or below which a sample counts
MAX_SLOWDOWN = 10.0  # a ratio of two noisy means is clipped: beyond this it decides nothing new


class OnlineMean:
    """A running mean that turns into an exponential moving average after `window` samples,
    so it settles fast and still follows drift."""

    def __init__(self, window: int = 20) -> None:
        self.window = window
        self.count = 0
        self.value = 0.0

    def add(self, x: float) -> None:
        self.count += 1
        self.value += (x - self.value) / min(self.count, self.window)

    def get(self, default: float) -> float:
        return self.value if self.count else default


@dataclass
class Recent:
    """The share of True among the last `window` outcomes."""

    window: int = 20
    outcomes: deque = field(default_factory=deque)

    def add(self, outcome: bool) -> None:
        self.outcomes.append(outcome)
        if len(self.outcomes) > self.window:
            self.outcomes.popleft()

    def rate(self, prior: float, weight: float = 2.0) -> float:
        """The share, with `weight` pseudo-outcomes at `prior` (so one outcome is not all)."""
        return (sum(self.outcomes) + weight * prior) / (len(self.outcomes) + weight)

    def __len__(self) -> int:
        return len(self.outcomes)


@dataclass
class SlowdownMeter:
    """A cost per unit of work, apart while the world model was busy and while it was idle."""

    busy: OnlineMean = field(default_factory=OnlineMean)
    idle: OnlineMean = field(default_factory=OnlineMean)

    def add(self, cost: float, busy_fraction: float) -> None:
        if busy_fraction >= BUSY:
            self.busy.add(cost)
        elif busy_fraction <= IDLE:
            self.idle.add(cost)

    def slowdown(self, min_samples: int) -> float:
        """busy / idle - 1, clipped to [0, MAX_SLOWDOWN]; 0 until both have min_samples (no
        evidence of harm is not evidence of harm)."""
        if min(self.busy.count, self.idle.count) < min_samples or self.idle.value <= 0:
            return 0.0
        return min(max(self.busy.value / self.idle.value - 1.0, 0.0), MAX_SLOWDOWN)

    def as_dict(self, min_samples: int) -> dict:
        return {
            "busy_samples": self.busy.count,
            "idle_samples": self.idle.count,
            "slowdown": round(self.slowdown(min_samples), 4),
        }


@dataclass
class Regime:
    """What speculation returned at one load (see the module docstring)."""

    window: int = 20
    on_time: Recent = field(init=False)
    latency: OnlineMean = field(default_factory=OnlineMean)
    policy: SlowdownMeter = field(default_factory=SlowdownMeter)
    commands: SlowdownMeter = field(default_factory=SlowdownMeter)
    declined: int = 0  # questions the gate declined here for lateness or slowdown

    def __post_init__(self) -> None:
        self.on_time = Recent(self.window)

    def answered(self, *, on_time: bool, latency_s: float | None) -> None:
        """One world-model question's outcome; latency_s: its seconds when an answer came
        (for one cancelled because the command ended first: the seconds it had run, a lower
        bound, still worth learning from)."""
        self.on_time.add(on_time)
        if latency_s is not None:
            self.latency.add(latency_s)

    def as_dict(self, prior_on_time: float, min_samples: int) -> dict:
        return {
            "questions": len(self.on_time),
            "on_time_rate": round(self.on_time.rate(prior_on_time, weight=0.0), 4)
            if len(self.on_time)
            else None,
            "wm_latency_s": round(self.latency.value, 4) if self.latency.count else None,
            "policy": self.policy.as_dict(min_samples),
            "commands": self.commands.as_dict(min_samples),
        }


def regime_of(episodes: int) -> str:
    """The regime's name for this many episodes at once: '1', '2', '3-4', ..., '33+'."""
    if episodes <= 2:
        return str(max(episodes, 1))
    bound = 1 << (episodes - 1).bit_length()  # the power of two at or above
    if bound > 32:
        return "33+"
    return f"{bound // 2 + 1}-{bound}"


class Regimes:
    """Every regime seen, the episodes in flight (which picks the regime), and the clock of
    the world model's busy time."""

    def __init__(self, window: int = 20, clock: Clock = time.monotonic) -> None:
        self.window = window
        self.clock = clock
        self.by_name: dict[str, Regime] = {}
        self.episodes = 0  # episodes in flight on the loop
        self.commands = 0  # commands running for real
        self._predicting = 0
        self._busy_s = 0.0
        self._since = 0.0  # when the current busy span began

    def now(self) -> tuple[str, Regime]:
        name = regime_of(self.episodes)
        if name not in self.by_name:
            self.by_name[name] = Regime(self.window)
        return name, self.by_name[name]

    @contextlib.contextmanager
    def episode(self) -> Iterator[None]:
        self.episodes += 1
        try:
            yield
        finally:
            self.episodes -= 1

    @contextlib.contextmanager
    def command(self) -> Iterator[None]:
        self.commands += 1
        try:
            yield
        finally:
            self.commands -= 1

    @contextlib.contextmanager
    def predicting(self) -> Iterator[None]:
        if self._predicting == 0:
            self._since = self.clock()
        self._predicting += 1
        try:
            yield
        finally:
            self._predicting -= 1
            if self._predicting == 0:
                self._busy_s += self.clock() - self._since

    def busy_mark(self) -> float:
        """Busy seconds so far (the current span included)."""
        open_span = self.clock() - self._since if self._predicting else 0.0
        return self._busy_s + open_span

    def span(self) -> tuple[float, float]:
        """The start of a span to measure: (now, busy seconds so far)."""
        return self.clock(), self.busy_mark()

    def busy_fraction(self, span: tuple[float, float]) -> float:
        """The share of the time since `span` began that the world model was busy."""
        started, mark = span
        seconds = self.clock() - started
        return min(max((self.busy_mark() - mark) / seconds, 0.0), 1.0) if seconds > 0 else 0.0

    def as_dict(self, prior_on_time: float, min_samples: int) -> dict:
        return {
            name: regime.as_dict(prior_on_time, min_samples)
            for name, regime in sorted(self.by_name.items(), key=lambda item: _order(item[0]))
        }


def _order(name: str) -> int:
    return int(name.split("-")[0].rstrip("+"))
