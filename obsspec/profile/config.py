"""The typed config of `obsspec profile`: defaults < the `[profile]` table of --config < flags.

The speculative arm's world model is `[profile.speculation] world_model`; the flat
`[profile] world_model` of earlier versions still loads, with a warning naming the new key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from obsspec.rollout.config import RolloutSettings, SpeculationConfig, load_rollout_config


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
    concurrency: int = Field(
        default=1,
        ge=1,
        le=1,
        description="Episodes at once: profile plays one episode at a time in each arm, so any "
        "other value is refused rather than ignored.",
    )
    speculation: SpeculationConfig = Field(
        default_factory=lambda: SpeculationConfig(enabled=True),
        description="The speculative arm's runner, gate and predictors (`enabled` is ignored).",
    )
    oracle_delay_s: float = Field(
        default=0.0, ge=0, description="Seconds the oracle arm's perfect predictor takes."
    )

    def session_settings(self) -> ProfileConfig:
        """What the arms' session runs: the speculative loop is always there."""
        return self.with_speculation(enabled=True)


def load_profile_config(
    config_file: Path | None, flags: dict[str, Any], **defaults: Any
) -> ProfileConfig:
    """defaults: default_policy and images (see load_rollout_config)."""
    return load_rollout_config(ProfileConfig, config_file, flags, **defaults)
