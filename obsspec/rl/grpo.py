"""The GRPO objective as pure torch: group advantages, response log-probs, clipped loss.

As used here: each task is rolled out n times (a group); an episode's advantage is its reward
minus the group mean, divided by the group std, so no value network is needed and a group
whose episodes all scored the same teaches nothing. The std is the unbiased sample std
(divided by n - 1, torch.std's default, what TRL and verl use) or, as an option, the
population std (divided by n: this project's earlier runs). The advantage is broadcast to
every token the policy generated; prompt and observation tokens (real or speculated) carry
no loss. The PPO ratio is clipped asymmetrically, [1 - 0.2, 1 + 0.28] (DAPO "clip-higher":
more room to raise unlikely tokens, which keeps entropy up). Losses are token means over the
whole step (every micro-batch's sum divided by the step's total token count), so long
responses are not down-weighted. A KL penalty to a reference policy (the k3 estimator) is
optional, off by default.

    advantages = group_advantages(rewards, task_ids)  # [episodes], one row per episode
    per_token = torch.tensor(advantages)[:, None].expand_as(mask)[mask]  # [tokens]
    with torch.no_grad():
        old = response_logprobs(model, ids, attention, mask)  # [tokens], ids[mask] order
    new = response_logprobs(model, ids, attention, mask)
    token_mean([clipped_policy_loss(new, old, per_token)]).backward()
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from obsspec.train.model import LOGITS_CHUNK, is_peft, target_logprobs

GroupStd = Literal["unbiased", "population"]


def group_advantages(
    rewards: Sequence[float],
    groups: Sequence[Hashable],
    *,
    scale_by_std: bool = True,
    std: GroupStd = "unbiased",
    eps: float = 1e-6,
) -> list[float]:
    """Each reward minus its group's mean (over episodes sharing a key), over the group's
    std + eps when scale_by_std (`std`: unbiased, over n - 1; or population, over n); in
    input order."""
    if len(rewards) != len(groups):
        raise ValueError(f"rewards ({len(rewards)}) and groups ({len(groups)}) differ in length")
    if std not in ("unbiased", "population"):
        raise ValueError(f"std must be 'unbiased' or 'population', got {std!r}")
    members: dict[Hashable, list[float]] = defaultdict(list)
    for reward, group in zip(rewards, groups, strict=True):
        members[group].append(float(reward))
    stats = {group: _mean_std(values, std) for group, values in members.items()}
    advantages = []
    for reward, group in zip(rewards, groups, strict=True):
        mean, spread = stats[group]
        if spread == 0.0:  # all equal: exactly zero, not float noise from reward - mean
            advantages.append(0.0)
        else:
            centred = float(reward) - mean
            advantages.append(centred / (spread + eps) if scale_by_std else centred)
    return advantages


def _mean_std(values: list[float], std: GroupStd) -> tuple[float, float]:
    mean = math.fsum(values) / len(values)
    if all(v == values[0] for v in values):  # also every group of one: no n - 1 = 0 to divide by
        return mean, 0.0
    dof = len(values) - 1 if std == "unbiased" else len(values)
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / dof)


def response_logprobs(
    model, ids: torch.Tensor, attention: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """log p(ids[r, t] | ids[r, :t]) at every masked position, in the order of ids[mask].

    Like labelled_loss_sum: only the hidden states that predict a masked token go through the
    output layer; full logits [rows, width, vocab] would dwarf everything else.
    """
    if mask.shape != ids.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} != ids shape {tuple(ids.shape)}")
    if bool(mask[:, 0].any()):
        raise ValueError("mask is set at position 0, which no context predicts")
    base = model.get_base_model() if is_peft(model) else model
    hidden = base.get_decoder()(input_ids=ids, attention_mask=attention).last_hidden_state
    targets = mask[:, 1:]  # [rows, width-1]: hidden[t] predicts ids[t+1]
    picked = hidden[:, :-1][targets]  # [n, hidden]
    head, wanted = base.get_output_embeddings(), ids[:, 1:][targets]  # wanted: [n]
    if picked.shape[0] > LOGITS_CHUNK:  # float32 logits a chunk at a time
        return target_logprobs(head, picked, wanted, LOGITS_CHUNK)
    logprobs = head(picked).float().log_softmax(-1)  # [n, vocab]
    return logprobs.gather(-1, wanted.unsqueeze(-1)).squeeze(-1)  # [n]


class ResponseLogprobs(torch.nn.Module):
    """`response_logprobs` of `model` as a module's forward: what FSDP2 shards at the root,
    so that its hooks gather the embeddings and output layer (they run only through a
    forward of the module they were put on)."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids, attention, mask) -> torch.Tensor:
        return response_logprobs(self.model, ids, attention, mask)


@dataclass(frozen=True)
class LossParts:
    loss_sum: torch.Tensor  # scalar, differentiable: sum over tokens of the per-token loss
    tokens: int  # tokens in this part
    clipped: int  # tokens whose objective was clipped (the clip was active and chosen)
    kl_sum: float  # sum over tokens of the KL estimate (0.0 without a reference)


def clipped_policy_loss(
    new_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> LossParts:
    """Sums (not means) of the per-token PPO-clip loss: the caller divides by the step's
    token count, so micro-batches of any size weigh each token the same."""
    _check_loss_args(new_logprobs, old_logprobs, advantages, ref_logprobs, clip_low, clip_high)
    if kl_coef < 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    ratio = torch.exp(new_logprobs - old_logprobs.detach())  # [n]
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * advantages
    per_token = -torch.minimum(unclipped, clipped)  # [n]
    kl_sum = 0.0
    if ref_logprobs is not None and kl_coef > 0:
        # k3 = e^x - x - 1 with x = ref - new: unbiased for KL(new || ref) and never negative.
        log_ratio = ref_logprobs.detach() - new_logprobs
        k3 = torch.exp(log_ratio) - log_ratio - 1
        per_token = per_token + kl_coef * k3
        kl_sum = float(k3.detach().sum())
    return LossParts(
        loss_sum=per_token.sum(),
        tokens=int(new_logprobs.numel()),
        clipped=int((clipped < unclipped).sum()),
        kl_sum=kl_sum,
    )


def _check_loss_args(new, old, advantages, ref, clip_low: float, clip_high: float) -> None:
    if not 0 <= clip_low < 1:
        raise ValueError(f"clip_low must be in [0, 1), got {clip_low}")
    if clip_high < 0:
        raise ValueError(f"clip_high must be >= 0, got {clip_high}")
    if new.dim() != 1:
        raise ValueError(f"new_logprobs must be 1-D, got shape {tuple(new.shape)}")
    named = {"old_logprobs": old, "advantages": advantages, "ref_logprobs": ref}
    for name, tensor in named.items():
        if tensor is not None and tensor.shape != new.shape:
            raise ValueError(
                f"{name} shape {tuple(tensor.shape)} != new_logprobs shape {tuple(new.shape)}"
            )


def token_mean(parts: Sequence[LossParts]) -> torch.Tensor:
    """The step's loss: every token weighs the same, whichever micro-batch it came in."""
    if not parts:
        return torch.tensor(0.0)
    total = sum(part.tokens for part in parts)
    return torch.stack([part.loss_sum for part in parts]).sum() / max(total, 1)
