"""Whether to speculate on a command: `always`, `never`, or when it is expected to pay (`auto`).

The `auto` rule, per command (the arithmetic of REFERENCE.md, "Latency arithmetic"):

    S = mean over l of min(G, E - l)+   seconds a hit saves: the next reply overlaps the
                                        command, for each recent world-model latency l
    p = h * a                           the chance of an exact guess: the family's hit rate
                                        (h) times the share of questions answered (a)
    L = running + waiting               requests the policy engine serves besides this one
    ask the world model  iff  min(G, E) >= min_saving_s  and  S >= min_saving_s  and
        p*S > (1 - p)*S*(waste_weight + contention*L) + (P + T)*(s*L + s_c*C) + overhead_s

    E  expected seconds of the command: an online mean per (task, command family), falling
       back to the family's, then to `prior_exec_s`. Every real execution updates it, so a
       family of fast commands stops being speculated on after its first run.
    G  expected seconds of a policy reply (online mean of real replies).
    l  the world model's latencies at the current load (below); P their mean.
    h  the command family's hit rate among answers, from `prior_hit_rate`.
    A miss wastes about S seconds of engine time, which counts as `waste_weight` seconds of
    latency each, and slows the L other requests by the fraction `contention` each for that
    long; `overhead_s` is the fixed cost of an attempt.

What speculation actually returns is learned per regime (obsspec.speculation.regimes: how
many episodes share the engines now): the world model's latencies there (a question
cancelled because its command ended first counts the seconds it ran, a lower bound: an
answer later than the commands of a family shows as no saving for that family, while longer
commands still get asked); a, the share of the questions that ended with a guess (no answer,
an answer cut off, a failure: not; from `prior_answered`); s, the slowdown of the policy's
engine measured while it worked (seconds per token of real replies, busy against idle, at
the same engine load); and s_c, the slowdown of commands (seconds of runs of the same command
line, busy against idle); both `prior_slowdown` until measured at this load. Its P seconds
of work, and the T seconds its engine's worker spins after each answer (`busy_tail_s`: the
engine's own figure, obsspec.inference.worker_spin; 1 s, vLLM's, where unknown), cost each of
the L other requests s*(P + T) and each of the C commands running (this one included)
s_c*(P + T). When
the expected saving is not positive the world model is not asked, so its engine does no
work; the cheap predictors (state cache, rules, repeats) are still asked, and a guess of
theirs is branched on when it pays (`should_branch`). Every `explore_every`-th question
declined for lateness, slowdown or a low hit rate is asked anyway, so a regime or a family
written off is tried again (the load changes; a co-trained world model improves).

Every decision has a reason (GateReason), counted in `decisions` and kept on the turn's
SpeculationRecord (`gate`): asked, explore, always, never, too_fast (a hit would save less
than min_saving_s even with an instant answer), late (the world model's latencies leave no
saving on such a command), unlikely (p too low), slowdown (the world model's work costs the
others more than a hit saves), baseline (held back so that the policy's and the commands'
speed without it can be measured: see `_holding_back`).

It is asked twice. Before predicting (`decide`), as above. After a guess arrives
(`should_branch`), p blends the (family, source) hit rate with the guess's own confidence,
(hits + k*confidence) / (attempts + k) with k = `confidence_weight`: with no history the
confidence decides, with much history the record does; and S uses the seconds the command
has already run instead of P.
"""

from __future__ import annotations

import enum
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field

from pydantic import Field

from obsspec.config import StrictModel
from obsspec.speculation.families import command_family
from obsspec.speculation.predictor import Prediction
from obsspec.speculation.regimes import BUSY_TAIL_S, Clock, OnlineMean, Regime, Regimes


class GateMode(enum.StrEnum):
    always = "always"
    never = "never"
    auto = "auto"


class GateSettings(StrictModel):
    mode: GateMode = Field(default=GateMode.auto, description="always, never, or auto.")
    prior_exec_s: float = Field(
        default=0.5, ge=0, description="Expected seconds of a command family never seen run."
    )
    prior_hit_rate: float = Field(
        default=0.5, ge=0, le=1, description="Hit rate assumed for a family never predicted."
    )
    confidence_weight: float = Field(
        default=2.0,
        ge=0,
        description="Pseudo-counts given to a prediction's confidence against its record.",
    )
    waste_weight: float = Field(
        default=0.1,
        ge=0,
        description="Seconds of latency one second of wasted engine time is worth avoiding.",
    )
    contention: float = Field(
        default=0.05,
        ge=0,
        description="Fraction by which one extra reply slows each other request on the engine.",
    )
    overhead_s: float = Field(default=0.005, ge=0, description="Fixed seconds one attempt costs.")
    min_saving_s: float = Field(
        default=0.05, ge=0, description="Do not speculate when a hit would save less than this."
    )
    hit_window: int | None = Field(
        default=None,
        ge=1,
        description="Hit rates over the last N outcomes of a command family [default: all].",
    )
    explore_every: int = Field(
        default=8,
        ge=0,
        description="Ask the world model on every N-th question declined for lateness, "
        "slowdown or a low hit rate (0: never); re-tests a regime or family written off.",
    )
    prior_answered: float = Field(
        default=0.8,
        ge=0,
        le=1,
        description="Share of the world model's questions assumed to end with a guess (not "
        "empty, cut off or failed), at a load never measured.",
    )
    regime_window: int = Field(
        default=20, ge=1, description="World-model answers remembered per regime."
    )
    min_slowdown_samples: int = Field(
        default=3,
        ge=1,
        description="Samples, busy and idle each, before a measured slowdown counts.",
    )
    prior_slowdown: float = Field(
        default=0.1,
        ge=0,
        description="Slowdown of each other reply on the policy's engine, and of each command "
        "running, assumed while the world model works, at a load where it has not been "
        "measured yet (busy against idle): not 0, so that many episodes at once do not all ask "
        "a world model whose cost nobody knows (8 at once on 2 cores measured 0.09-0.24 for "
        "replies and 0.45 for commands sharing its core).",
    )


BASELINE_EVERY = 5  # a baseline pause at most once in this many pauses' time


@dataclass
class HitCount:
    """Hits among the outcomes of predictions: all of them, or the last `window` (only those
    are kept, to be taken out of the counts as they leave it)."""

    window: int | None = None
    hits: int = 0
    attempts: int = 0
    recent: deque = field(default_factory=deque)

    def add(self, matched: bool) -> None:
        self.hits += matched
        self.attempts += 1
        if self.window is None:
            return
        self.recent.append(matched)
        if len(self.recent) > self.window:
            self.hits -= self.recent.popleft()
            self.attempts -= 1


@dataclass(frozen=True)
class Ask:
    """One question to the gate about one command."""

    task_hash: str
    command: str
    load: int  # requests on the policy engine besides this one (running + waiting)
    elapsed_s: float = 0.0  # seconds the command has already run (0 if it has not started)


class GateReason(enum.StrEnum):
    asked = "asked"
    explore = "explore"
    always = "always"
    never = "never"
    too_fast = "too_fast"
    unlikely = "unlikely"
    late = "late"
    slowdown = "slowdown"
    baseline = "baseline"


@dataclass(frozen=True)
class Decision:
    """Whether the world model (the costly predictor) may be asked, and why."""

    ask_world_model: bool
    reason: GateReason
    regime: str  # the load it was decided at (obsspec.speculation.regimes)


class Gate:
    """Decides per command; learns from every execution, reply, prediction and outcome.
    One gate serves all the episodes of a loop, so what one episode learns helps the rest.
    clock: the seconds of busy spans and of replies (a fake one in tests); busy_tail_s: how
    long the world model's engine keeps its core after an answer (its worker's idle spin)."""

    def __init__(
        self,
        settings: GateSettings | None = None,
        *,
        clock: Clock = time.monotonic,
        busy_tail_s: float = BUSY_TAIL_S,
    ):
        self.settings = settings or GateSettings()
        self._exec: dict[tuple[str, str], OnlineMean] = defaultdict(OnlineMean)
        self._exec_family: dict[str, OnlineMean] = defaultdict(OnlineMean)
        self.generation = OnlineMean()
        self.execution = OnlineMean()
        self.prediction = OnlineMean()
        window = self.settings.hit_window
        self._hits: dict[tuple[str, str], HitCount] = defaultdict(lambda: HitCount(window))
        self._family_hits: dict[str, HitCount] = defaultdict(lambda: HitCount(window))
        self._declined: dict[str, int] = defaultdict(int)  # by what was declined, to explore
        self.regimes = Regimes(self.settings.regime_window, clock, busy_tail_s)
        self.decisions: Counter[str] = Counter()
        self._baseline_until = float("-inf")  # the world model left alone until then
        self._next_baseline = float("-inf")  # no new pause before then

    @property
    def mode(self) -> GateMode:
        return self.settings.mode

    # --- decisions -----------------------------------------------------------------------
    def decide(self, ask: Ask) -> Decision:
        """May the world model be asked about this command (see the module docstring)?"""
        decision = self._decide(ask)
        self.decisions[decision.reason] += 1
        return decision

    def should_predict(self, ask: Ask) -> bool:
        return self.decide(ask).ask_world_model

    def _decide(self, ask: Ask) -> Decision:
        name, regime = self.regimes.now()
        if self.mode != GateMode.auto:  # still measured per regime: the report shows it
            reason = GateReason.always if self.mode == GateMode.always else GateReason.never
            return Decision(self.mode == GateMode.always, reason, name)
        s = self.settings
        family = command_family(ask.command)
        if self._saving(ask, 0.0) < s.min_saving_s:  # nothing to overlap, however fast
            return Decision(False, GateReason.too_fast, name)
        latencies = list(regime.latencies) or [self.prediction.get(0.0)]
        # The saving expected from this load's latencies: each one either beats the command
        # (saving what is left of it, up to a reply) or not (nothing).
        saving = sum(self._saving(ask, latency) for latency in latencies) / len(latencies)
        counts = self._family_hits.get(family, HitCount())
        hit = (counts.hits + 2 * s.prior_hit_rate) / (counts.attempts + 2)
        p = hit * regime.answered.rate(s.prior_answered)
        busy_s = regime.mean_latency(self.prediction.get(0.0)) + self.regimes.tail_s
        slowdown = busy_s * self._slowed(regime, ask)
        if saving < s.min_saving_s:  # the world model is slower than such a command
            return self._declined_or_explore(GateReason.late, f"regime:{name}", name)
        if not self._pays(p, saving, ask.load):
            return self._declined_or_explore(GateReason.unlikely, f"family:{family}", name)
        if not self._pays(p, saving, ask.load, extra=slowdown):
            return self._declined_or_explore(GateReason.slowdown, f"regime:{name}", name)
        if self._holding_back(regime):  # only a question it would ask is held back
            return Decision(False, GateReason.baseline, name)
        return Decision(True, GateReason.asked, name)

    def _slowed(self, regime: Regime, ask: Ask) -> float:
        """The work the world model's busy seconds slow, in streams times their slowdown: the
        L other requests on the policy's engine (s), the commands running (s_c), this
        question's own among them once it has begun."""
        n = self.settings.min_slowdown_samples
        commands = self.regimes.commands + (0 if ask.elapsed_s > 0 else 1)
        # Unmeasured at this load: the prior, until exploring (explore_every) measures it.
        prior = self.settings.prior_slowdown
        return (
            regime.policy.slowdown(n, prior) * ask.load
            + regime.commands.slowdown(n, prior) * commands
        )

    def _holding_back(self, regime: Regime) -> bool:
        """A world model asked about everything keeps its engine busy all the time, and the
        policy's and the commands' speed without it is then never seen: its slowdown could
        not be measured, and the gate would go on asking however much it costs. So once a
        regime has busy samples and no baseline, the world model is left alone long enough
        for replies and commands to run without it (two of the longer, its last answers and
        the second its engine spins after them), at most a fifth of the time (a pause, then
        four pauses' worth of asking)."""
        now = self.regimes.clock()
        if now < self._baseline_until:
            return True
        n = self.settings.min_slowdown_samples
        if now < self._next_baseline or not (
            regime.policy.needs_baseline(n) or regime.commands.needs_baseline(n)
        ):
            return False
        work = max(self.generation.get(1.0), self.execution.get(1.0))  # a reply or a command
        pause = 2 * work + self.prediction.get(1.0) + self.regimes.tail_s
        self._baseline_until = now + pause
        self._next_baseline = now + BASELINE_EVERY * pause
        return True

    def _declined_or_explore(self, reason: GateReason, key: str, regime: str) -> Decision:
        every = self.settings.explore_every
        self._declined[key] += 1
        pausing = self.regimes.clock() < self._baseline_until
        if every and self._declined[key] % every == 0 and not pausing:
            return Decision(True, GateReason.explore, regime)
        return Decision(False, reason, regime)

    def should_branch(self, ask: Ask, prediction: Prediction) -> bool:
        if self.mode != GateMode.auto:
            return self.mode == GateMode.always
        family = command_family(ask.command)
        counts = self._hits.get((family, prediction.source), HitCount())
        k = self.settings.confidence_weight
        weight = counts.attempts + k
        p = (counts.hits + k * prediction.confidence) / weight if weight else prediction.confidence
        return self._pays(p, self._saving(ask, ask.elapsed_s), ask.load)

    def expected_exec_s(self, task_hash: str, command: str) -> float:
        family = command_family(command)
        fallback = self._exec_family[family].get(self.settings.prior_exec_s)
        return self._exec[(task_hash, family)].get(fallback)

    def _saving(self, ask: Ask, spent_s: float) -> float:
        remaining = self.expected_exec_s(ask.task_hash, ask.command) - spent_s
        return max(0.0, min(self.generation.get(1.0), remaining))

    def _pays(self, p: float, saving: float, load: int, extra: float = 0.0) -> bool:
        s = self.settings
        if saving < s.min_saving_s:
            return False
        miss_cost = (1 - p) * saving * (s.waste_weight + s.contention * load)
        return p * saving > miss_cost + extra + s.overhead_s

    # --- learning ------------------------------------------------------------------------
    def observe_execution(
        self, task_hash: str, command: str, seconds: float, *, busy_fraction: float = 0.0
    ) -> None:
        """A command ran `seconds`, the world model busy for busy_fraction of them."""
        family = command_family(command)
        self._exec[(task_hash, family)].add(seconds)
        self._exec_family[family].add(seconds)
        self.execution.add(seconds)
        # Compared only with runs of the same line in the same task: one line's runs differ
        # from task to task (`./ci.sh lint` ran 2.8-4.9 s across 8 generated tasks).
        key = (task_hash, " ".join(command.split()))
        self.regimes.now()[1].commands.add(seconds, busy_fraction, key=key)

    def observe_generation(
        self,
        seconds: float,
        *,
        decode_s: float = 0.0,
        tokens: int = 0,
        busy_fraction: float = 0.0,
        load: int = 0,
    ) -> None:
        """A real reply took `seconds`; with its decode seconds and tokens, the seconds per
        token while the world model was busy or idle (its slowdown of the policy), compared
        at the load (requests on the policy engine) the reply began at."""
        self.generation.add(seconds)
        if tokens > 1 and decode_s > 0:
            self.regimes.now()[1].policy.add(decode_s / (tokens - 1), busy_fraction, load)

    def observe_prediction(self, seconds: float) -> None:
        self.prediction.add(seconds)

    def observe_answer(
        self,
        regime: str,
        *,
        on_time: bool,
        latency_s: float | None,
        answered: bool | None = None,
    ) -> None:
        """A world-model question asked at `regime` got a guess before the command ended
        (on_time), or did not; latency_s: its seconds (a lower bound when it was cancelled);
        answered: it ended with a guess (None: cancelled before it ended)."""
        regime_stats = self.regimes.by_name.setdefault(regime, Regime(self.settings.regime_window))
        regime_stats.outcome(on_time=on_time, latency_s=latency_s, answered=answered)

    def question_ended(
        self, decision: Decision | None, seconds: float, *, guessed: bool | None
    ) -> None:
        """A world-model question this gate let through ended after `seconds`: with a guess
        in time (guessed True), without one (False: empty, cut off, failed), or cancelled
        because its command ended first (None: late, its seconds a lower bound)."""
        if decision is None or not decision.ask_world_model:
            return
        self.observe_answer(
            decision.regime, on_time=bool(guessed), latency_s=seconds, answered=guessed
        )

    def observe_outcome(self, command: str, source: str, matched: bool) -> None:
        family = command_family(command)
        for counts in (self._hits[(family, source)], self._family_hits[family]):
            counts.add(matched)

    def summary(self) -> dict:
        """Its decisions by reason and what it measured per regime (for reports)."""
        s = self.settings
        return {
            "mode": str(self.mode),
            "decisions": dict(sorted(self.decisions.items())),
            "regimes": self.regimes.as_dict(s.min_slowdown_samples, s.prior_slowdown),
        }
