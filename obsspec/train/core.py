"""The trainer core every trainer steps through: `sft` and `train-wm` (loop.py), the GRPO
policy trainer (obsspec.rl.policy_trainer) and world-model co-training (world_model.cotrain).

    core = TrainerCore(model, lr=1e-4, weight_decay=0.0, max_grad_norm=1.0,
                       schedule=warmup_cosine(5, 0.1, total_steps))
    norm = core.step(micro_batches, loss)   # zero grads; loss(b).backward() for each b;
                                            # clip (returns the norm); optimizer and
                                            # schedule step
    core.save(folder, {"replay": ...})      # folder/model/ + folder/trainer.pt
    extra = core.load(folder)               # weights, optimizer, schedule, step, RNG back

The optimizer is AdamW over the model's trainable parameters; the learning rate follows
`schedule` (a factor of `lr` per step, none: constant). A step's micro-batches are whatever
the trainer splits it into (forward passes of bounded size, this rank's share of them); the
trainer's `loss` returns the tensor to backward, already scaled so that the gradients sum to
the step's token mean. A non-finite gradient norm stops training before it reaches the
weights.

A checkpoint folder holds `model/` (an HF directory, or a LoRA adapter) and `trainer.pt`:
optimizer and schedule state, the optimizer steps done, torch and Python RNG states, and
whatever the trainer adds. Every rank calls save and load; rank 0 writes. A model sharded
with FSDP2 (`root`, the module sharded at the top, naming the model `prefix`) is gathered to
rank 0 to be written, and its optimizer state is keyed by parameter name, so a checkpoint of
N ranks resumes on M; otherwise the optimizer state is torch's own (by position).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from obsspec.errors import ConfigError, TrainingError
from obsspec.train import distributed, sharding
from obsspec.train.checkpoint import read_full_weights, save_hf_weights
from obsspec.train.memory import is_out_of_memory
from obsspec.train.model import is_peft

Batch = TypeVar("Batch")


def warmup_cosine(warmup_steps: int, min_lr_ratio: float, total_steps: int):
    """The lr factor of each step: linear warm-up, then cosine decay to min_lr_ratio at the
    last step."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        span = max(1, total_steps - warmup_steps)
        cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup_steps) / span)))
        return min_lr_ratio + (1 - min_lr_ratio) * cosine

    return factor


class TrainerCore:
    def __init__(
        self,
        model,
        *,
        lr: float,
        weight_decay: float,
        max_grad_norm: float,
        schedule: Callable[[int], float] | None = None,
        root=None,
        prefix: str = "",
        gradient_name: str = "the gradient",
        lr_option: str = "--lr",
    ) -> None:
        import torch

        self.model = model  # the HF (or peft) model whose weights are saved
        self.root, self.prefix = root, prefix  # FSDP2: the sharded module, naming the model
        self.max_grad_norm = max_grad_norm
        self.gradient_name, self.lr_option = gradient_name, lr_option  # for a divergence
        self.ranks = distributed.current()
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, weight_decay=weight_decay)
        self.schedule = None
        if schedule is not None:
            self.schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule)
        self.steps = 0  # optimizer steps taken (over all runs this one resumes)

    @property
    def lr(self) -> float:
        """The learning rate the next step uses."""
        return self.optimizer.param_groups[0]["lr"]

    def step(
        self,
        micro_batches: Iterable[Batch],
        loss: Callable[[Batch], Any],
        *,
        out_of_memory: Callable[[Batch], Exception] | None = None,
    ) -> float:
        """One optimizer step: the gradients of loss(b) summed over the micro-batches, clipped
        to max_grad_norm; returns the norm before clipping. A micro-batch that runs out of
        memory raises out_of_memory(b) (the trainer's advice), when given."""
        import torch

        self.optimizer.zero_grad(set_to_none=True)
        for batch in micro_batches:
            try:
                loss(batch).backward()
            except (RuntimeError, MemoryError) as e:
                if out_of_memory is not None and is_out_of_memory(e):
                    raise out_of_memory(batch) from e
                raise
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
        norm = sharding.as_float(norm)  # a DTensor when sharded
        if not math.isfinite(norm):
            raise TrainingError(
                f"{self.gradient_name} became {norm}", hint=f"try a lower {self.lr_option}"
            )
        self.optimizer.step()
        if self.schedule is not None:
            self.schedule.step()
        self.steps += 1
        return norm

    def state(self) -> dict[str, Any]:
        """Everything besides the weights that a resumed run needs to continue exactly."""
        import torch

        if self.root is not None:
            optimizer = sharding.full_optimizer_state(self.root, self.optimizer)  # collective
        else:
            optimizer = self.optimizer.state_dict()
        return {
            "step": self.steps,
            "optimizer": optimizer,
            "schedule": None if self.schedule is None else self.schedule.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
        }

    def save_weights(self, out: Path) -> Path:
        """The weights as an HF directory (or a LoRA adapter) at `out`, whole or not at all;
        every rank calls, rank 0 writes."""
        gather = self.root is not None and sharding.sharded()
        state = sharding.full_model_state(self.root, self.prefix) if gather else None
        if self.ranks.main:
            save_hf_weights(self.model, out, state)
        distributed.barrier()
        return out

    def save(self, folder: Path, extra: dict[str, Any] | None = None) -> None:
        """A checkpoint into `folder`: model/ and trainer.pt (with `extra` in it)."""
        import torch

        state = {**self.state(), **(extra or {})}
        self.save_weights(folder / "model")
        if self.ranks.main:
            torch.save(state, folder / "trainer.pt")
        distributed.barrier()

    def load(self, folder: Path, state: dict[str, Any] | None = None) -> dict[str, Any]:
        """Put a checkpoint back (`state`: its trainer.pt, when already read); returns the
        trainer.pt, with whatever the trainer added to it."""
        import torch

        self.load_weights(folder / "model")
        if state is None:
            state = torch.load(folder / "trainer.pt", weights_only=False)
        self.load_optimizer(state["optimizer"])
        if self.schedule is not None:
            self.schedule.load_state_dict(state["schedule"])
        self.steps = state.get("step", 0)  # absent from RL checkpoints before this core
        torch.set_rng_state(state["torch_rng"])
        if "python_rng" in state:
            random.setstate(state["python_rng"])
        return state

    def load_weights(self, folder: Path) -> None:
        if is_peft(self.model):
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            files = sorted(folder.glob("*.safetensors"))
            if not files:
                raise ConfigError(f"--resume: {folder} holds no weights")
            set_peft_model_state_dict(self.model, load_file(files[0]))
            return
        weights = read_full_weights(self.model, folder)
        if self.root is not None:
            sharding.load_model_state(self.root, weights, self.prefix)
        else:
            self.model.load_state_dict(weights, strict=False)

    def load_optimizer(self, saved: dict[str, Any]) -> None:
        if self.root is not None and not by_position(saved):
            sharding.load_optimizer_state(self.root, self.optimizer, saved)
        else:  # torch's own state: this core's without a root, or a policy's before FSDP2
            self.optimizer.load_state_dict(saved)


def by_position(optimizer_state: dict) -> bool:
    """Whether an optimizer state names parameters by position (torch's own state_dict)
    rather than by name (FSDP2's full state)."""
    return any(isinstance(key, int) for key in optimizer_state.get("state", {}))
