"""CachePredictor: the real observation of an exact (task, context, command) seen before.

GRPO samples several episodes of one task from the same prompt, so siblings often reach the
same context and run the same command; evaluation repeats whole episodes. A fresh sandbox of
the same task starts in the same state, so the same command at the same context usually
prints the same thing. Memory is bounded (least recently used entries go first).
"""

from __future__ import annotations

import time
from collections import OrderedDict

from obsspec.speculation.predictor import Prediction, SpeculationContext

SOURCE = "cache"


class CachePredictor:
    def __init__(self, max_entries: int = 100_000, confidence: float = 0.95) -> None:
        self.max_entries = max_entries
        self.confidence = confidence  # commands with clocks or randomness break the rule
        self._entries: OrderedDict[tuple[str, str], str] = OrderedDict()

    async def predict(
        self, context: SpeculationContext, command: str, n: int = 1
    ) -> list[Prediction]:
        start = time.monotonic()
        text = self._entries.get((context.key, command))
        if text is None:
            return []
        self._entries.move_to_end((context.key, command))
        return [Prediction(text, SOURCE, self.confidence, time.monotonic() - start)]

    def observe(self, context: SpeculationContext, command: str, observation: str) -> None:
        self._entries[(context.key, command)] = observation
        self._entries.move_to_end((context.key, command))
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
