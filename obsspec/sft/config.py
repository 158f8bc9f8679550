"""Settings of `obsspec sft` (training) and `obsspec sft --eval-only` (evaluation)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from obsspec.config import StrictModel
from obsspec.errors import ConfigError
from obsspec.rollout.config import EngineOptions
from obsspec.tracking import WandbSettings
from obsspec.train.config import TrainSettings


class PolicyEvalSettings(StrictModel):
    """Episodes on held-out tasks, collected like `obsspec collect` collects them."""

    tasks: str | None = Field(
        default=None,
        description="Held-out tasks (a task directory, a directory of tasks, or a glob); "
        "none of them may be in the training data.",
    )
    episodes_per_task: int = Field(default=1, ge=1, description="Episodes of each task.")
    concurrency: int = Field(default=8, ge=1, description="Episodes at once.")
    max_turns: int = Field(default=10, ge=1, description="Turns before an episode stops.")
    max_tokens: int = Field(default=256, ge=1, description="Tokens per policy reply.")
    temperature: float = Field(default=0.0, ge=0, description="Sampling temperature.")
    seed: int = Field(default=0, description="Base seed of the episodes.")
    compare_base: bool = Field(
        default=True, description="Also evaluate the base model on the same episodes."
    )
    engine: EngineOptions = Field(default_factory=EngineOptions, description="The engine.")


class SFTConfig(StrictModel):
    data: list[Path] = Field(min_length=1, description="Collect run directories to learn from.")
    base: str = Field(description="Model name or HF directory to start from.")
    out: Path = Field(description="Directory for the warm-started policy.")
    min_reward: float | None = Field(
        default=None,
        description="Keep only episodes with at least this reward (rejection sampling); "
        "none: every episode the verifier scored or not, except infrastructure failures.",
    )
    resume: bool = Field(default=False, description="Continue from OUT's last checkpoint.")
    overwrite: bool = Field(default=False, description="Replace a model already in OUT.")
    train: TrainSettings = Field(default_factory=TrainSettings, description="The trainer.")
    eval: PolicyEvalSettings = Field(
        default_factory=PolicyEvalSettings, description="The evaluation."
    )
    evaluate: bool = Field(default=True, description="Evaluate on eval.tasks after training.")
    wandb: WandbSettings = Field(
        default_factory=WandbSettings,
        description="Weights & Biases logging (off unless a project is set).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> SFTConfig:
        if self.resume and self.overwrite:
            raise ValueError("resume and overwrite contradict each other")
        return self


class EvalPolicyConfig(StrictModel):
    model: str = Field(description="The policy to evaluate (name or HF directory).")
    base: str | None = Field(
        default=None, description="The model to compare with [default: the policy's base]."
    )
    eval: PolicyEvalSettings = Field(
        default_factory=PolicyEvalSettings, description="The evaluation."
    )


def check_eval_tasks(settings: PolicyEvalSettings, *, training: bool) -> None:
    if settings.tasks:
        return
    raise ConfigError(
        "the evaluation needs held-out tasks: pass --eval-tasks (or set sft.eval.tasks in "
        "--config), e.g. tasks of `obsspec env generate` with another --seed"
        + (", or --no-eval" if training else "")
    )
