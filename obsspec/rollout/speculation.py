"""The speculative loop a collection worker runs its episodes with, when speculation is on.

    async with open_speculation(config, models_dir, policy) as loop:   # None when off
        trajectory = await run_episode(..., loop=loop)

Predictors: the cache, the rules and (with `world_model`) the world model on its own vLLM
engine, asked in that order (world_model.cascade). One loop, and so one gate, serves all the
worker's episodes.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from obsspec.errors import ModelError
from obsspec.inference.base import Engine
from obsspec.models.registry import resolve_model
from obsspec.models.tokenizer import load_tokenizer
from obsspec.rollout.config import CollectConfig
from obsspec.rollout.policy import Policy
from obsspec.speculation.predictor import Predictor
from obsspec.speculation.runner import SpeculativeLoop


def check_world_model(config: CollectConfig, models_dir: Path) -> None:
    """The world model exists and shares the policy's tokenizer (guesses are compared as the
    policy's tokens), checked before anything starts."""
    from obsspec.rollout.policy import policy_model
    from world_model.prompt import check_same_tokenizer

    name = config.speculation.world_model
    if not config.speculation.enabled or name is None:
        return
    try:
        wm_dir = resolve_model(name, models_dir)
    except ModelError as e:
        raise type(e)(f"--world-model (speculation.world_model): {e}", hint=e.hint) from e
    check_same_tokenizer(
        load_tokenizer(policy_model(config, models_dir)),
        load_tokenizer(wm_dir),
        policy=config.policy,
        wm=name,
    )


@contextlib.asynccontextmanager
async def open_speculation(
    config: CollectConfig, models_dir: Path, policy: Policy, *, wm_engine: Engine | None = None
) -> AsyncIterator[SpeculativeLoop | None]:
    """Start the world model's engine (unless one is given: tests share theirs)."""
    from world_model.cascade import default_cascade

    spec = config.speculation
    if not spec.enabled:
        yield None
        return
    async with contextlib.AsyncExitStack() as stack:
        lm: Predictor | None = None
        if spec.world_model:
            lm = await stack.enter_async_context(
                world_model_predictor(config, models_dir, policy, wm_engine)
            )
        yield SpeculativeLoop(default_cascade(lm, spec.threshold), settings=spec)


@contextlib.asynccontextmanager
async def world_model_predictor(
    config: CollectConfig, models_dir: Path, policy: Policy, engine: Engine | None
) -> AsyncIterator[Predictor]:
    from obsspec.inference.vllm_local import EngineSettings, LocalVLLMEngine
    from world_model.lm import LMPredictor
    from world_model.prompt import WorldModelPrompt

    spec = config.speculation
    assert spec.world_model is not None
    wm_dir = resolve_model(spec.world_model, models_dir)
    async with contextlib.AsyncExitStack() as stack:
        if engine is None:
            settings = EngineSettings(
                model=wm_dir,
                max_model_len=config.engine.max_model_len,
                kv_cache_gb=spec.wm_kv_cache_gb,
                max_num_seqs=max(64, 2 * config.concurrency * spec.breadth),
                cpu_cores=spec.wm_cpu_cores,
            )
            engine = await stack.enter_async_context(LocalVLLMEngine(settings))
        prompt = WorldModelPrompt(policy.builder)
        yield LMPredictor(engine, prompt, max_tokens=spec.wm_max_tokens)
