"""LMPredictor: the world model on an Engine, greedy, stopped at the end of an observation.

The confidence is the probability the model gives its own answer (the product of the token
probabilities), so a long uncertain prediction is not trusted like a short sure one. An
answer cut off at `max_tokens` is no answer.
"""

from __future__ import annotations

import asyncio
import math
import time

from obsspec.inference.base import Engine, Sampling
from obsspec.speculation.predictor import WORLD_MODEL, Prediction, SpeculationContext
from obsspec.world_model.prompt import WorldModelPrompt

SOURCE = WORLD_MODEL


class LMPredictor:
    source = SOURCE  # what a cascade files this predictor's answers under, even when it has none
    costly = True  # its answers take an engine's work (the gate may decline to ask it)

    def __init__(
        self, engine: Engine, prompt: WorldModelPrompt, *, max_tokens: int = 256, priority: int = 0
    ) -> None:
        self.engine = engine
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.priority = priority

    async def predict(
        self, context: SpeculationContext, command: str, n: int = 1
    ) -> list[Prediction]:
        """The greedy answer first; for n > 1 also n - 1 samples at temperature 1 (distinct
        seeds, asked at once), as the reference does for breadth. Every answer's tokens are
        counted, even duplicates and answers cut off: they were all paid for."""
        start = time.monotonic()
        prompt = self.prompt.prompt_ids(context.ids)
        samplings = [Sampling(max_tokens=self.max_tokens, temperature=0.0)] + [
            Sampling(max_tokens=self.max_tokens, temperature=1.0, seed=rank) for rank in range(1, n)
        ]
        generations = await asyncio.gather(
            *(self.engine.generate(prompt, s, priority=self.priority) for s in samplings)
        )
        latency = time.monotonic() - start
        spent = sum(len(g.token_ids) for g in generations)
        predictions = []
        for generation in generations:
            text = self.prompt.observation_text(generation.token_ids)
            if text is not None:
                confidence = math.exp(sum(generation.logprobs))
                predictions.append(Prediction(text, SOURCE, confidence, latency, spent))
                spent = 0  # charged once, on the first answer
        return predictions

    def observe(self, context: SpeculationContext, command: str, observation: str) -> None:
        pass  # the world model learns in training, not here
