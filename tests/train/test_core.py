"""The trainer core on a single linear layer: the schedule's shape, accumulation over
micro-batches, clipping, divergence and out-of-memory errors."""

from __future__ import annotations

import pytest
import torch

from obsspec.errors import ConfigError, TrainingError
from obsspec.train.core import TrainerCore, warmup_cosine


def layer(seed: int = 0) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(4, 1)


def test_the_schedule_warms_up_then_decays_to_its_floor():
    factor = warmup_cosine(warmup_steps=2, min_lr_ratio=0.1, total_steps=10)
    assert [factor(0), factor(1)] == pytest.approx([1 / 3, 2 / 3])
    assert factor(2) == pytest.approx(1.0)
    decay = [factor(step) for step in range(2, 11)]
    assert decay == sorted(decay, reverse=True) and decay[-1] == pytest.approx(0.1)


def test_the_schedule_sets_each_steps_lr():
    model = layer()
    core = TrainerCore(
        model, lr=0.1, weight_decay=0.0, max_grad_norm=1.0, schedule=warmup_cosine(1, 0.0, 3)
    )
    lrs = [core.lr]
    for _ in range(3):
        core.step([torch.ones(1, 4)], lambda x: model(x).sum())
        lrs.append(core.lr)
    assert lrs == pytest.approx([0.05, 0.1, 0.05, 0.0]) and core.steps == 3


def test_micro_batches_accumulate_into_one_step():
    x = torch.randn(6, 4)
    whole, split = layer(), layer()
    whole_core = TrainerCore(whole, lr=0.1, weight_decay=0.0, max_grad_norm=100.0)
    split_core = TrainerCore(split, lr=0.1, weight_decay=0.0, max_grad_norm=100.0)
    norm = whole_core.step([x], lambda b: whole(b).pow(2).sum() / 6)
    split_norm = split_core.step([x[:2], x[2:]], lambda b: split(b).pow(2).sum() / 6)
    assert split_norm == pytest.approx(norm, rel=1e-5)
    assert torch.allclose(whole.weight, split.weight, atol=1e-6)


def test_the_gradient_is_clipped_and_its_norm_returned():
    model = layer()
    core = TrainerCore(model, lr=1.0, weight_decay=0.0, max_grad_norm=0.5)
    norm = core.step([torch.full((1, 4), 10.0)], lambda x: model(x).sum())
    assert norm == pytest.approx((4 * 10.0**2 + 1) ** 0.5)  # d/dW = x, d/db = 1
    stepped = torch.cat([p.grad.flatten() for p in model.parameters()])  # what AdamW used
    assert stepped.norm().item() == pytest.approx(0.5, rel=1e-5)


def test_a_non_finite_gradient_stops_before_the_weights_change():
    model = layer()
    core = TrainerCore(
        model, lr=0.1, weight_decay=0.0, max_grad_norm=1.0, gradient_name="the probe's gradient"
    )
    before = model.weight.detach().clone()
    with pytest.raises(TrainingError, match="the probe's gradient became nan") as raised:
        core.step([torch.ones(1, 4)], lambda x: model(x).sum() * float("nan"))
    assert raised.value.hint == "try a lower --lr"
    assert torch.equal(model.weight, before) and core.steps == 0


def test_running_out_of_memory_raises_the_trainers_advice():
    model = layer()
    core = TrainerCore(model, lr=0.1, weight_decay=0.0, max_grad_norm=1.0)

    def exhausted(batch):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory")

    with pytest.raises(ConfigError, match="batch 7"):
        core.step([7], exhausted, out_of_memory=lambda b: ConfigError(f"batch {b}"))
    with pytest.raises(RuntimeError, match="allocate"):  # no advice given: as raised
        core.step([7], exhausted)
