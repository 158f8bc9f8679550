"""Distillation from a trained model (`train-wm --teacher DIR`): the student learns the
labelled tokens and, at the same positions, the teacher's whole next-token distribution.

At each labelled position i (label weight w_i, student logits s_i, teacher logits t_i over
the shared vocabulary, the token that follows y_i, temperature T, weight alpha):

    loss_i = (1 - alpha) * CE(s_i, y_i)
             + alpha * T^2 * KL(softmax(t_i / T) || softmax(s_i / T))

and, as `labelled_loss_sum` (model.py), one batch gives sum_i w_i * loss_i and sum_i w_i, so
the loop's token mean over an optimizer step is unchanged. T^2 keeps the KL term's gradients
at the cross-entropy's scale whatever T (Hinton et al., 2015). The teacher runs frozen, in eval
mode, without gradients and in the student's autocast; only the labelled positions go through
either output layer, a chunk of rows at a time.

The teacher's weights are loaded in the compute dtype (bfloat16 where the forward pass is
autocast to bfloat16, else float32): it takes no optimizer step, so it needs no float32
master copy, and under autocast its matrix products run in bfloat16 anyway; this halves its
memory, at the cost of a bfloat16 residual stream in the teacher (as sharded training has).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from obsspec.errors import ConfigError
from obsspec.train.model import by_chunks, labelled_rows
from obsspec.train.precision import Placement

# Rows whose [rows, vocab] float32 tensors exist at once. A quarter of model.LOGITS_CHUNK:
# the combined loss keeps about four such tensors alive (the student's logits and
# log-softmax, the teacher's log-softmax, the KL terms) where the cross-entropy keeps one.
DISTILL_CHUNK = 1024


@dataclass(frozen=True)
class Distillation:
    teacher: Path
    alpha: float = 0.5  # the KL term's share of the loss
    temperature: float = 1.0

    def identity(self) -> dict:
        """What a resumed run must share with the run it continues."""
        return {"teacher": str(self.teacher), "alpha": self.alpha, "temperature": self.temperature}


def vocabulary(model_dir: Path) -> tuple[int | None, dict[str, int]]:
    """The output layer's width (the config's vocab_size) and the tokenizer's token -> id."""
    from transformers import AutoConfig

    from obsspec.models.tokenizer import load_tokenizer

    config = AutoConfig.from_pretrained(model_dir).get_text_config()
    return getattr(config, "vocab_size", None), load_tokenizer(model_dir).get_vocab()


def check_teacher(student: Path, teacher: Path) -> None:
    """Refuse a teacher whose output layer does not index the student's tokens: the same
    tokens must have the same ids, and the output layers the same width."""
    from obsspec.models.weights import check_weights

    check_weights(teacher)  # a damaged teacher is named before any work
    (student_width, student_vocab), (teacher_width, teacher_vocab) = (
        vocabulary(student),
        vocabulary(teacher),
    )
    if student_width != teacher_width:
        why = f"vocab_size {teacher_width}, the student's {student_width}"
    elif student_vocab != teacher_vocab:
        differing = sum(teacher_vocab.get(token) != i for token, i in student_vocab.items())
        why = f"{differing} of the student's {len(student_vocab)} tokens have another id or none"
    else:
        return
    raise ConfigError(
        f"--teacher {teacher}: its vocabulary is not that of the model trained, {student} "
        f"({why}); distillation compares the two output layers token by token, so the teacher "
        "must use the same tokenizer (a world model trained from the same base)"
    )


def load_teacher(path: Path, where: Placement):
    """The teacher, frozen and in eval mode, on the device in the compute dtype (see above)."""
    from transformers import AutoModelForCausalLM

    from obsspec.models.convert import quiet_transformers

    quiet_transformers()
    teacher = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, where.dtype))
    return teacher.to(where.device).eval().requires_grad_(False)


def distilled_loss_sum(
    model, teacher, ids, attention, labels, settings: Distillation, chunk: int = DISTILL_CHUNK
):
    """sum_i w_i * loss_i over the batch's labelled positions, and sum_i w_i: the contract of
    model.labelled_loss_sum, with the loss the module docstring defines."""
    picked, wanted, chosen, head = labelled_rows(model, ids, attention, labels)
    with torch.no_grad():
        taught, _, _, teacher_head = labelled_rows(teacher, ids, attention, labels)

    def part(rows, teacher_rows, targets):
        return combined_loss(head, teacher_head, rows, teacher_rows, targets, settings)

    losses = by_chunks(part, chunk, picked, taught, wanted)  # [n]
    return (losses * chosen).sum(), float(chosen.sum().item())


def combined_loss(head, teacher_head, rows, teacher_rows, targets, settings: Distillation):
    """(1 - alpha) * CE + alpha * T^2 * KL(teacher || student) of each row: [c, h] -> [c]."""
    import torch.nn.functional as F

    temperature = settings.temperature
    logits = head(rows).float()  # [c, vocab]
    logprobs = F.log_softmax(logits, dim=-1)
    cross_entropy = F.nll_loss(logprobs, targets, reduction="none")  # as F.cross_entropy
    if temperature != 1.0:
        logprobs = F.log_softmax(logits / temperature, dim=-1)
    with torch.no_grad():
        teacher_logprobs = F.log_softmax(teacher_head(teacher_rows).float() / temperature, dim=-1)
    kl = F.kl_div(logprobs, teacher_logprobs, log_target=True, reduction="none").sum(-1)
    return (1 - settings.alpha) * cross_entropy + settings.alpha * temperature**2 * kl


class DistilledLoss(torch.nn.Module):
    """LabelledLoss (model.py) with distillation: what DDP wraps. The teacher is kept in a
    list, not as a submodule: DDP then neither broadcasts nor synchronises it, it stays out of
    the student's train()/eval() and state_dict, and it is never a checkpoint's."""

    def __init__(self, model, teacher, settings: Distillation) -> None:
        super().__init__()
        self.model = model
        self.teacher = [teacher]
        self.settings = settings

    def forward(self, ids, attention, labels):
        teacher = self.teacher[0]
        return distilled_loss_sum(self.model, teacher, ids, attention, labels, self.settings)[0]
