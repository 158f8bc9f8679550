"""The policy trainer: one GRPO update per step on that step's episodes, weights out for the
engines, state in and out for checkpoints.

    trainer = PolicyTrainer(base_dir, grpo_settings, seed)
    stats = trainer.update(episodes, step)      # PolicyEpisode: ids, mask, engine logprobs, A
    trainer.save_weights(sync_dir)              # an HF directory the engines reload in place
    trainer.save(checkpoint_dir / "policy"); trainer.restore(checkpoint_dir / "policy")

An update first recomputes every response token's log-probability under the current weights
(no gradient): these are the "old" log-probabilities of the clipped ratio, and their gap to
what the engine reported when it sampled (`logprob_mismatch`, mean absolute difference) shows
how far trainer and engine numerics disagree. Then the step's episodes are split into
`minibatches` (shuffled by seed and step), each one optimizer step whose loss is the token
mean of the clipped objective over that minibatch; from the second on the ratio moves away
from 1 and the clip matters. Episodes are packed into forward passes of at most
`batch_tokens` tokens (padding included), so memory stays bounded whatever the step holds.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

from obsspec.rl.config import GRPOSettings
from obsspec.rl.grpo import LossParts, clipped_policy_loss, response_logprobs
from obsspec.train.batches import plan_batches
from obsspec.train.checkpoint import load_full_weights, save_hf_weights
from obsspec.train.config import TrainSettings
from obsspec.train.loop import TrainingError, autocast
from obsspec.train.model import load_model, placement


@dataclass(frozen=True)
class PolicyEpisode:
    ids: list[int]  # the exact context: prompt, replies, observations
    mask: list[int]  # 1 where the policy generated the token (the loss goes only there)
    engine_logprobs: list[float | None]  # what the engine reported when it sampled each token
    advantage: float


class PolicyTrainer:
    def __init__(
        self, base: Path, settings: GRPOSettings, seed: int, *, device: str = "auto"
    ) -> None:
        import torch
        from transformers import AutoTokenizer

        torch.manual_seed(seed)
        self.settings = settings
        self.seed = seed
        self.where = placement(TrainSettings(dtype=settings.dtype, device=device))
        self.model = load_model(base, self.where, None)
        self.model.train()
        self.reference = None
        if settings.kl_coef > 0:  # a frozen copy of the initial policy
            self.reference = load_model(base, self.where, None).eval().requires_grad_(False)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay
        )
        self.pad_id = AutoTokenizer.from_pretrained(base).pad_token_id or 0

    def update(self, episodes: list[PolicyEpisode], step: int) -> dict[str, float]:
        """One RL step's optimizer steps; the step's loss, clip and mismatch figures."""
        start = time.monotonic()
        trained = [e for e in episodes if any(e.mask)]
        if not trained:
            return empty_stats()
        old = self.logprobs(self.model, trained)
        reference = self.logprobs(self.reference, trained) if self.reference else None
        parts: list[LossParts] = []
        grad_norms = []
        for chunk in self.minibatches(len(trained), step):
            chunk_parts, norm = self.optimizer_step(trained, chunk, old, reference)
            parts += chunk_parts
            grad_norms.append(norm)
        tokens = sum(p.tokens for p in parts)
        loss = sum(float(p.loss_sum.detach()) for p in parts) / max(tokens, 1)
        return {
            "policy_loss": loss,
            "clip_fraction": sum(p.clipped for p in parts) / max(tokens, 1),
            "logprob_mismatch": mismatch(trained, old),
            "kl": sum(p.kl_sum for p in parts) / max(tokens, 1),
            "grad_norm": max(grad_norms),
            "trained_episodes": len(trained),
            "trained_tokens": tokens,
            "policy_train_seconds": time.monotonic() - start,
        }

    def minibatches(self, n: int, step: int) -> list[list[int]]:
        order = list(range(n))
        random.Random(f"{self.seed}:{step}").shuffle(order)
        count = min(self.settings.minibatches, n)
        return [order[i::count] for i in range(count)]

    def passes(self, episodes: list[PolicyEpisode], chunk: list[int]) -> list[list[int]]:
        """The chunk's episodes grouped into forward passes of bounded size."""
        lengths = [len(episodes[i].ids) for i in chunk]
        batches = plan_batches(lengths, self.settings.batch_tokens, seed=0, epoch=0)
        return [[chunk[j] for j in batch] for batch in batches]

    def tensors(self, episodes: list[PolicyEpisode], rows: list[int]):
        import torch

        width = max(len(episodes[i].ids) for i in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.bool)
        for row, i in enumerate(rows):
            n = len(episodes[i].ids)
            ids[row, :n] = torch.tensor(episodes[i].ids)
            attention[row, :n] = 1
            mask[row, :n] = torch.tensor(episodes[i].mask, dtype=torch.bool)
        device = self.where.device
        return ids.to(device), attention.to(device), mask.to(device)

    def logprobs(self, model, episodes: list[PolicyEpisode]) -> list:
        """Each episode's response-token log-probabilities under `model`, without gradient."""
        import torch

        out: list = [None] * len(episodes)
        with torch.no_grad(), autocast(self.where):
            for rows in self.passes(episodes, list(range(len(episodes)))):
                flat = response_logprobs(model, *self.tensors(episodes, rows)).float().cpu()
                sizes = [sum(episodes[i].mask) for i in rows]
                for i, values in zip(rows, flat.split(sizes), strict=True):
                    out[i] = values
        return out

    def optimizer_step(self, episodes, chunk: list[int], old: list, reference: list | None):
        import torch

        tokens = sum(sum(episodes[i].mask) for i in chunk)
        self.optimizer.zero_grad(set_to_none=True)
        parts = []
        for rows in self.passes(episodes, chunk):
            with autocast(self.where):
                new = response_logprobs(self.model, *self.tensors(episodes, rows)).float()
            device = new.device
            part = clipped_policy_loss(
                new,
                torch.cat([old[i] for i in rows]).to(device),
                torch.cat([torch.full_like(old[i], episodes[i].advantage) for i in rows]).to(
                    device
                ),
                clip_low=self.settings.clip_low,
                clip_high=self.settings.clip_high,
                ref_logprobs=None
                if reference is None
                else torch.cat([reference[i] for i in rows]).to(device),
                kl_coef=self.settings.kl_coef,
            )
            (part.loss_sum / tokens).backward()  # the token mean over the whole minibatch
            parts.append(part)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.settings.max_grad_norm)
        if not torch.isfinite(norm):
            raise TrainingError(f"the policy gradient became {float(norm)}; try a lower grpo.lr")
        self.optimizer.step()
        return parts, float(norm)

    def save_weights(self, out: Path) -> Path:
        return save_hf_weights(self.model, out)

    def save(self, folder: Path) -> None:
        """Weights and optimizer state into a checkpoint's `policy/` folder."""
        import torch

        save_hf_weights(self.model, folder / "model")
        torch.save(
            {"optimizer": self.optimizer.state_dict(), "torch_rng": torch.get_rng_state()},
            folder / "trainer.pt",
        )

    def restore(self, folder: Path) -> None:
        import torch

        load_full_weights(self.model, folder / "model")
        state = torch.load(folder / "trainer.pt", weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])


def mismatch(episodes: list[PolicyEpisode], trainer_logprobs: list) -> float:
    """Mean |trainer - engine| log-probability over the response tokens the engine scored."""
    total = count = 0.0
    for episode, mine in zip(episodes, trainer_logprobs, strict=True):
        engine = [lp for lp, m in zip(episode.engine_logprobs, episode.mask, strict=True) if m]
        for theirs, value in zip(engine, mine.tolist(), strict=True):
            if theirs is not None:
                total += abs(value - theirs)
                count += 1
    return total / count if count else float("nan")


def empty_stats() -> dict[str, float]:
    nan = float("nan")
    return {
        "policy_loss": nan,
        "clip_fraction": nan,
        "logprob_mismatch": nan,
        "kl": nan,
        "grad_norm": 0.0,
        "trained_episodes": 0,
        "trained_tokens": 0,
        "policy_train_seconds": 0.0,
    }
