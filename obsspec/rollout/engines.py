"""The engines a rollout session runs: their settings come from one place.

    settings = engine_settings(model_dir, rollout, role="policy")      # or role="world_model"
    async with open_engine(rollout, model_dir) as engine: ...          # server or vLLM here
    await require_priority_scheduling(engine, rollout)                 # speculating on a server

The policy engine and the world model's engine share the context length, graph mode and
vLLM version check; each has its own KV-cache size, cores, GPU share and tensor parallelism.
Both keep more sequence slots than the episodes in flight can ask for (each speculative turn
may ask `breadth` replies at once), so that real turns never wait.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from obsspec.errors import ConfigError
from obsspec.inference.engine_nice import world_model_nice
from obsspec.inference.vllm_local import EngineSettings
from obsspec.inference.vllm_settings import Platform, current_platform_kind
from obsspec.rollout.config import RolloutSettings

Role = Literal["policy", "world_model"]


WM_CPU_KV_CACHE_GB = 0.5  # the world model's answers are short; the policy's 1 GiB is more


def engine_settings(
    model_dir: Path,
    rollout: RolloutSettings,
    *,
    role: Role,
    seed: int = 0,
    platform: Platform | None = None,
) -> EngineSettings:
    """vLLM settings of the policy's or the world model's engine for these rollouts
    (platform: the installed vLLM's, unless given)."""
    platform = platform or current_platform_kind()
    check_gpu_shares(rollout, platform)
    options, spec = rollout.engine, rollout.speculation
    breadth = spec.breadth if spec.enabled else 1
    if role == "policy":
        own = {
            "kv_cache_gb": options.kv_cache_gb,
            "cpu_cores": options.cpu_cores,
            "gpu_memory_utilization": options.gpu_memory_utilization,
            "tensor_parallel_size": options.tensor_parallel_size,
        }
    else:
        wm_cpu_default = WM_CPU_KV_CACHE_GB if platform == "cpu" else None
        own = {
            "kv_cache_gb": spec.wm_kv_cache_gb or wm_cpu_default,
            "cpu_cores": spec.wm_cpu_cores,
            "gpu_memory_utilization": spec.wm_gpu_memory_utilization,
            "tensor_parallel_size": spec.wm_tensor_parallel_size,
            "ngram_draft_tokens": spec.wm_draft_tokens,
            "nice": world_model_nice(spec.wm_nice, platform),
        }
    return EngineSettings(
        model=model_dir,
        max_model_len=options.max_model_len,
        max_num_seqs=max(64, 2 * rollout.concurrency * breadth),
        seed=seed,
        enforce_eager=options.enforce_eager,
        cpu_libraries=options.cpu_libraries,
        worker_spin_s=options.worker_spin_s,
        engine_core_spin_s=options.engine_core_spin_s,
        dtype=options.dtype,
        allow_untested_vllm=options.allow_untested_vllm,
        **own,
    )


def check_gpu_shares(rollout: RolloutSettings, platform: Platform) -> None:
    """On a GPU, two engines side by side must each say their share: vLLM checks at start
    that its share (0.92 unless set) of the GPU is free, so the second engine would fail
    with an error about free memory that names neither setting."""
    spec = rollout.speculation
    if platform == "cpu" or rollout.engine.server or not (spec.enabled and spec.world_model):
        return
    unset = [
        key
        for key, value in (
            ("engine.gpu_memory_utilization", rollout.engine.gpu_memory_utilization),
            ("speculation.wm_gpu_memory_utilization", spec.wm_gpu_memory_utilization),
        )
        if value is None
    ]
    if unset:
        raise ConfigError(
            f"the policy and world-model engines share a GPU, but {' and '.join(unset)} "
            f"{'is' if len(unset) == 1 else 'are'} not set: vLLM would give the first engine "
            "92% of the GPU and the second could not start",
            hint="set both, summing below 1 (e.g. 0.7 and 0.2); `python bench/gpu_check.py "
            "--dry-run --config FILE` shows what each GPU holds",
        )


def open_engine(rollout: RolloutSettings, model_dir: Path, *, seed: int = 0):
    """The policy's engine, as a context manager: the OpenAI-compatible server when one is
    configured (engine.server), else vLLM in this process."""
    from obsspec.inference.openai_http import OpenAIEngine
    from obsspec.inference.vllm_local import LocalVLLMEngine

    options = rollout.engine
    if options.server:
        return OpenAIEngine(options.server, options.served_name or rollout.policy)
    return LocalVLLMEngine(engine_settings(model_dir, rollout, role="policy", seed=seed))


def open_world_model_engine(rollout: RolloutSettings, model_dir: Path, *, seed: int = 0):
    """The world model's engine (vLLM in this process), as a context manager."""
    from obsspec.inference.vllm_local import LocalVLLMEngine

    return LocalVLLMEngine(engine_settings(model_dir, rollout, role="world_model", seed=seed))


async def require_priority_scheduling(engine, rollout: RolloutSettings) -> None:
    """Speculating through a server: the server must honour request priorities, or every
    speculative guess competes with real turns as an equal (vLLM under its default policy
    ignores priorities without an error), and speculation slows the rollouts it is meant
    to speed up. Refused with the fix unless the server shows a priority scheduler."""
    server = rollout.engine.server
    if not server or not rollout.speculation.enabled or not rollout.engine.server_priority_check:
        return
    policy = await engine.scheduling_policy()
    if policy == "priority":
        return
    trust = (
        "or, if it does schedule by priority, set [engine] server_priority_check = false "
        "(--set engine.server_priority_check=false); or run without speculation"
    )
    if policy is None:
        raise ConfigError(
            f"engine.server {server}: cannot tell whether it honours request priorities, "
            "which speculation needs (its guesses must wait behind real turns)",
            hint="start vLLM with VLLM_SERVER_DEV_MODE=1 (its /server_info shows its "
            f"scheduler; reloading weights needs it too) and --scheduling-policy priority; {trust}",
        )
    raise ConfigError(
        f"engine.server {server} schedules requests {policy!r}: it would ignore the "
        "priorities that keep speculative guesses behind real turns",
        hint=f"restart it with `vllm serve ... --scheduling-policy priority`; {trust}",
    )
