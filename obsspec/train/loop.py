"""The training loop: plan batches, step, report, checkpoint; resumable at any step.

    outcome = train(base, sequences, settings, out, resume=False, progress=print)

Reads top to bottom: place the model, restore a checkpoint if resuming, then for each
optimizer step take the next `grad_accum` batches of the epoch's plan (batches.py), sum the
loss over labelled tokens (model.py) and divide by the step's labelled-token count (a token
mean over the whole step, whatever the batch split), and let the trainer core (core.py) clip,
step the optimizer and its warm-up/cosine schedule, and checkpoint. Master weights stay
float32; the forward pass runs under bfloat16 autocast where the device computes bfloat16
natively (precision.py). Under torchrun every rank runs this same loop on its share of each
step's batches (distributed.py); rank 0 saves.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from obsspec.config import first_difference
from obsspec.errors import ConfigError, TrainingError
from obsspec.models.tokenizer import load_tokenizer
from obsspec.models.weights import check_weights
from obsspec.rundirs import Inputs
from obsspec.train import distributed
from obsspec.train.batches import plan_batches
from obsspec.train.checkpoint import Checkpoints, load_trainer_state, prepare_out, save_final
from obsspec.train.config import TrainSettings
from obsspec.train.core import TrainerCore, warmup_cosine
from obsspec.train.distill import Distillation, DistilledLoss, load_teacher
from obsspec.train.distributed import Ranks
from obsspec.train.memory import check_memory, out_of_memory_error
from obsspec.train.model import LabelledLoss, batch_tensors, labelled_loss_sum, load_model
from obsspec.train.precision import autocast, placement
from obsspec.train.sequences import Sequence

# Settings that may change between a run and its resumption without changing what is learned.
RESUMABLE_CHANGES = {
    "checkpoint_every",
    "keep_checkpoints",
    "max_steps",
    "epochs",
    "device",
    "eval_loss_tokens",
    "eval_loss_every_epoch",
}


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
    eval_loss_by_epoch: list[tuple[int, float]] = ()  # (epoch, loss); epochs of this process


def data_fingerprint(sequences: list[Sequence]) -> str:
    digest = hashlib.sha256()
    for sequence in sequences:
        # which tokens are learned; their weights follow from settings.loss_weighting
        digest.update(repr((sequence.ids, [label > 0 for label in sequence.labels])).encode())
    return digest.hexdigest()[:16]


def run_identity(
    settings: TrainSettings,
    sequences: list[Sequence],
    base: Path,
    distill: Distillation | None = None,
) -> dict:
    learned = settings.model_dump(mode="json", exclude=RESUMABLE_CHANGES)
    identity = {"settings": learned, "data": data_fingerprint(sequences), "base": str(base)}
    if distill is not None:  # absent without a teacher: earlier runs' checkpoints still match
        identity["distill"] = distill.identity()
    return identity


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
    distill: Distillation | None = None,
) -> TrainOutcome:
    """Train base on sequences into out; with `distill`, against its teacher too (distill.py:
    the step loss is then the combined loss, the held-out loss still the cross-entropy)."""
    import torch

    if not sequences:
        raise ConfigError("nothing to train on: no sequence has a labelled token")
    where = placement(settings)
    ranks = distributed.current()
    checkpoints = Checkpoints(out / "checkpoints", settings.keep_checkpoints)
    checkpoints.remove_partial()
    identity = run_identity(settings, sequences, base, distill)
    state = restore_point(checkpoints, identity) if resume else None
    torch.manual_seed(settings.seed)
    random.seed(settings.seed)

    model = load_model(base, where, settings.lora)
    # loaded before the memory check, which then counts it in what is no longer available
    teacher = load_teacher(distill.teacher, where) if distill is not None else None
    pad_id = load_tokenizer(base).pad_token_id or 0
    plans = EpochPlans(sequences, settings, ranks.world)
    check_memory(model, settings, where, max(plans.lengths))
    total_steps = plans.steps_per_epoch * settings.epochs
    if settings.max_steps is not None:
        total_steps = min(total_steps, settings.max_steps)

    schedule = warmup_cosine(settings.warmup_steps, settings.min_lr_ratio, total_steps)
    core = TrainerCore(
        model,
        lr=settings.lr,
        weight_decay=settings.weight_decay,
        max_grad_norm=settings.max_grad_norm,
        schedule=schedule,
        tokenizer_from=base,  # checkpoints' model/ is servable
    )
    if state is not None:
        core.load(state["checkpoint"], state)
    first_step = core.steps
    loss_module = LabelledLoss(model) if teacher is None else DistilledLoss(model, teacher, distill)
    if ranks.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        devices = [where.device] if where.device.startswith("cuda") else None
        loss_module = DistributedDataParallel(loss_module, device_ids=devices)

    held_out = within_budget(list(held_out), settings.eval_loss_tokens)
    eval_before = None
    if held_out and first_step == 0 and ranks.main:
        eval_before = mean_loss(model, held_out, settings, where, pad_id)
    model.train()
    started, tokens = time.monotonic(), 0
    first_loss = last_loss = None
    by_epoch: list[tuple[int, float]] = []
    for step in range(first_step, total_steps):
        epoch, batches = plans.step(step)
        step_sequences = [[sequences[i] for i in batch] for batch in batches]
        loss, step_tokens = train_step(
            core, loss_module, step_sequences, ranks, settings, where, pad_id
        )
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
                core.lr,
                tokens / max(elapsed, 1e-9),
                elapsed,
            )
        )
        if (step + 1) % settings.checkpoint_every == 0 or step + 1 == total_steps:
            checkpoints.save(step + 1, core, {"identity": identity})
        epoch_ends = (step + 1) % plans.steps_per_epoch == 0 or step + 1 == total_steps
        if settings.eval_loss_every_epoch and held_out and ranks.main and epoch_ends:
            by_epoch.append((epoch + 1, mean_loss(model, held_out, settings, where, pad_id)))

    eval_after = None
    if ranks.main:
        if by_epoch:  # the last epoch's loss is the final model's: not scored twice
            eval_after = by_epoch[-1][1]
        elif held_out:
            eval_after = mean_loss(model, held_out, settings, where, pad_id)
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
        by_epoch,
    )


def train_into(
    out: Path,
    *,
    overwrite: bool,
    resume: bool,
    command: str,
    inputs: Inputs | None = None,
    progress: Callable[[StepProgress], None] = lambda _: None,
    open_logger: Callable[[], AbstractContextManager[Any]] = nullcontext,
    **train_args,
) -> TrainOutcome:
    """train() into OUT, which rank 0 first checks: a non-empty OUT is refused unless resumed
    or overwritten, and only a run of `command` (train-wm, sft) apart from its `inputs`
    (flag -> paths) is overwritten (checkpoint.prepare_out). Then rank 0 opens open_logger()
    (a writer with add(row), or None: obsspec.tracking.wandb_logger) for the training, given
    every step."""
    check_weights(train_args["base"])  # a damaged base is refused before OUT is made
    main = distributed.current().main
    if main:
        prepare_out(out, resume=resume, overwrite=overwrite, command=command, inputs=inputs)
    distributed.barrier()
    with open_logger() if main else nullcontext() as logger:
        if logger is not None:
            progress = logged(progress, logger)
        return train(out=out, resume=resume, progress=progress, **train_args)


def logged(progress: Callable[[StepProgress], None], logger) -> Callable[[StepProgress], None]:
    """progress, and each step's figures as a row to logger.add."""

    def both(step: StepProgress) -> None:
        progress(step)
        logger.add({k: v for k, v in asdict(step).items() if k != "total_steps"})

    return both


def train_step(
    core: TrainerCore, loss_module, batches, ranks: Ranks, settings, where, pad_id
) -> tuple[float, int]:
    """One optimizer step over `batches` (those of every rank; this rank takes every
    world-th); returns the step's mean loss and the tokens seen, over all ranks."""
    n_labels = sum(sum(s.target_weight for s in batch) for batch in batches)
    mine = [(batch, 1.0) for batch in batches[ranks.rank :: ranks.world]]
    # DDP synchronises on every backward: every rank must run as many, so a rank short of
    # batches repeats one with no weight.
    rounds = math.ceil(len(batches) / ranks.world)
    mine += [(batches[0], 0.0)] * (rounds - len(mine))
    seen = [0.0, 0.0]  # this rank's weighted loss sum and tokens

    def loss_of(weighted):
        batch, weight = weighted
        with autocast(where):
            loss = loss_module(*batch_tensors(batch, pad_id, where.device))
        seen[0] += weight * loss.item()
        seen[1] += weight * sum(len(s.ids) for s in batch)
        # DDP averages gradients over ranks; x world makes it their sum
        return loss * (weight * ranks.world / n_labels)

    def out_of_memory(weighted):
        return out_of_memory_error(weighted[0], settings)

    core.step(mine, loss_of, out_of_memory=out_of_memory)
    loss_sum, tokens = distributed.all_sum(seen)
    mean = loss_sum / (n_labels or 1)
    if not math.isfinite(mean):
        raise TrainingError(f"the loss became {mean}", hint="try a lower --lr")
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
