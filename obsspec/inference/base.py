"""The Engine contract: token ids in, token ids out, cancellable, with load and timings.

    generation = await engine.generate(prompt_ids, Sampling(max_tokens=256), priority=1)

Cancelling the task that awaits `generate` aborts the request inside the engine (its slot is
freed at once). Lower `priority` values are scheduled first: real turns use 0, speculative
ones a larger number. `load_weights(checkpoint, version)` swaps weights in place, and every
Generation records the weight version that produced it: the caller numbers the versions (the
rollout session owns the count); the engine stamps its generations with the number it was
given. A caller that may cancel a request and wants to know what it cost passes a
GenerationProgress, which counts the tokens generated so far. `score(token_ids)` gives the
log-probability of each token after its prefix (None for the first) under the current
weights, ahead of every generation: after a weight sync, a trainer compares it with its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pydantic import Field

from obsspec.config import StrictModel
from obsspec.errors import ContextLengthError

# Scoring runs ahead of real turns (priority 0) and speculative ones (larger values): a
# post-sync check should not wait behind a rollout's queue.
SCORE_PRIORITY = -1


class Sampling(StrictModel):
    max_tokens: int = Field(default=256, ge=1, description="Most tokens to generate.")
    temperature: float = Field(default=0.0, ge=0, description="0 means greedy.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling mass.")
    seed: int | None = Field(default=None, description="Per-request seed for reproducibility.")
    ignore_eos: bool = Field(
        default=False,
        description="Keep going past the end-of-turn token (benchmarks: a fixed reply length).",
    )


@dataclass(frozen=True)
class Timings:
    queue_s: float  # waiting to be scheduled
    prefill_s: float  # scheduled until the first token
    decode_s: float  # first token until the last
    total_s: float  # as the caller saw it


@dataclass(frozen=True)
class Generation:
    token_ids: list[int]
    logprobs: list[float]  # of each generated token, under the weights that produced it
    text: str
    finish_reason: str  # "stop", "length" or "abort"
    timings: Timings
    weight_version: int = 0


@dataclass
class GenerationProgress:
    """Tokens a request has generated so far (engines that stream update it as they go)."""

    tokens: int = 0


@dataclass(frozen=True)
class EngineStats:
    running: int  # requests being decoded
    waiting: int  # requests queued for a slot
    weight_version: int
    # Prompt tokens looked up in the prefix cache since the engine started, and those found
    # there (not computed again). Counters: a period's hit rate is the difference of two
    # readings. 0 from an engine that does not count them (a server, a fake).
    prefix_queried_tokens: int = 0
    prefix_hit_tokens: int = 0


def context_room(prompt_ids: list[int], max_model_len: int) -> int:
    """Tokens left for a reply; ContextLengthError when the prompt leaves none."""
    room = max_model_len - len(prompt_ids)
    if room < 1:
        raise ContextLengthError(
            f"the context has {len(prompt_ids)} tokens; the engine's limit is {max_model_len}"
        )
    return room


class Engine(Protocol):
    async def generate(
        self,
        prompt_ids: list[int],
        sampling: Sampling,
        *,
        request_id: str | None = None,
        priority: int = 0,
        progress: GenerationProgress | None = None,
    ) -> Generation: ...

    async def load_weights(self, checkpoint: Path, version: int) -> None: ...

    async def reset_prefix_cache(self) -> None:
        """Forget the prefixes cached so far: the next prompts are computed anew."""
        ...

    async def score(self, token_ids: list[int]) -> list[float | None]: ...

    def stats(self) -> EngineStats: ...

    async def aclose(self) -> None: ...


async def retried(attempt: Callable[[], Awaitable[bool]], attempts: int, wait_s: float) -> bool:
    """Whether attempt() succeeded within `attempts` tries `wait_s` apart. vLLM refuses to reset
    its prefix cache while requests hold blocks (one aborted a moment ago may still), so both
    engines' resets try again for a while before they give up."""
    for _ in range(attempts):
        if await attempt():
            return True
        await asyncio.sleep(wait_s)
    return False
