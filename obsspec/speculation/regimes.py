"""What speculation costs under the current load, measured as it happens (the gate's inputs).

    regimes = Regimes(window=20, clock=time.monotonic)
    regime = regimes.now()                         # the load right now (episodes at once)
    with regimes.predicting(): await predictor...  # the world model is busy
    regime.answered(on_time=False, latency_s=1.3)  # its answer came after the command
    span = regimes.span(); ...; regime.policy.add(s_per_token, regimes.busy_fraction(span))

A regime is how many episodes share the engines now, in powers of two (1, 2, 3-4, 5-8, 9-16,
17-32, 33+): the figures of one load say nothing of another's (8 episodes at once on 2 cores
saved 6% with speculation, 16 lost 33%: docs/benchmarks.md). Per regime it keeps:

    latencies   the world model's seconds to answer, the last `window` questions (one
                cancelled because its command ended first counts the seconds it had run: a
                lower bound, which still says it is slower than a command that long)
    answered    of the questions that ended (not cancelled), those with a guess (no answer,
                a cut-off answer or a failure: not)
    on_time     of the questions, those answered with a guess before the command ended
                (reported; the gate weighs each command against the latencies instead, so
                late answers to short commands do not count against long ones)
    policy      seconds per token of the policy's real replies while the world model was
                busy (at least half of the reply's time) against while it was idle (at most a
                tenth), compared between replies begun at the same engine load (requests in
                the policy engine, in powers of two: more requests decode slower anyway, and
                the world model is busiest when most episodes run): how much the world
                model's work slows the policy's engine

    commands    seconds of real commands while the world model was busy against while it
                was idle, compared between runs of the same command line in the same task (a
                family's runs differ too much: `make lint` against `make test`, and so do one
                line's in different tasks; and the world model is asked about the long ones,
                so busy runs of a family are the long ones whatever it costs them): how much
                its work slows the sandboxes. With the sandboxes on the world model's cores,
                or all on the policy's (8 at once on one core: commands took 89% longer with
                it, replies 22%), this is most of what it costs.

`busy` is measured on one clock: the seconds during which at least one world-model question
was in flight (`predicting`), and the tail after (the engine's worker spins then), so any
span's busy fraction is a difference of two marks.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field

from obsspec.inference.worker_spin import VLLM_SPIN_S

Clock = Callable[[], float]
BUSY, IDLE = 0.5, 0.1  # busy fractions at or above which / at or below which a sample counts
# After each step vLLM's worker spins on its message queue before it sleeps (shm_broadcast's
# busy loop; docs/benchmarks.md measured 0.98 CPU-seconds in the second after a request): for
# that long after its last question the world model's engine still takes its core. vLLM's own
# is 1 s; obsspec's CPU engines sleep after 50 ms (obsspec.inference.worker_spin), and the
# session gives the gate its engine's figure. This is the figure where it is not known.
BUSY_TAIL_S = VLLM_SPIN_S
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
class BusyIdle:
    busy: OnlineMean = field(default_factory=OnlineMean)
    idle: OnlineMean = field(default_factory=OnlineMean)


@dataclass
class SlowdownMeter:
    """A cost per unit of work while the world model was busy and while it was idle, apart
    for each load (a stratum) the work began at."""

    # Samples of each kind a stratum needs to be compared (None: min_samples). Commands, one
    # stratum per command line, compare with one of each; min_samples pairs in all are needed.
    per_stratum: int | None = None
    # Pairs at the prior assumed beside those measured: a few single pairs of commands that
    # vary anyway by a fifth either way must not decide alone.
    prior_pairs: int = 0
    strata: dict[Hashable, BusyIdle] = field(default_factory=dict)

    def add(
        self, cost: float, busy_fraction: float, load: int = 0, *, key: Hashable = None
    ) -> None:
        """One unit of work's cost, in the stratum of `key`, else of its load (0, 1, 2-3...)."""
        stratum = self.strata.setdefault(load.bit_length() if key is None else key, BusyIdle())
        if busy_fraction >= BUSY:
            stratum.busy.add(cost)
        elif busy_fraction <= IDLE:
            stratum.idle.add(cost)

    def _compared(self, min_samples: int) -> list[BusyIdle]:
        """The strata with enough of both, if they hold min_samples pairs in all; else none."""
        need = self.per_stratum or min_samples
        both = [
            s
            for s in self.strata.values()
            if min(s.busy.count, s.idle.count) >= need and s.idle.value > 0
        ]
        pairs = sum(min(s.busy.count, s.idle.count) for s in both)
        return both if pairs >= min_samples else []

    def measured(self, min_samples: int) -> bool:
        """Enough busy and idle work compared for `slowdown` to be a measurement."""
        return bool(self._compared(min_samples))

    def needs_baseline(self, min_samples: int) -> bool:
        """Work seen while the world model was busy, and not enough idle work to compare it
        with: only holding the world model back can measure what it costs."""
        busy = sum(s.busy.count for s in self.strata.values())
        return busy >= 2 * min_samples and not self.measured(min_samples)

    def slowdown(self, min_samples: int, prior: float = 0.0) -> float:
        """busy / idle - 1 within each stratum compared (`_compared`), averaged by busy
        samples with `prior_pairs` at `prior`, clipped to [0, MAX_SLOWDOWN]; the prior
        without enough of them (the gate's `prior_slowdown`: the cost of a world model never
        measured is not known to be nothing)."""
        ratios = [
            (s.busy.value / s.idle.value - 1.0, s.busy.count) for s in self._compared(min_samples)
        ]
        if not ratios:
            return prior
        total = sum(r * n for r, n in ratios) + self.prior_pairs * prior
        mean = total / (sum(n for _, n in ratios) + self.prior_pairs)
        return min(max(mean, 0.0), MAX_SLOWDOWN)

    def as_dict(self, min_samples: int, prior: float) -> dict:
        return {
            "busy_samples": sum(s.busy.count for s in self.strata.values()),
            "idle_samples": sum(s.idle.count for s in self.strata.values()),
            "slowdown": round(self.slowdown(min_samples, prior), 4),
            "measured": self.measured(min_samples),
        }


@dataclass
class Regime:
    """What speculation returned at one load (see the module docstring)."""

    window: int = 20
    latencies: deque = field(init=False)
    answered: Recent = field(init=False)
    on_time: Recent = field(init=False)
    policy: SlowdownMeter = field(default_factory=SlowdownMeter)
    commands: SlowdownMeter = field(
        default_factory=lambda: SlowdownMeter(per_stratum=1, prior_pairs=3)
    )

    def __post_init__(self) -> None:
        self.latencies = deque(maxlen=self.window)
        self.answered = Recent(self.window)
        self.on_time = Recent(self.window)

    def outcome(self, *, on_time: bool, latency_s: float | None, answered: bool | None) -> None:
        """One world-model question's outcome: on_time, answered with a guess before its
        command ended; latency_s, its seconds (for one cancelled when the command ended: the
        seconds it had run, a lower bound); answered, whether it ended with a guess (None:
        cancelled first, unknown)."""
        self.on_time.add(on_time)
        if latency_s is not None:
            self.latencies.append(latency_s)
        if answered is not None:
            self.answered.add(answered)

    def mean_latency(self, default: float) -> float:
        return sum(self.latencies) / len(self.latencies) if self.latencies else default

    def as_dict(self, min_samples: int, prior: float) -> dict:
        return {
            "questions": len(self.on_time),
            "on_time_rate": round(self.on_time.rate(0.0, weight=0.0), 4)
            if len(self.on_time)
            else None,
            "wm_latency_s": round(self.mean_latency(0.0), 4) if self.latencies else None,
            "answered_rate": round(self.answered.rate(0.0, weight=0.0), 4)
            if len(self.answered)
            else None,
            "policy": self.policy.as_dict(min_samples, prior),
            "commands": self.commands.as_dict(min_samples, prior),
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

    def __init__(
        self, window: int = 20, clock: Clock = time.monotonic, tail_s: float = BUSY_TAIL_S
    ) -> None:
        self.window = window
        self.clock = clock
        self.tail_s = tail_s
        self.by_name: dict[str, Regime] = {}
        self.episodes = 0  # episodes in flight on the loop
        self.commands = 0  # commands running in the sandboxes
        self._predicting = 0
        self._busy_s = 0.0  # of the spans closed
        self._span: tuple[float, float] | None = None  # the last span: (start, end or inf)

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
    def executing(self) -> Iterator[None]:
        self.commands += 1
        try:
            yield
        finally:
            self.commands -= 1

    @contextlib.contextmanager
    def predicting(self) -> Iterator[None]:
        """A question in flight. The engine stays busy `tail_s` after the last one ends (its
        worker spins: see BUSY_TAIL_S); a question begun within that tail continues the span."""
        if self._predicting == 0:
            now = self.clock()
            if self._span is None or now > self._span[1]:  # the last span is over: close it
                self._busy_s += self._span_seconds(now)
                self._span = (now, float("inf"))
            else:
                self._span = (self._span[0], float("inf"))
        self._predicting += 1
        try:
            yield
        finally:
            self._predicting -= 1
            if self._predicting == 0 and self._span is not None:
                self._span = (self._span[0], self.clock() + self.tail_s)

    def _span_seconds(self, now: float) -> float:
        if self._span is None:
            return 0.0
        start, end = self._span
        return max(min(now, end) - start, 0.0)

    def busy_mark(self) -> float:
        """Busy seconds so far (the current span, and its tail so far, included)."""
        return self._busy_s + self._span_seconds(self.clock())

    def span(self) -> tuple[float, float]:
        """The start of a span to measure: (now, busy seconds so far)."""
        return self.clock(), self.busy_mark()

    def busy_fraction(self, span: tuple[float, float]) -> float:
        """The share of the time since `span` began that the world model was busy."""
        started, mark = span
        seconds = self.clock() - started
        return min(max((self.busy_mark() - mark) / seconds, 0.0), 1.0) if seconds > 0 else 0.0

    def as_dict(self, min_samples: int, prior: float) -> dict:
        return {
            name: regime.as_dict(min_samples, prior)
            for name, regime in sorted(self.by_name.items(), key=lambda item: _order(item[0]))
        }


def _order(name: str) -> int:
    first = name.split("-")[0].rstrip("+")
    return int(first) if first.isdigit() else 0
