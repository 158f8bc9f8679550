"""RepeatPredictor: a command's output predicted as what the same command printed earlier in
the same episode.

    repeat = RepeatPredictor()
    repeat.observe(context, "./line", "Segmentation fault\\n[exit code: 139]")
    await repeat.predict(later_context, "./line")   # that output, if later_context continues it

Policies run the same command again, failing ones most of all: on 13 public tasks, most of
the demo policy's 111 command turns were repeats (`./line` nine times in a row), and the
world model matched none of them. The state cache cannot answer these: the commands run in
between change its key. Like every guess, a repeat is kept only on an exact match.

Same episode: an earlier run counts when its context ids are a strict prefix of the asking
context's ids, i.e. the asking context continues it. GRPO siblings share only the prompt
(their contexts end with the action, so theirs never contain each other's); a speculative
branch's context continues the real path it grew from; and only real observations are
observed, so guesses are never repeated as outputs. The latest such run wins.

Confidence is learned per command family (obsspec.speculation.gate.command_family): whenever
a real output arrives for a command it had a candidate for (asked or not), it scores whether
that candidate was exact. A family starts at PRIOR, above the cascade's usual threshold, so
the repeat answers before the world model until it is wrong in that family; then the cascade
falls through to the world model (and the repeat answers again if it proves right again).

Memory is bounded: tasks least recently used go first, and each task keeps its latest runs.
"""

from __future__ import annotations

import hashlib
import time
from array import array
from collections import OrderedDict, deque
from dataclasses import dataclass

from obsspec.speculation.gate import command_family
from obsspec.speculation.predictor import Prediction, SpeculationContext

SOURCE = "repeat"
TOKEN = array("I").itemsize  # bytes per token id (4 on every platform we run on)


@dataclass(frozen=True)
class Run:
    command: str
    length: int  # tokens in the context the command ran at
    digest: bytes  # of those tokens: a prefix check without keeping the ids
    observation: str


def token_bytes(ids: tuple[int, ...]) -> memoryview:
    """The ids as TOKEN bytes each, so that a prefix of ids is a prefix of bytes."""
    return memoryview(array("I", ids).tobytes())


def prefix_digest(data: memoryview, length: int) -> bytes:
    return hashlib.blake2b(data[: TOKEN * length], digest_size=16).digest()


class RepeatPredictor:
    # An unproven family's confidence: above the cascade's default threshold (0.5), so a
    # repeat answers before the world model is asked. PRIOR_WEIGHT is how many outcomes the
    # prior counts as: with 2, one miss gives (0 + 1.2) / 3 = 0.4, under the threshold.
    PRIOR = 0.6
    PRIOR_WEIGHT = 2.0

    def __init__(
        self, max_tasks: int = 32, max_runs_per_task: int = 256, max_families: int = 4096
    ) -> None:
        # Sizes: a task's runs are its episodes' command turns, so 256 hold a GRPO group of 8
        # episodes of 30 turns (the default limit); 32 tasks cover a step's groups or a
        # profile's waves. A run keeps a digest, not its context; its observation is at most
        # 10,000 characters (obsspec.types): at most ~80 MB in all, typically a few.
        self.max_tasks = max_tasks
        self.max_runs_per_task = max_runs_per_task
        self.max_families = max_families
        self._tasks: OrderedDict[str, deque[Run]] = OrderedDict()  # oldest run first
        self._outcomes: OrderedDict[str, tuple[int, int]] = OrderedDict()  # family -> hits, tries

    async def predict(
        self, context: SpeculationContext, command: str, n: int = 1
    ) -> list[Prediction]:
        start = time.monotonic()
        earlier = self._latest(context, token_bytes(context.ids), command)
        if earlier is None:
            return []
        confidence = self.confidence(command_family(command))
        return [Prediction(earlier.observation, SOURCE, confidence, time.monotonic() - start)]

    def observe(self, context: SpeculationContext, command: str, observation: str) -> None:
        ids = token_bytes(context.ids)
        earlier = self._latest(context, ids, command)
        if earlier is not None:  # what it would have guessed, asked or not
            self._learn(command_family(command), earlier.observation == observation)
        runs = self._runs(context.task_hash)
        length = len(context.ids)
        runs.append(Run(command, length, prefix_digest(ids, length), observation))
        while len(runs) > self.max_runs_per_task:
            runs.popleft()

    def confidence(self, family: str) -> float:
        hits, tries = self._outcomes.get(family, (0, 0))
        return (hits + self.PRIOR * self.PRIOR_WEIGHT) / (tries + self.PRIOR_WEIGHT)

    def _latest(self, context: SpeculationContext, ids: memoryview, command: str) -> Run | None:
        """The latest run of `command` whose context this one continues (ids: its bytes)."""
        runs = self._tasks.get(context.task_hash)
        if not runs:
            return None
        for run in reversed(runs):
            if (
                run.command == command
                and run.length < len(context.ids)
                and prefix_digest(ids, run.length) == run.digest
            ):
                return run
        return None

    def _runs(self, task_hash: str) -> deque[Run]:
        runs = self._tasks.get(task_hash)
        if runs is None:
            runs = self._tasks[task_hash] = deque()
        self._tasks.move_to_end(task_hash)
        while len(self._tasks) > self.max_tasks:
            self._tasks.popitem(last=False)
        return runs

    def _learn(self, family: str, hit: bool) -> None:
        hits, tries = self._outcomes.get(family, (0, 0))
        self._outcomes[family] = (hits + int(hit), tries + 1)
        self._outcomes.move_to_end(family)
        while len(self._outcomes) > self.max_families:
            self._outcomes.popitem(last=False)

    def __len__(self) -> int:
        return sum(len(runs) for runs in self._tasks.values())
