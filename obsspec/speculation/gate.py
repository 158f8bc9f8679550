"""Whether to speculate on a command: `always`, `never`, or when it is expected to pay (`auto`).

The `auto` rule, per command (the arithmetic of REFERENCE.md, "Latency arithmetic"):

    S = min(G, E - P)            seconds a hit saves: the next reply overlaps the command
    p                            the chance that a prediction is exactly right
    L = running + waiting        requests the policy engine serves besides this one
    speculate  iff  S >= min_saving_s  and
                    p*S > (1 - p)*S*(waste_weight + contention*L) + overhead_s

    E  expected seconds of the command: an online mean per (task, command family), falling
       back to the family's, then to `prior_exec_s`. Every real execution updates it, so a
       family of fast commands stops being speculated on after its first run.
    G  expected seconds of a policy reply (online mean of real replies).
    P  expected seconds of a prediction (online mean).
    A miss wastes about S seconds of engine time, which counts as `waste_weight` seconds of
    latency each (compute is not free even on an idle engine: with the default 0.1, an idle
    engine is used only when p > 0.09), and it slows the L other requests by the fraction
    `contention` each for that long; `overhead_s` is the fixed cost of an attempt (predictor
    call, abort, bookkeeping).

A predictor that changes (a world model co-trained during RL) makes old outcomes stale: with
`hit_window` the hit rates count only the last outcomes, and with `explore_every` every N-th
command the rule declined (one that could save time at all) is predicted anyway, so that a
family written off early is tried again and a better world model gets noticed.

It is asked twice. Before predicting (`should_predict`), p is the command family's hit rate
over all predictor sources, starting from `prior_hit_rate`. After the prediction arrives
(`should_branch`), p blends the (family, source) hit rate with the prediction's own
confidence, (hits + k*confidence) / (attempts + k) with k = `confidence_weight`: with no
history the confidence decides, with much history the record does; and S uses the seconds the
command has already run instead of P.
"""

from __future__ import annotations

import enum
import re
import shlex
from collections import defaultdict, deque
from dataclasses import dataclass, field

from pydantic import Field

from obsspec.config import StrictModel
from obsspec.speculation.predictor import Prediction


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
        default=0,
        ge=0,
        description="Predict every N-th command the rule declines that could save time "
        "(0: never); re-tests a family written off while the predictor improves.",
    )


_NUMBER = re.compile(r"[0-9.]+[smhd]?")
# Words that run another command: the family is that command's.
_WRAPPERS = {"sudo", "time", "env", "nice", "nohup", "timeout", "command", "exec", "xargs"}


def command_family(command: str) -> str:
    """The program a command line is mainly about: `cd src && make -j4` -> make,
    `LC_ALL=C sort f | uniq` -> sort, `sudo apt-get install x` -> apt-get."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:  # unbalanced quotes: the first word is still a fair guess
        words = command.split()
    segments: list[list[str]] = [[]]
    for word in words:
        if word in {"&&", "||", ";", "|"}:
            segments.append([])
        else:
            segments[-1].append(word)
    for segment in segments:
        family = _program(segment)
        if family and family != "cd":
            return family
    return _program(segments[0]) or "(empty)"


def _program(words: list[str]) -> str:
    """The first word that is not an assignment, a wrapper, an option or a wrapper's number
    (`timeout 5 cmd`, `nice -n 10 cmd`)."""
    for word in words:
        if "=" in word.split("/")[0] or word in _WRAPPERS or word.startswith("-"):
            continue
        if _NUMBER.fullmatch(word):
            continue
        return word.rsplit("/", 1)[-1]
    return ""


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


class Gate:
    """Decides per command; learns from every execution, reply, prediction and outcome.
    One gate serves all the episodes of a worker, so what one episode learns helps the rest."""

    def __init__(self, settings: GateSettings | None = None) -> None:
        self.settings = settings or GateSettings()
        self._exec: dict[tuple[str, str], OnlineMean] = defaultdict(OnlineMean)
        self._exec_family: dict[str, OnlineMean] = defaultdict(OnlineMean)
        self.generation = OnlineMean()
        self.prediction = OnlineMean()
        window = self.settings.hit_window
        self._hits: dict[tuple[str, str], HitCount] = defaultdict(lambda: HitCount(window))
        self._family_hits: dict[str, HitCount] = defaultdict(lambda: HitCount(window))
        self._declined: dict[str, int] = defaultdict(int)  # by family, for explore_every

    @property
    def mode(self) -> GateMode:
        return self.settings.mode

    # --- decisions -----------------------------------------------------------------------
    def should_predict(self, ask: Ask) -> bool:
        if self.mode != GateMode.auto:
            return self.mode == GateMode.always
        family = command_family(ask.command)
        saving = self._saving(ask, self.prediction.get(0.0))
        counts = self._family_hits.get(family, HitCount())
        prior = self.settings.prior_hit_rate
        p = (counts.hits + 2 * prior) / (counts.attempts + 2)
        if saving < self.settings.min_saving_s:
            return False
        return self._pays(p, saving, ask.load) or self._explore(family)

    def _explore(self, family: str) -> bool:
        every = self.settings.explore_every
        if not every:
            return False
        self._declined[family] += 1
        return self._declined[family] % every == 0

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

    def _pays(self, p: float, saving: float, load: int) -> bool:
        s = self.settings
        if saving < s.min_saving_s:
            return False
        miss_cost = (1 - p) * saving * (s.waste_weight + s.contention * load)
        return p * saving > miss_cost + s.overhead_s

    # --- learning ------------------------------------------------------------------------
    def observe_execution(self, task_hash: str, command: str, seconds: float) -> None:
        family = command_family(command)
        self._exec[(task_hash, family)].add(seconds)
        self._exec_family[family].add(seconds)

    def observe_generation(self, seconds: float) -> None:
        self.generation.add(seconds)

    def observe_prediction(self, seconds: float) -> None:
        self.prediction.add(seconds)

    def observe_outcome(self, command: str, source: str, matched: bool) -> None:
        family = command_family(command)
        for counts in (self._hits[(family, source)], self._family_hits[family]):
            counts.add(matched)
