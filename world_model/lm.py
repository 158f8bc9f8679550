"""LMPredictor: the world model on an Engine, greedy, stopped at the end of an observation.

The confidence is the probability the model gives its own greedy answer (the product of the
token probabilities), so a long uncertain prediction is not trusted like a short sure one.
An answer cut off at `max_tokens` is no answer.
"""

from __future__ import annotations

import math
import time

from obsspec.inference.base import Engine, Sampling
from obsspec.speculation.predictor import Prediction, SpeculationContext
from world_model.prompt import WorldModelPrompt

SOURCE = "lm"


class LMPredictor:
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
        start = time.monotonic()
        generation = await self.engine.generate(
            self.prompt.prompt_ids(context.ids),
            Sampling(max_tokens=self.max_tokens, temperature=0.0),
            priority=self.priority,
        )
        text = self.prompt.observation_text(generation.token_ids)
        if text is None:
            return []
        confidence = math.exp(sum(generation.logprobs))
        latency = time.monotonic() - start
        return [Prediction(text, SOURCE, confidence, latency, len(generation.token_ids))]

    def observe(self, context: SpeculationContext, command: str, observation: str) -> None:
        pass  # the world model learns in training, not here
