"""The typed config of `obsspec profile`: defaults < the `[profile]` table of --config < flags.

The speculative arm's world model is `[profile.speculation] world_model`; the flat
`[profile] world_model` of earlier versions still loads, with a warning naming the new key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator

from obsspec.rollout.config import RolloutSettings, SpeculationConfig, load_rollout_config

Level = Annotated[int, Field(ge=1, le=1024)]


class ProfileConfig(RolloutSettings):
    section: ClassVar[str] = "profile"
    required_flags: ClassVar[dict[str, str]] = {"tasks": "--tasks"}
    moved_to_speculation: ClassVar[tuple[str, ...]] = ("world_model",)

    tasks: str = Field(description="A task directory, a directory of tasks, or a glob.")
    episodes_per_task: int = Field(default=1, ge=1, description="Episodes of each task per arm.")
    seed: int = Field(default=0, description="Base seed; each episode's seed derives from it.")
    out: Path | None = Field(
        default=None, description="Write each arm's dataset and report.json here."
    )
    overwrite: bool = Field(default=False, description="Replace an existing --out.")
    concurrency: list[Level] = Field(  # type: ignore[assignment]
        default=[1],
        min_length=1,
        description="Levels of episodes at once sharing the policy engine in each arm, e.g. "
        "[1, 8] (a single number is one level): every level plays the same episodes; the "
        "report's top-level figures are the first level's.",
    )
    speculation: SpeculationConfig = Field(
        default_factory=lambda: SpeculationConfig(enabled=True),
        description="The speculative arm's runner, gate and predictors (`enabled` is ignored).",
    )
    oracle_delay_s: float = Field(
        default=0.0, ge=0, description="Seconds the oracle arm's perfect predictor takes."
    )

    @field_validator("concurrency", mode="before")
    @classmethod
    def _one_level_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("concurrency")
    @classmethod
    def _levels_once_each(cls, levels: list[int]) -> list[int]:
        repeated = sorted({n for n in levels if levels.count(n) > 1})
        if repeated:
            raise ValueError(f"levels given more than once: {repeated}")
        return levels

    def session_settings(self) -> RolloutSettings:
        """What the arms' session runs: the speculative loop is always there, and room (engine
        sequences, episode slots) for the largest level."""
        shared = self.model_dump(include=set(RolloutSettings.model_fields))
        shared["concurrency"] = max(self.concurrency)
        return RolloutSettings.model_validate(shared).with_speculation(enabled=True)


def load_profile_config(
    config_file: Path | None, flags: dict[str, Any], **defaults: Any
) -> ProfileConfig:
    """defaults: default_policy, images and sets (see load_rollout_config)."""
    return load_rollout_config(ProfileConfig, config_file, flags, **defaults)
