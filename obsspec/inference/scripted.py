"""Deterministic engines for tests and benchmarks: replies are a function of the context.

    engine = ScriptedEngine(tokenizer, lambda context_text: "```bash\nls\n```")
    paced = PacedEngine(real_engine, engine, min_tokens=64)

Each reply is tokenised and ended with the end-of-turn token (as a real model stops), with a
fixed logprob per token. Optional delays make it behave like a slow model (`progress` counts
the first token as soon as it is "generated"); with `slots`, at most that many requests are
generated at once and the rest wait, lowest priority value first, as in vLLM's priority
scheduler. Every request is kept in `requests` (prompt ids, sampling, priority), so tests can
check what was asked.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from obsspec.inference.base import (
    EngineStats,
    Generation,
    GenerationProgress,
    Sampling,
    Timings,
    context_room,
)


@dataclass(frozen=True)
class ScriptedRequest:
    prompt_ids: list[int]
    sampling: Sampling
    priority: int


class ScriptedEngine:
    """An Engine whose reply is reply(context text), tokenised and ended as a model's turn."""

    def __init__(
        self,
        tokenizer,
        reply: Callable[[str], str],
        *,
        max_model_len: int = 8192,
        seconds_per_token: float = 0.0,
        logprob: float = -0.25,
        honor_max_tokens: bool = True,
        slots: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        # False for a reply that is not a model's guess but given text (the oracle's solution
        # commands): cutting it at the sampling's max_tokens would make it another command.
        self.honor_max_tokens = honor_max_tokens
        self.reply = reply
        self.max_model_len = max_model_len
        self.seconds_per_token = seconds_per_token
        self.logprob = logprob
        self.weight_version = 0
        self.prompts: list[list[int]] = []  # every context it was asked to continue
        self.requests: list[ScriptedRequest] = []
        self._running = 0
        self.slots = slots  # None: every request is generated at once
        self._queue: list[tuple[int, int, asyncio.Future]] = []  # (priority, order, wake-up)
        self._order = itertools.count()

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: Sampling,
        *,
        request_id: str | None = None,
        priority: int = 0,
        progress: GenerationProgress | None = None,
    ) -> Generation:
        context_room(prompt_ids, self.max_model_len)
        start = time.monotonic()
        self.prompts.append(list(prompt_ids))
        self.requests.append(ScriptedRequest(list(prompt_ids), sampling, priority))
        progress = progress if progress is not None else GenerationProgress()
        text = self.reply(self.tokenizer.decode(prompt_ids))
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        limit = sampling.max_tokens if self.honor_max_tokens else len(ids) + 1
        ids = ids[:limit]
        finish = "length"
        if len(ids) < limit:
            ids, finish = [*ids, self.tokenizer.eos_token_id], "stop"
        await self._take_slot(priority)
        begun = time.monotonic()
        try:
            await asyncio.sleep(self.seconds_per_token)
            progress.tokens = 1  # the first token is out: the request is no longer queued
            await asyncio.sleep(self.seconds_per_token * (len(ids) - 1))
        finally:
            self._free_slot()
            # Tokens "generated" by now, as a streaming engine would have counted them.
            elapsed = time.monotonic() - begun
            rate = self.seconds_per_token
            progress.tokens = len(ids) if rate == 0 else min(len(ids), max(1, int(elapsed / rate)))
        total = time.monotonic() - start
        return Generation(
            ids,
            [self.logprob] * len(ids),
            self.tokenizer.decode(ids, skip_special_tokens=True),
            finish,
            Timings(0.0, 0.0, total, total),
            self.weight_version,
        )

    async def _take_slot(self, priority: int) -> None:
        if self.slots is None or (self._running < self.slots and not self._queue):
            self._running += 1
            return
        wake = asyncio.get_running_loop().create_future()
        entry = (priority, next(self._order), wake)
        heapq.heappush(self._queue, entry)
        try:
            await wake  # the freed slot is handed over: _running already counts this request
        except asyncio.CancelledError:
            if wake.done() and not wake.cancelled():
                self._free_slot()  # handed a slot in the same moment: pass it on
            elif entry in self._queue:  # a free slot may have skipped it already
                self._queue.remove(entry)
                heapq.heapify(self._queue)
            raise

    def _free_slot(self) -> None:
        while self._queue:
            _, _, wake = heapq.heappop(self._queue)
            if not wake.done():
                wake.set_result(None)
                return
        self._running -= 1

    async def load_weights(self, checkpoint: Path, version: int) -> None:
        self.weight_version = version

    async def reset_prefix_cache(self) -> None:
        """A script caches nothing."""

    async def score(self, token_ids: list[int]) -> list[float | None]:
        """As its generations claim: every token after the first has the fixed logprob."""
        context_room(token_ids, self.max_model_len)
        return [None] + [self.logprob] * (len(token_ids) - 1) if token_ids else []

    def stats(self) -> EngineStats:
        return EngineStats(self._running, len(self._queue), self.weight_version)

    def unfinished_requests(self) -> int:
        return self._running + len(self._queue)

    async def aclose(self) -> None:
        pass


class PacedEngine:
    """A ScriptedEngine's replies at a real engine's pace: each request also runs on the real
    engine (same prompt, seed and priority, `min_tokens` or the reply's length, whichever is
    more, past any end-of-turn token), and the reply arrives when that generation ends. So a
    workload of known commands gets real generation times, real scheduling and real aborts
    (cancelling aborts the real request), while staying deterministic."""

    def __init__(self, engine, script: ScriptedEngine, *, min_tokens: int = 0) -> None:
        self.engine = engine
        self.script = script
        self.min_tokens = min_tokens

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: Sampling,
        *,
        request_id: str | None = None,
        priority: int = 0,
        progress: GenerationProgress | None = None,
    ) -> Generation:
        scripted = await self.script.generate(prompt_ids, sampling, priority=priority)
        paced = sampling.model_copy(
            update={
                "max_tokens": max(self.min_tokens, len(scripted.token_ids)),
                "ignore_eos": True,
            }
        )
        real = await self.engine.generate(
            prompt_ids, paced, request_id=request_id, priority=priority, progress=progress
        )
        return Generation(
            scripted.token_ids,
            scripted.logprobs,
            scripted.text,
            scripted.finish_reason,
            real.timings,
            real.weight_version,
        )

    @property
    def requests(self) -> list[ScriptedRequest]:
        return self.script.requests

    async def load_weights(self, checkpoint: Path, version: int) -> None:
        await self.engine.load_weights(checkpoint, version)

    async def reset_prefix_cache(self) -> None:
        await self.engine.reset_prefix_cache()

    async def score(self, token_ids: list[int]) -> list[float | None]:
        """The script's, whose replies (and their logprobs) these are."""
        return await self.script.score(token_ids)

    def stats(self) -> EngineStats:
        return self.engine.stats()

    def unfinished_requests(self) -> int:
        return self.engine.unfinished_requests()

    async def aclose(self) -> None:
        pass
