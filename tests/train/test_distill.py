"""Distillation's loss (obsspec.train.distill): its definition against full logits, its
limits (alpha 0: the plain loss; a teacher equal to the student: no KL), gradients into the
student only, chunks that change nothing, and the teacher in the run's identity."""

from __future__ import annotations

import pytest
import torch

from obsspec.train import distill
from obsspec.train.config import TrainSettings
from obsspec.train.distill import Distillation, DistilledLoss, distilled_loss_sum, load_teacher
from obsspec.train.loop import run_identity
from obsspec.train.model import labelled_loss_sum
from obsspec.train.precision import Placement
from obsspec.train.sequences import Sequence

CPU = Placement("cpu", "float32")


def load(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def batch():
    """Two rows of 40 tokens, 25 labelled each, the second row's labels weighing 0.5."""
    torch.manual_seed(0)
    ids = torch.randint(3, 1000, (2, 40))
    attention = torch.ones_like(ids)
    labels = torch.zeros(ids.shape)
    labels[:, 10:35] = 1.0
    labels[1] *= 0.5
    return ids, attention, labels


def by_definition(student, teacher, ids, attention, labels, alpha, temperature):
    """The module docstring's loss, from the full logits of every position."""
    import torch.nn.functional as F

    weights = labels[:, 1:]
    at = weights > 0
    s = student(input_ids=ids, attention_mask=attention).logits[:, :-1][at]  # [n, vocab]
    with torch.no_grad():
        t = teacher(input_ids=ids, attention_mask=attention).logits[:, :-1][at]
    ce = F.cross_entropy(s, ids[:, 1:][at], reduction="none")
    p_teacher = F.softmax(t / temperature, dim=-1)
    kl = (p_teacher * (p_teacher.log() - F.log_softmax(s / temperature, dim=-1))).sum(-1)
    losses = (1 - alpha) * ce + alpha * temperature**2 * kl
    return (losses * weights[at]).sum(), float(weights[at].sum())


# (1.0, 0.1): the KL term alone, sharpened until its direction shows (the two random models'
# near-uniform distributions give nearly the same KL either way at T = 1)
@pytest.mark.parametrize(("alpha", "temperature"), [(0.3, 1.0), (0.3, 2.0), (1.0, 0.1)])
def test_the_loss_is_its_definition(tiny_model_dir, deep_tiny_model_dir, alpha, temperature):
    student, teacher = load(tiny_model_dir), load_teacher(deep_tiny_model_dir, CPU)
    settings = Distillation(deep_tiny_model_dir, alpha=alpha, temperature=temperature)
    loss, weight = distilled_loss_sum(student, teacher, *batch(), settings)
    expected, expected_weight = by_definition(student, teacher, *batch(), alpha, temperature)
    assert weight == expected_weight == 25 * 1.5
    assert torch.allclose(loss, expected, rtol=1e-5)


def test_with_alpha_0_it_is_the_plain_labelled_loss_exactly(tiny_model_dir, deep_tiny_model_dir):
    student, teacher = load(tiny_model_dir), load_teacher(deep_tiny_model_dir, CPU)
    settings = Distillation(deep_tiny_model_dir, alpha=0.0)
    loss, weight = distilled_loss_sum(student, teacher, *batch(), settings)
    plain, plain_weight = labelled_loss_sum(student, *batch())
    assert torch.equal(loss, plain) and weight == plain_weight


def test_a_teacher_equal_to_the_student_adds_nothing(tiny_model_dir):
    student, teacher = load(tiny_model_dir), load_teacher(tiny_model_dir, CPU)
    plain, _ = labelled_loss_sum(student, *batch())
    only_kl, _ = distilled_loss_sum(student, teacher, *batch(), Distillation(tiny_model_dir, 1.0))
    assert only_kl.item() == pytest.approx(0.0, abs=1e-6)
    mixed, _ = distilled_loss_sum(student, teacher, *batch(), Distillation(tiny_model_dir, 0.25))
    assert torch.allclose(mixed, 0.75 * plain, rtol=1e-6)


def test_gradients_reach_the_student_and_never_the_teacher(tiny_model_dir, deep_tiny_model_dir):
    student, teacher = load(tiny_model_dir), load_teacher(deep_tiny_model_dir, CPU)
    module = DistilledLoss(student, teacher, Distillation(deep_tiny_model_dir, alpha=1.0))
    module(*batch()).backward()  # alpha 1: the KL term alone
    assert all(p.grad is not None for p in student.parameters() if p.requires_grad)
    assert student.get_output_embeddings().weight.grad.abs().sum() > 0
    assert all(not p.requires_grad and p.grad is None for p in teacher.parameters())
    assert not teacher.training
    # only the student is the module's (what DDP synchronises and a checkpoint saves)
    assert {id(p) for p in module.parameters()} == {id(p) for p in student.parameters()}


def test_chunks_give_the_values_and_gradients_of_one_pass(tiny_model_dir, deep_tiny_model_dir):
    student, teacher = load(tiny_model_dir), load_teacher(deep_tiny_model_dir, CPU)
    settings = Distillation(deep_tiny_model_dir, alpha=0.5, temperature=2.0)

    def value_and_grads(chunk):
        student.zero_grad()
        loss, _ = distilled_loss_sum(student, teacher, *batch(), settings, chunk=chunk)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in student.parameters()]

    whole, whole_grads = value_and_grads(distill.DISTILL_CHUNK)  # 50 rows: one pass
    chunked, chunked_grads = value_and_grads(7)  # 7 x 7 + 1
    assert torch.allclose(chunked, whole, rtol=1e-5)
    for mine, theirs in zip(chunked_grads, whole_grads, strict=True):
        assert torch.allclose(mine, theirs, rtol=1e-4, atol=1e-5)  # float sums' order
    with torch.no_grad():
        unrecorded, _ = distilled_loss_sum(student, teacher, *batch(), settings, chunk=7)
    assert torch.allclose(unrecorded, whole, rtol=1e-5)


def test_the_teacher_and_its_settings_are_part_of_the_run_identity(tmp_path):
    sequences = [Sequence([1, 2, 3], [0, 1, 1])]
    plain = run_identity(TrainSettings(), sequences, tmp_path)
    assert "distill" not in plain  # checkpoints of runs without a teacher still resume
    one = run_identity(TrainSettings(), sequences, tmp_path, Distillation(tmp_path / "a"))
    assert one["distill"] == {"teacher": str(tmp_path / "a"), "alpha": 0.5, "temperature": 1.0}
    assert one != run_identity(TrainSettings(), sequences, tmp_path, Distillation(tmp_path / "b"))
    assert one != run_identity(
        TrainSettings(), sequences, tmp_path, Distillation(tmp_path / "a", alpha=0.9)
    )
