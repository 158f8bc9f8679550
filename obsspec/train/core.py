"""The trainer core every trainer steps through: `sft` and `train-wm` (loop.py), the GRPO
policy trainer (obsspec.rl.policy_trainer) and world-model co-training (world_model.cotrain).

    core = TrainerCore(model, lr=1e-4, weight_decay=0.0, max_grad_norm=1.0,
                       schedule=warmup_cosine(5, 0.1, total_steps), tokenizer_from=base)
    norm = core.step(micro_batches, loss)   # zero grads; loss(b).backward() for each b;
                                            # clip (returns the norm); optimizer and
                                            # schedule step
    core.save_weights(sync_dir)             # a bfloat16 HF directory an engine serves
    core.save(folder, {"replay": ...})      # folder/state/ + folder/model/ + folder/trainer.pt
    extra = core.load(folder)               # weights, optimizer, schedule, step, RNG back

The optimizer is AdamW over the model's trainable parameters; the learning rate follows
`schedule` (a factor of `lr` per step, none: constant). A step's micro-batches are whatever
the trainer splits it into (forward passes of bounded size, this rank's share of them); the
trainer's `loss` returns the tensor to backward, already scaled so that the gradients sum to
the step's token mean. A non-finite gradient norm stops training before it reaches the
weights.

A checkpoint folder holds
    state/       the float32 master weights and the AdamW state, sharded: every rank writes
                 the shards it holds, and a checkpoint of N ranks resumes on M (dcp.py)
    model/       what an engine or a user loads: an HF directory in `serve_dtype` (bfloat16)
                 with the base model's tokenizer and chat template, written by rank 0 from
                 the gathered weights (no optimizer state is gathered); or a LoRA adapter
    trainer.pt   the small things, written by rank 0: schedule, optimizer steps done, torch
                 and Python RNG states, and whatever the trainer adds
Every rank calls save and load. A model sharded with FSDP2 (`root`, the module sharded at the
top, naming the model `prefix`) is saved and loaded through `root`.
Checkpoints from before state/ still resume: the whole float32 weights in model/ and the
optimizer state in trainer.pt, keyed by parameter name (FSDP2's full state) or by position
(torch's own).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from obsspec.errors import ConfigError, TrainingError
from obsspec.models.tokenizer import load_tokenizer
from obsspec.train import distributed, sharding
from obsspec.train.checkpoint import read_full_weights, save_hf_weights
from obsspec.train.dcp import has_sharded, load_sharded, save_sharded
from obsspec.train.memory import is_out_of_memory
from obsspec.train.model import is_peft

Batch = TypeVar("Batch")
SHARDED = "state"  # a checkpoint's DCP state
SERVED = "model"  # a checkpoint's servable model directory


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
        tokenizer_from: Path | None = None,
        serve_dtype: str = "bfloat16",
    ) -> None:
        """`tokenizer_from`: the base model directory whose tokenizer and chat template every
        saved model directory gets (none: weights and config only, which no engine serves);
        `serve_dtype`: the dtype of those directories' weights (torch's name)."""
        import torch

        self.model = model  # the HF (or peft) model whose weights are saved
        self.root, self.prefix = root, prefix  # FSDP2: the sharded module, naming the model
        self.tokenizer = None if tokenizer_from is None else load_tokenizer(tokenizer_from)
        self.serve_dtype = serve_dtype
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

    @property
    def module(self):
        """What the sharded state is taken from: the FSDP2 root, else the model."""
        return self.model if self.root is None else self.root

    def state(self) -> dict[str, Any]:
        """What a resumed run needs besides the weights and the optimizer state (those are
        in state/) to continue exactly: trainer.pt."""
        import torch

        return {
            "step": self.steps,
            "schedule": None if self.schedule is None else self.schedule.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
        }

    def full_weights(self) -> dict[str, Any]:
        """The whole weights by HF name: gathered from the shards when sharded (every rank
        calls; ranks other than 0 get an empty dict), else the model's own."""
        if self.root is not None and sharding.sharded():
            return sharding.full_model_state(self.root, self.prefix)
        return dict(self.model.state_dict())

    def save_weights(self, out: Path) -> Path:
        """The weights as a servable HF directory in serve_dtype, with the tokenizer (or a
        LoRA adapter) at `out`, whole or not at all; every rank calls, rank 0 writes."""
        gather = self.root is not None and sharding.sharded()
        state = self.full_weights() if gather else None  # else the model's own, as saved
        if self.ranks.main:
            save_hf_weights(
                self.model, out, state, dtype=self.serve_dtype, tokenizer=self.tokenizer
            )
        distributed.barrier()
        return out

    def save(self, folder: Path, extra: dict[str, Any] | None = None) -> None:
        """A checkpoint into `folder`: state/, model/ and trainer.pt (with `extra` in it)."""
        import torch

        if self.ranks.main:
            (folder / SHARDED).mkdir(parents=True, exist_ok=True)
        distributed.barrier()  # the folder exists before any rank writes into it
        save_sharded(folder / SHARDED, self.module, self.optimizer)
        self.save_weights(folder / SERVED)
        if self.ranks.main:
            torch.save({**self.state(), **(extra or {})}, folder / "trainer.pt")
        distributed.barrier()

    def load(self, folder: Path, state: dict[str, Any] | None = None) -> dict[str, Any]:
        """Put a checkpoint back (`state`: its trainer.pt, when already read); returns the
        trainer.pt, with whatever the trainer added to it."""
        import torch

        if state is None:
            state = torch.load(folder / "trainer.pt", weights_only=False)
        if has_sharded(folder / SHARDED):
            load_sharded(folder / SHARDED, self.module, self.optimizer)
        else:  # from before state/: the whole weights in model/, the optimizer in trainer.pt
            self.load_weights(folder / SERVED)
            self.load_optimizer(state["optimizer"])
        if self.schedule is not None:
            self.schedule.load_state_dict(state["schedule"])
        self.steps = state.get("step", 0)  # absent from RL checkpoints before this core
        torch.set_rng_state(state["torch_rng"])
        if "python_rng" in state:
            random.setstate(state["python_rng"])
        return state

    def load_weights(self, folder: Path) -> None:
        """The whole weights of an older checkpoint's model/ (or its LoRA adapter)."""
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
        """An older checkpoint's optimizer state, by parameter name or by position."""
        if self.root is not None and not by_position(saved):
            sharding.load_optimizer_state(self.root, self.optimizer, saved)
        else:  # torch's own state: this core's without a root, or a policy's before FSDP2
            self.optimizer.load_state_dict(saved)


def by_position(optimizer_state: dict) -> bool:
    """Whether an optimizer state names parameters by position (torch's own state_dict)
    rather than by name (FSDP2's full state)."""
    return any(isinstance(key, int) for key in optimizer_state.get("state", {}))
