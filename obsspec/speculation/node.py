"""A node of the speculation tree: one policy reply, the guesses made about its command, and
the replies built on them (obsspec.speculation.runner draws the tree)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

from obsspec.agent.context import TokenContext
from obsspec.agent.protocol import Action
from obsspec.inference.base import Generation, GenerationProgress
from obsspec.speculation.predictor import Prediction
from obsspec.trajectory import SpeculationRecord
from obsspec.types import clean_text


class Node:
    """One policy reply for turn `index`, generated on `context`."""

    def __init__(self, index: int, context: TokenContext, level: int, guess: str | None) -> None:
        self.index = index
        self.context = context
        self.level = level
        self.born_level = level
        self.guess = guess  # the guessed observation its context ends with (None: verified)
        self.source = ""  # who guessed it
        self.certain = False  # rests on a corrective observation, not on a guess
        self.progress = GenerationProgress()
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

    def subtree(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            yield from child.subtree()

    def reply(self) -> Generation | None:
        task = self.generation
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return None
        return task.result()

    def tokens_so_far(self) -> int:
        reply = self.reply()
        return len(reply.token_ids) if reply is not None else self.progress.tokens


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
