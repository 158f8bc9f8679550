"""One episode, wired end to end over a RolloutSession: engine, tokenizer, task image,
sandbox, verifier.

Used by `obsspec episode` so that a person can watch a model work on one task.
"""

from __future__ import annotations

from pathlib import Path

from obsspec.agent.episode import EpisodeLimits
from obsspec.config import GlobalConfig
from obsspec.environments.sandbox import NetworkPolicy
from obsspec.environments.tasks import load_task
from obsspec.models.registry import resolve_model
from obsspec.models.tokenizer import load_tokenizer
from obsspec.models.weights import check_weights
from obsspec.rollout.config import EngineOptions, RolloutSettings
from obsspec.rollout.events import Note
from obsspec.rollout.session import RolloutSession
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
    """One attempt (no retry: a failure is shown as it happened)."""
    task = load_task(task_dir)  # bad input fails fast, before the heavy imports
    model_dir = resolve_model(model, settings.paths.models_dir)
    load_tokenizer(model_dir)  # a broken model is refused before Docker is touched
    if not server:  # served here: its weights must open
        check_weights(model_dir)
    rollout = RolloutSettings(
        policy=model,
        limits=limits,
        engine=EngineOptions(server=server, served_name=served_name),
        images=settings.images,
        network=network,
        max_attempts=1,
    )

    def log(event) -> None:
        if isinstance(event, Note):
            on_log(event.message)

    if not server:
        on_log(f"starting vLLM on {model_dir}")
    async with RolloutSession(
        rollout,
        settings.paths.models_dir,
        [task],
        name="episode",
        planned={task.id: 1},
        emit=log,
        strict=True,  # the image's build error is the answer
        on_build_log=on_log,
    ) as session:
        on_log("running the episode")
        return await session.episode(task, seed)
