"""One episode, wired end to end: engine, tokenizer, task image, sandbox, verifier.

Used by `obsspec episode` so that a person can watch a model work on one task.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from environments.gc import run_scope
from environments.pool import SandboxPool
from environments.sandbox import NetworkPolicy, with_network
from environments.tasks import load_task
from environments.tasks.images import TaskImages
from obsspec.agent.context import ChatContextBuilder
from obsspec.agent.episode import EpisodeLimits, run_episode
from obsspec.agent.protocol import observation_role
from obsspec.config import GlobalConfig
from obsspec.inference.openai_http import OpenAIEngine
from obsspec.inference.vllm_local import EngineSettings, LocalVLLMEngine
from obsspec.models.registry import resolve_model
from obsspec.models.tokenizer import load_tokenizer
from obsspec.trajectory import Trajectory


async def watch_episode(
    task_dir: Path,
    model: str,
    settings: GlobalConfig,
    limits: EpisodeLimits,
    *,
    seed: int = 0,
    server: str | None = None,
    served_name: str | None = None,
    network: NetworkPolicy = NetworkPolicy.none,
    on_log=lambda _: None,
) -> Trajectory:
    task = load_task(task_dir)  # bad input fails fast, before the heavy imports
    task = task.model_copy(update={"limits": with_network(task.limits, network)})
    model_dir = resolve_model(model, settings.paths.models_dir)

    builder = ChatContextBuilder(load_tokenizer(model_dir), observation_role(limits.action_format))
    with run_scope("episode") as (client, run_id):
        images = TaskImages(client, image_map=settings.images.map, on_log=on_log)
        image = await images.ensure(task)
        async with contextlib.AsyncExitStack() as stack:
            if server:
                engine = await stack.enter_async_context(OpenAIEngine(server, served_name or model))
            else:
                on_log(f"starting vLLM on {model_dir}")
                engine = await stack.enter_async_context(
                    LocalVLLMEngine(EngineSettings(model=model_dir))
                )
            pool = await stack.enter_async_context(
                SandboxPool(client, image, task.limits, size=0, run_id=run_id)
            )
            on_log("running the episode")
            return await run_episode(task, pool, engine, builder, limits, seed=seed, model=model)
