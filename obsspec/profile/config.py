"""The typed config of `obsspec profile`: defaults < the `[profile]` table of --config < flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from obsspec.agent.episode import EpisodeLimits
from obsspec.config import DEFAULT_MODEL, ImagesConfig, load_pipeline_config
from obsspec.rollout.config import (
    CollectConfig,
    EngineOptions,
    SpeculationConfig,
    TaskAccess,
    access_defaults,
    collect_limits,
)


class ProfileConfig(TaskAccess):
    tasks: str = Field(description="A task directory, a directory of tasks, or a glob.")
    policy: str = Field(default=DEFAULT_MODEL, description="Model name or HF directory.")
    world_model: str | None = Field(
        default=None,
        description="World model behind the cache and rules [default: cache and rules only].",
    )
    episodes_per_task: int = Field(default=1, ge=1, description="Episodes of each task per arm.")
    seed: int = Field(default=0, description="Base seed; each episode's seed derives from it.")
    out: Path | None = Field(
        default=None, description="Write each arm's dataset and report.json here."
    )
    overwrite: bool = Field(default=False, description="Replace an existing --out.")
    limits: EpisodeLimits = Field(default_factory=collect_limits)
    engine: EngineOptions = Field(default_factory=EngineOptions)
    speculation: SpeculationConfig = Field(
        default_factory=lambda: SpeculationConfig(enabled=True),
        description="The speculative arm's runner, gate and predictors (`enabled` is ignored).",
    )
    oracle_delay_s: float = Field(
        default=0.0, ge=0, description="Seconds the oracle arm's perfect predictor takes."
    )
    max_attempts: int = Field(
        default=3, ge=1, description="Tries per arm episode when the infrastructure fails."
    )
    sandbox_cpuset: str | None = Field(
        default=None, description="Pin every sandbox to these cores, away from the engines'."
    )

    def arm_config(self, out: Path) -> CollectConfig:
        """The collection settings every arm shares (policy, limits, engine, speculation)."""
        speculation = self.speculation.model_copy(
            update={"enabled": True, "world_model": self.world_model}
        )
        return CollectConfig(
            tasks=self.tasks,
            out=out,
            policy=self.policy,
            episodes_per_task=self.episodes_per_task,
            seed=self.seed,
            limits=self.limits,
            engine=self.engine,
            speculation=speculation,
            max_attempts=self.max_attempts,
            sandbox_cpuset=self.sandbox_cpuset,
            images=self.images,
            network=self.network,
        )


REQUIRED = {"tasks": "--tasks"}


def load_profile_config(
    config_file: Path | None,
    flags: dict[str, Any],
    *,
    default_policy: str = DEFAULT_MODEL,
    images: ImagesConfig | None = None,
) -> ProfileConfig:
    return load_pipeline_config(
        ProfileConfig,
        "profile",
        config_file,
        flags,
        required=REQUIRED,
        defaults={"policy": default_policy, **access_defaults(images)},
    )
