"""A node of the speculation tree: one policy reply, the guesses made about its command, and
the replies built on them (obsspec.speculation.runner draws the tree)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

from obsspec.agent.context import TokenContext
from obsspec.agent.protocol import Action
from obsspec.inference.base import Generation, GenerationProgress
from obsspec.speculation.gate import Decision
from obsspec.speculation.predictor import Prediction, SpeculationContext
from obsspec.trajectory import SpeculationRecord
from obsspec.types import clean_text, says_timed_out

# The commands that will have run in the sandbox before a reply's own command, in order; None
# once one of them timed out (killed at an unknown point: the state is no function of them).
History = tuple[str, ...] | None
Match = Callable[[str, str], bool]


class Node:
    """One policy reply for turn `index`, generated on `context`."""

    def __init__(
        self,
        index: int,
        context: TokenContext,
        level: int,
        guess: str | None,
        commands: History = (),
    ) -> None:
        self.index = index
        self.context = context
        self.commands = commands  # run in the sandbox before this reply's command
        self.level = level
        self.born_level = level
        self.guess = guess  # the guessed observation its context ends with (None: verified)
        self.source = ""  # who guessed it
        self.certain = False  # rests on a corrective observation, not on a guess
        self.progress = GenerationProgress()
        self.priority = level  # the engine priority its request was submitted at
        self.started = time.monotonic()
        self.finished_at: float | None = None
        self.generation: asyncio.Task[Generation] | None = None
        self.action: Action | None = None
        self.record = SpeculationRecord(level=level)  # about this node's own command
        self.parent_record: SpeculationRecord | None = None  # the record whose guess it rests on
        self.predicting: asyncio.Task[None] | None = None
        self.predict_s = 0.0
        self.predict_started: float | None = None
        self.guesses: list[str] = []
        self.wm_guesses: list[str] = []  # the world model's own, whether or not they were chosen
        self.children: list[Node] = []
        self.exec_started: float | None = None
        self.closed = False
        self.span = (0.0, 0.0)  # the gate's (clock, busy mark) when its generation began
        self.load = 0  # requests on the policy engine when its generation began
        self.decision: Decision | None = None  # the gate's, about this reply's command

    def subtree(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            yield from child.subtree()

    def reply(self) -> Generation | None:
        task = self.generation
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return None
        return task.result()

    def speculation_context(self, task_hash: str) -> SpeculationContext:
        """What a predictor is asked with about this (finished) reply's command."""
        gen = self.reply()
        assert gen is not None
        return SpeculationContext(task_hash, (*self.context.ids, *gen.token_ids), self.commands)

    def check_lossless(self, real: TokenContext) -> None:
        """A kept reply must have been generated on the real context; record it if not (a
        broken matcher or predictor would show up here and in the tests)."""
        if self.parent_record is not None and self.context.ids != real.ids:
            self.parent_record.lossless_violation = True

    def tokens_so_far(self) -> int:
        reply = self.reply()
        return len(reply.token_ids) if reply is not None else self.progress.tokens


def history_after(commands: History, command: str | None, observation: str) -> History:
    """The history once `command` has run and printed `observation` (real or guessed); a
    reply that ran nothing (None: invalid) leaves it as it was."""
    if command is None:
        return commands
    if commands is None or says_timed_out(observation):
        return None
    return (*commands, command)


def copy_context(context: TokenContext) -> TokenContext:
    return TokenContext(list(context.ids), list(context.mask), list(context.logprobs))


def distinct_guesses(predictions: list[Prediction], breadth: int) -> list[tuple[str, Prediction]]:
    """Canonical texts, first occurrence wins, at most `breadth`."""
    seen: dict[str, Prediction] = {}
    for prediction in predictions:
        text = clean_text(prediction.text)
        if text not in seen:
            seen[text] = prediction
    return list(seen.items())[:breadth]


def exact_match(guess: str, real: str) -> bool:
    """Canonical text equality. Guesses are canonicalised before use, and equal texts tokenise
    to equal ids, so a match means the kept reply's context is the real one token for token."""
    return guess == real


def describe(error: Exception, timeout_s: float) -> str:
    if isinstance(error, TimeoutError):
        return f"no prediction within {timeout_s:g} s"
    return f"{type(error).__name__}: {error}"[:300]
