"""The trainer's settings: one typed model, shared by `train-wm` and `sft`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from obsspec.config import StrictModel
from obsspec.train.sequences import Weighting


class LoraSettings(StrictModel):
    rank: int = Field(ge=1, le=1024, description="LoRA rank (the adapter's inner width).")
    alpha: float = Field(default=32.0, gt=0, description="LoRA scaling numerator (alpha/rank).")
    dropout: float = Field(default=0.0, ge=0, lt=1, description="Dropout on the LoRA input.")
    targets: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="Names of the linear modules that get adapters.",
    )


class TrainSettings(StrictModel):
    epochs: int = Field(default=2, ge=1, le=1000, description="Passes over the training data.")
    max_steps: int | None = Field(
        default=None, ge=1, description="Stop after this many optimizer steps (before epochs end)."
    )
    lr: float = Field(default=1e-4, gt=0, lt=1, description="Peak learning rate (AdamW).")
    warmup_steps: int = Field(default=5, ge=0, description="Linear warm-up steps.")
    min_lr_ratio: float = Field(
        default=0.1, ge=0, le=1, description="The cosine decay ends at lr x this."
    )
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay.")
    max_grad_norm: float = Field(default=1.0, gt=0, description="Gradient clipping norm.")
    batch_tokens: int = Field(
        default=8192, ge=16, description="Tokens per forward pass, padding included."
    )
    grad_accum: int = Field(default=1, ge=1, description="Batches per optimizer step.")
    max_len: int = Field(
        default=4096, ge=8, description="Longest sequence; longer samples are skipped."
    )
    checkpoint_every: int = Field(
        default=50, ge=1, description="Save a resumable checkpoint every N optimizer steps."
    )
    keep_checkpoints: int = Field(default=2, ge=1, description="Checkpoints kept on disk.")
    seed: int = Field(default=0, description="Seeds the batch order and initialisation.")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        default="auto",
        description="Compute precision (weights stay float32): auto = bfloat16 on GPUs and "
        "on CPUs with native bfloat16, else float32.",
    )
    loss_weighting: Weighting = Field(
        default="token",
        description="How the loss weighs learned tokens: token = each alike (long targets "
        "dominate); observation = each target alike (its tokens weigh 1/its length), as exact "
        "match counts targets. The held-out loss stays a mean over tokens.",
    )
    eval_loss_tokens: int = Field(
        default=32768, ge=0, description="Held-out tokens scored for the loss before and after."
    )
    eval_loss_every_epoch: bool = Field(
        default=False,
        description="Also score the held-out loss at the end of each epoch "
        "(eval_loss_by_epoch): whether more epochs still help.",
    )
    device: str = Field(default="auto", description="auto, cpu, cuda or cuda:N.")
    lora: LoraSettings | None = Field(
        default=None, description="Train LoRA adapters instead of every weight (merged on save)."
    )

    @model_validator(mode="after")
    def _batch_holds_a_sequence(self) -> TrainSettings:
        if self.max_len > self.batch_tokens:
            raise ValueError(
                f"max_len ({self.max_len}) exceeds batch_tokens ({self.batch_tokens}): "
                "the longest sequence must fit one batch"
            )
        return self
