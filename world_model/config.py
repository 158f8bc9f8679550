"""Settings of `obsspec train-wm` (training), `obsspec train-wm --eval-only` (evaluation) and
of the world model's co-training inside `obsspec rl`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from obsspec.config import StrictModel
from obsspec.tracking import WandbSettings
from obsspec.train.config import TrainSettings


class SplitSettings(StrictModel):
    data: list[Path] = Field(min_length=1, description="Collect run directories to learn from.")
    eval_data: list[Path] = Field(
        default_factory=list,
        description="Run directories held out for evaluation (else a split of `data`).",
    )
    held_out: float = Field(
        default=0.2, ge=0, lt=1, description="Fraction of tasks held out when no eval_data."
    )
    held_out_families: list[str] | None = Field(
        default=None, description="Hold out these whole task families instead of a fraction."
    )


class EvalSettings(StrictModel):
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Longest predicted observation, in tokens [default: the longest evaluated "
        "observation, so that none is cut off; turns longer than a value set are counted "
        "(over_max_tokens): they cannot match].",
    )
    concurrency: int = Field(default=4, ge=1, description="Predictions requested at once.")
    max_model_len: int = Field(default=4096, ge=64, description="The engine's context length.")
    kv_cache_gb: float = Field(default=1.0, gt=0, description="The engine's KV-cache size (GB).")
    cascade_threshold: float = Field(
        default=0.5, ge=0, le=1, description="Confidence at which a cheap predictor answers."
    )
    slow_command_s: float = Field(
        default=1.0, ge=0, description="Commands at least this slow count for the speed ratio."
    )


class DistillSettings(StrictModel):
    alpha: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="With --teacher, the KL term's share of the loss at each labelled token: "
        "(1 - alpha) x cross-entropy + alpha x T^2 x KL(teacher || student) over the "
        "vocabulary.",
    )
    temperature: float = Field(
        default=1.0,
        gt=0,
        description="T, which softens both distributions in the KL term; the term is scaled "
        "by T^2, which keeps its gradients at the cross-entropy's scale.",
    )


class TrainWMConfig(SplitSettings):
    base: str = Field(description="Model name or HF directory to start from.")
    layers: int | None = Field(
        default=None,
        ge=2,
        description="Start from this many of the base model's decoder layers (a world model "
        "a fraction of the policy's cost; obsspec.models.depth) [default: all].",
    )
    layer_choice: Literal["even", "bottom"] = Field(
        default="even",
        description="Which layers --layers keeps: `even` (the first, the last and evenly "
        "spaced ones between) or `bottom` (the first K-1 and the last).",
    )
    teacher: str | None = Field(
        default=None,
        description="A trained world model (name or HF directory) to distil from: the loss "
        "adds the KL divergence from its next-token distribution at each labelled token "
        "(`distill`); it must share the base's tokenizer [default: none].",
    )
    distill: DistillSettings = Field(
        default_factory=DistillSettings, description="The loss against --teacher."
    )
    out: Path = Field(description="Directory for the trained world model.")
    resume: bool = Field(default=False, description="Continue from OUT's last checkpoint.")
    overwrite: bool = Field(default=False, description="Replace a model already in OUT.")
    train: TrainSettings = Field(default_factory=TrainSettings, description="The trainer.")
    eval: EvalSettings = Field(default_factory=EvalSettings, description="The evaluation.")
    evaluate: bool = Field(
        default=True, description="Evaluate exact match on held-out turns after training."
    )
    wandb: WandbSettings = Field(
        default_factory=WandbSettings,
        description="Weights & Biases logging (off unless a project is set).",
    )

    @model_validator(mode="after")
    def _not_both(self) -> TrainWMConfig:
        if self.resume and self.overwrite:
            raise ValueError("resume and overwrite contradict each other")
        if "distill" in self.model_fields_set and self.teacher is None:
            raise ValueError("distill settings weigh the loss against a teacher: set teacher")
        return self


class EvalWMConfig(SplitSettings):
    model: str = Field(description="The world model to evaluate (name or HF directory).")
    eval: EvalSettings = Field(default_factory=EvalSettings, description="The evaluation.")


class CotrainSettings(StrictModel):
    enabled: bool = Field(
        default=True, description="Fine-tune the world model on every step's observations."
    )
    lr: float = Field(default=1e-5, gt=0, lt=1, description="World-model learning rate.")
    updates: int = Field(default=1, ge=1, description="World-model optimizer steps per RL step.")
    replay_size: int = Field(
        default=512, ge=0, description="World-model examples kept from earlier steps."
    )
    replay_sample: int = Field(
        default=64, ge=0, description="Replayed examples added to each step's fresh ones."
    )
    warmup_steps: int = Field(
        default=0,
        ge=0,
        description="First steps run without speculation (the world model still learns).",
    )
    batch_tokens: int = Field(
        default=2048,
        ge=16,
        description="Tokens per forward pass, padding included: bounds the trainer's "
        "activation memory (the 135M model needs about 1 MB per token).",
    )
    max_len: int | None = Field(
        default=None,
        ge=8,
        description="Longest example in tokens (the policy's context up to an action, then "
        "its observation); longer ones are skipped and counted (wm_dropped_too_long) "
        "[default: engine.max_model_len, which holds every example the policy could go on "
        "from; a smaller value is refused].",
    )
    max_grad_norm: float = Field(default=1.0, gt=0, description="Gradient clipping norm.")
    activation_checkpointing: bool = Field(
        default=False,
        description="Recompute each decoder layer's activations in the backward pass; less "
        "memory, about a third more compute.",
    )
    overlap: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="on: each step's world-model update runs during the next step's rollout "
        "(the world-model engine one update behind; lossless: only exact predictions are "
        "kept); off: it runs beside the policy update and both are synced before the next "
        "rollout; auto: on, unless the co-trainer may share a GPU with an engine "
        "(obsspec.rl.cotrain_overlap).",
    )
