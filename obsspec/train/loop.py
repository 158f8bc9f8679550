"""The training loop: plan batches, step, report, checkpoint; resumable at any step.

    outcome = train(base, sequences, settings, out, resume=False, progress=print)

Reads top to bottom: place the model, restore a checkpoint if resuming, then for each
optimizer step take the next `grad_accum` batches of the epoch's plan (batches.py), sum the
loss over labelled tokens (model.py) and divide by the step's labelled-token count (a token
mean over the whole step, whatever the batch split), clip, step, report, and checkpoint.
Master weights stay float32; the forward pass runs under bfloat16 autocast where the device
computes bfloat16 natively (model.placement). Under torchrun every rank runs this same loop
on its share of each step's batches (distributed.py); rank 0 saves.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from obsspec.config import first_difference
from obsspec.errors import ConfigError, ObsspecError
from obsspec.models.tokenizer import load_tokenizer
from obsspec.train import distributed
from obsspec.train.batches import plan_batches
from obsspec.train.checkpoint import (
    Checkpoints,
    load_full_weights,
    load_trainer_state,
    prepare_out,
    save_final,
)
from obsspec.train.config import TrainSettings
from obsspec.train.distributed import Ranks
from obsspec.train.memory import check_memory, is_out_of_memory, out_of_memory_error
from obsspec.train.model import (
    LabelledLoss,
    Placement,
    batch_tensors,
    is_peft,
    labelled_loss_sum,
    load_model,
    placement,
)
from obsspec.train.sequences import Sequence

# Settings that may change between a run and its resumption without changing what is learned.
RESUMABLE_CHANGES = {
    "checkpoint_every",
    "keep_checkpoints",
    "max_steps",
    "epochs",
    "device",
    "eval_loss_tokens",
}


class TrainingError(ObsspecError):
    """Training could not go on (out of memory, a non-finite loss)."""


@dataclass(frozen=True)
class StepProgress:
    step: int  # optimizer steps done, 1-based
    total_steps: int
    epoch: int
    loss: float  # mean over this step's labelled tokens
    lr: float
    tokens_per_s: float  # all tokens (prompts too) through the model per second, this run
    elapsed_s: float


@dataclass(frozen=True)
class TrainOutcome:
    steps: int
    resumed_from: int
    first_loss: float | None
    last_loss: float | None
    eval_loss_before: float | None
    eval_loss_after: float | None
    tokens: int
    seconds: float
    device: str
    dtype: str


def data_fingerprint(sequences: list[Sequence]) -> str:
    digest = hashlib.sha256()
    for sequence in sequences:
        digest.update(repr((sequence.ids, sequence.labels)).encode())
    return digest.hexdigest()[:16]


def run_identity(settings: TrainSettings, sequences: list[Sequence], base: Path) -> dict:
    learned = settings.model_dump(mode="json", exclude=RESUMABLE_CHANGES)
    return {"settings": learned, "data": data_fingerprint(sequences), "base": str(base)}


def lr_factor(settings: TrainSettings, total_steps: int) -> Callable[[int], float]:
    """Linear warm-up, then cosine decay to min_lr_ratio at the last step."""

    def factor(step: int) -> float:
        if step < settings.warmup_steps:
            return (step + 1) / (settings.warmup_steps + 1)
        span = max(1, total_steps - settings.warmup_steps)
        cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, (step - settings.warmup_steps) / span)))
        return settings.min_lr_ratio + (1 - settings.min_lr_ratio) * cosine

    return factor


def autocast(where: Placement):
    import torch

    if where.dtype == "float32":
        return contextlib.nullcontext()
    return torch.autocast(where.device.split(":")[0], dtype=torch.bfloat16)


def mean_loss(model, sequences: list[Sequence], settings: TrainSettings, where, pad_id) -> float:
    """The token-mean loss over labelled tokens, without gradients (held-out evaluation)."""
    import torch

    if not sequences:
        return float("nan")
    lengths = [len(s.ids) for s in sequences]
    total = count = 0.0
    model.eval()
    with torch.no_grad(), autocast(where):
        for batch in plan_batches(lengths, settings.batch_tokens, seed=0, epoch=0):
            tensors = batch_tensors([sequences[i] for i in batch], pad_id, where.device)
            loss, n = labelled_loss_sum(model, *tensors)
            total, count = total + loss.item(), count + n
    model.train()
    return total / max(count, 1)


def within_budget(sequences: list[Sequence], tokens: int) -> list[Sequence]:
    """The first sequences that fit `tokens` (a fixed subset: before and after compare)."""
    chosen, used = [], 0
    for sequence in sequences:
        if used + len(sequence.ids) > tokens:
            break
        chosen.append(sequence)
        used += len(sequence.ids)
    return chosen


class EpochPlans:
    """The batch plan of each epoch, computed once (it depends only on seed and epoch)."""

    def __init__(self, sequences: list[Sequence], settings: TrainSettings, world: int) -> None:
        self.lengths = [len(s.ids) for s in sequences]
        self.settings = settings
        self.per_step = settings.grad_accum * world  # batches of one optimizer step, all ranks
        self._cache: dict[int, list[list[int]]] = {}
        self.steps_per_epoch = math.ceil(len(self.batches(0)) / self.per_step)

    def batches(self, epoch: int) -> list[list[int]]:
        if epoch not in self._cache:
            self._cache = {
                epoch: plan_batches(
                    self.lengths, self.settings.batch_tokens, seed=self.settings.seed, epoch=epoch
                )
            }
        return self._cache[epoch]

    def step(self, step: int) -> tuple[int, list[list[int]]]:
        """The epoch and the batches of optimizer step `step` (0-based), of every rank."""
        epoch, k = divmod(step, self.steps_per_epoch)
        return epoch, self.batches(epoch)[k * self.per_step : (k + 1) * self.per_step]


def train(
    base: Path,
    sequences: list[Sequence],
    settings: TrainSettings,
    out: Path,
    *,
    held_out: list[Sequence] = (),
    resume: bool = False,
    progress: Callable[[StepProgress], None] = lambda _: None,
) -> TrainOutcome:
    import torch

    if not sequences:
        raise ConfigError("nothing to train on: no sequence has a labelled token")
    where = placement(settings)
    ranks = distributed.current()
    checkpoints = Checkpoints(out / "checkpoints", settings.keep_checkpoints)
    checkpoints.remove_partial()
    identity = run_identity(settings, sequences, base)
    state = restore_point(checkpoints, identity) if resume else None
    torch.manual_seed(settings.seed)
    random.seed(settings.seed)

    model = load_model(base, where, settings.lora)
    if state is not None:
        load_weights(model, state["checkpoint"])
    pad_id = load_tokenizer(base).pad_token_id or 0
    plans = EpochPlans(sequences, settings, ranks.world)
    check_memory(model, settings, where, max(plans.lengths))
    total_steps = plans.steps_per_epoch * settings.epochs
    if settings.max_steps is not None:
        total_steps = min(total_steps, settings.max_steps)

    optimizer, schedule = make_optimizer(model, settings, total_steps)
    loss_module = LabelledLoss(model)
    if ranks.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        devices = [where.device] if where.device.startswith("cuda") else None
        loss_module = DistributedDataParallel(loss_module, device_ids=devices)
    first_step = restore_optimizer(state, optimizer, schedule) if state is not None else 0

    held_out = within_budget(list(held_out), settings.eval_loss_tokens)
    eval_before = None
    if held_out and first_step == 0 and ranks.main:
        eval_before = mean_loss(model, held_out, settings, where, pad_id)
    model.train()
    started, tokens = time.monotonic(), 0
    first_loss = last_loss = None
    for step in range(first_step, total_steps):
        epoch, batches = plans.step(step)
        step_sequences = [[sequences[i] for i in batch] for batch in batches]
        loss, step_tokens = train_step(
            loss_module, optimizer, step_sequences, ranks, settings, where, pad_id
        )
        schedule.step()
        tokens += step_tokens
        first_loss = loss if first_loss is None else first_loss
        last_loss = loss
        elapsed = time.monotonic() - started
        progress(
            StepProgress(
                step + 1,
                total_steps,
                epoch,
                loss,
                schedule.get_last_lr()[0],
                tokens / max(elapsed, 1e-9),
                elapsed,
            )
        )
        if (step + 1) % settings.checkpoint_every == 0 or step + 1 == total_steps:
            if ranks.main:
                checkpoints.save(step + 1, model, snapshot(step + 1, identity, optimizer, schedule))
            distributed.barrier()

    eval_after = None
    if ranks.main:
        eval_after = mean_loss(model, held_out, settings, where, pad_id) if held_out else None
        save_final(model, base, out, where.dtype)
    distributed.barrier()
    return TrainOutcome(
        total_steps,
        first_step,
        first_loss,
        last_loss,
        eval_before,
        eval_after,
        tokens,
        time.monotonic() - started,
        where.device,
        where.dtype,
    )


def train_into(
    out: Path,
    *,
    overwrite: bool,
    resume: bool,
    **train_args,
) -> TrainOutcome:
    """train() into OUT, which rank 0 first checks: a non-empty OUT is refused unless resumed
    or overwritten (checkpoint.prepare_out)."""
    if distributed.current().main:
        prepare_out(out, resume=resume, overwrite=overwrite)
    distributed.barrier()
    return train(out=out, resume=resume, **train_args)


def make_optimizer(model, settings: TrainSettings, total_steps: int):
    import torch

    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=settings.lr, weight_decay=settings.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(settings, total_steps))
    return optimizer, schedule


def snapshot(step: int, identity: dict, optimizer, schedule) -> dict[str, Any]:
    """Everything besides the weights that a resumed run needs to continue exactly."""
    import torch

    return {
        "step": step,
        "identity": identity,
        "optimizer": optimizer.state_dict(),
        "schedule": schedule.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
    }


def restore_optimizer(state: dict[str, Any], optimizer, schedule) -> int:
    """Put a snapshot back; returns the step to continue from."""
    import torch

    optimizer.load_state_dict(state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    return state["step"]


def train_step(
    loss_module, optimizer, batches, ranks: Ranks, settings, where, pad_id
) -> tuple[float, int]:
    """One optimizer step over `batches` (those of every rank; this rank takes every
    world-th); returns the step's mean loss and the tokens seen, over all ranks."""
    import torch

    n_labels = sum(sum(s.target_tokens for s in batch) for batch in batches)
    mine = [(batch, 1.0) for batch in batches[ranks.rank :: ranks.world]]
    # DDP synchronises on every backward: every rank must run as many, so a rank short of
    # batches repeats one with no weight.
    rounds = math.ceil(len(batches) / ranks.world)
    mine += [(batches[0], 0.0)] * (rounds - len(mine))
    optimizer.zero_grad(set_to_none=True)
    loss_sum = tokens = 0.0
    for batch, weight in mine:
        try:
            with autocast(where):
                loss = loss_module(*batch_tensors(batch, pad_id, where.device))
            # DDP averages gradients over ranks; x world makes it their sum
            (loss * (weight * ranks.world / n_labels)).backward()
        except (RuntimeError, MemoryError) as e:
            if is_out_of_memory(e):
                raise out_of_memory_error(batch, settings) from e
            raise
        loss_sum += weight * loss.item()
        tokens += weight * sum(len(s.ids) for s in batch)
    trainable = [p for p in loss_module.parameters() if p.requires_grad]
    torch.nn.utils.clip_grad_norm_(trainable, settings.max_grad_norm)
    optimizer.step()
    loss_sum, tokens = distributed.all_sum([loss_sum, tokens])
    mean = loss_sum / max(n_labels, 1)
    if not math.isfinite(mean):
        raise TrainingError(f"the loss became {mean}; try a lower --lr")
    return mean, int(tokens)


def restore_point(checkpoints: Checkpoints, identity: dict) -> dict[str, Any]:
    latest = checkpoints.latest()
    if latest is None:
        raise ConfigError(
            f"--resume: no checkpoint in {checkpoints.root} to resume from; "
            "run without --resume to start training"
        )
    state = load_trainer_state(latest)
    if state.get("identity") != identity:
        raise ConfigError(
            f"--resume: {latest} was trained with other settings or data "
            f"({first_difference(state.get('identity') or {}, identity)}); "
            "resume with the same ones, or start a new --out"
        )
    return {**state, "checkpoint": latest}


def load_weights(model, checkpoint: Path) -> None:
    """The checkpoint's weights (or LoRA adapter) into the freshly loaded model."""
    from safetensors.torch import load_file

    folder = checkpoint / "model"
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ConfigError(f"--resume: {folder} holds no weights")
    if is_peft(model):
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_file(files[0]))
        return
    load_full_weights(model, folder)
