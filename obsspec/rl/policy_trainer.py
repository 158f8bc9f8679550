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
`batch_tokens` tokens (padding included), so memory stays bounded whatever the step holds;
an episode is first cut after its last response token (what follows carries no loss and,
the model being causal, changes no log-probability before it), and one still longer than
`batch_tokens` is a TrainingError, never a pass of its own. RLConfig.grpo_settings resolves
`batch_tokens` to the engine's context length, which bounds every cut episode.
With `activation_checkpointing`, each decoder layer recomputes its activations in the
backward pass (obsspec.train.activations).

Over several processes (a Ray actor per GPU, one process group) the model is sharded with
FSDP2: every rank plans the same passes and runs every world-th of them, and the gradients
sum into the same token mean that one process would take; rank 0 writes the files. Computing
in bfloat16, the sharded model gathers its parameters in bfloat16 and reduces its gradients in
`reduce_dtype` (obsspec.train.precision.fsdp_precision), with no autocast; one process keeps
float32 weights under autocast.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

from obsspec.errors import ConfigError, TrainingError
from obsspec.models.tokenizer import load_tokenizer
from obsspec.rl.config import GRPOSettings
from obsspec.rl.grpo import LossParts, ResponseLogprobs, clipped_policy_loss
from obsspec.train import distributed, sharding
from obsspec.train.activations import checkpoint_activations
from obsspec.train.batches import plan_batches
from obsspec.train.config import TrainSettings
from obsspec.train.core import TrainerCore
from obsspec.train.model import load_model
from obsspec.train.precision import autocast, fsdp_precision, placement


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

        if settings.batch_tokens is None:
            raise ConfigError(
                "grpo.batch_tokens is unset: the policy trainer needs it resolved",
                hint="pass RLConfig.grpo_settings (it follows engine.max_model_len)",
            )
        torch.manual_seed(seed)
        self.settings = settings
        self.batch_tokens: int = settings.batch_tokens
        self.seed = seed
        self.where = placement(TrainSettings(dtype=settings.dtype, device=device))
        self.ranks = distributed.current()
        self.sharded = sharding.sharded()
        self.net = self.load(base, trained=True)
        self.model = self.net.model  # the HF model inside
        self.model.train()
        self.reference = None
        if settings.kl_coef > 0:  # a frozen copy of the initial policy
            self.reference = self.load(base, trained=False).eval().requires_grad_(False)
        self.core = TrainerCore(  # constant lr; FSDP2-sharded state when over ranks
            self.model,
            lr=settings.lr,
            weight_decay=settings.weight_decay,
            max_grad_norm=settings.max_grad_norm,
            root=self.net,
            prefix="model.",
            gradient_name="the policy gradient",
            lr_option="grpo.lr",
            tokenizer_from=base,  # the synced and checkpointed model/ is servable
        )
        self.pad_id = load_tokenizer(base).pad_token_id or 0

    def load(self, base: Path, *, trained: bool) -> ResponseLogprobs:
        net = ResponseLogprobs(load_model(base, self.where, None))
        if trained and self.settings.activation_checkpointing:
            checkpoint_activations(net.model)
        if self.sharded:
            precision = fsdp_precision(self.where, self.settings.reduce_dtype)
            sharding.shard(net, sharding.decoder_layers(net.model), precision)
        return net

    def forward_precision(self):
        """Autocast in one process; nothing when sharded (FSDP2 casts the parameters)."""
        return autocast(self.where, sharded=self.sharded)

    def update(self, episodes: list[PolicyEpisode], step: int) -> dict[str, float]:
        """One RL step's optimizer steps; the step's loss, clip and mismatch figures."""
        start = time.monotonic()
        trained = [up_to_last_response(e) for e in episodes if any(e.mask)]
        if not trained:
            return empty_stats()
        check_lengths(trained, self.batch_tokens)
        old = self.logprobs(self.net, trained)
        reference = self.logprobs(self.reference, trained) if self.reference else None
        parts: list[LossParts] = []
        grad_norms = []
        for chunk in self.minibatches(len(trained), step):
            chunk_parts, norm = self.optimizer_step(trained, chunk, old, reference)
            parts += chunk_parts
            grad_norms.append(norm)
        loss_sum, tokens, clipped, kl_sum = distributed.all_sum(
            [
                sum(float(p.loss_sum.detach()) for p in parts),
                sum(p.tokens for p in parts),
                sum(p.clipped for p in parts),
                sum(p.kl_sum for p in parts),
            ]
        )
        return {
            "policy_loss": loss_sum / max(tokens, 1),
            "clip_fraction": clipped / max(tokens, 1),
            "logprob_mismatch": mismatch(trained, old),
            "kl": kl_sum / max(tokens, 1),
            "grad_norm": max(grad_norms),
            "trained_episodes": len(trained),
            "trained_tokens": int(tokens),
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
        batches = plan_batches(lengths, self.batch_tokens, seed=0, epoch=0)
        return [[chunk[j] for j in batch] for batch in batches]

    def my_passes(self, episodes: list[PolicyEpisode], chunk: list[int]):
        """(rows, counts) of this rank's share of the chunk's passes. Every rank runs as many
        passes (a sharded forward gathers collectively): one short of a share repeats the
        first pass, which does not count."""
        passes = self.passes(episodes, chunk)
        rank, world = self.ranks.rank, self.ranks.world
        mine = [(rows, True) for rows in passes[rank::world]]
        rounds = -(-len(passes) // world)
        return mine + [(passes[0], False)] * (rounds - len(mine))

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

    def logprobs(self, net: ResponseLogprobs, episodes: list[PolicyEpisode]) -> list:
        """Each episode's response-token log-probabilities under `net`, without gradient."""
        import torch

        found = []
        with torch.no_grad(), self.forward_precision():
            for rows, counts in self.my_passes(episodes, list(range(len(episodes)))):
                flat = net(*self.tensors(episodes, rows)).float().cpu()
                sizes = [sum(episodes[i].mask) for i in rows]
                if counts:
                    found += zip(rows, flat.split(sizes), strict=True)
        out: list = [None] * len(episodes)
        for i, values in sharding.gather_objects(found):
            out[i] = values
        return out

    def optimizer_step(self, episodes, chunk: list[int], old: list, reference: list | None):
        import torch

        tokens = sum(sum(episodes[i].mask) for i in chunk)
        parts = []
        # FSDP2 averages the ranks' gradients: scaled by the world, they sum instead
        scale = self.ranks.world / tokens

        def loss_of(passed):
            rows, counts = passed
            with self.forward_precision():
                new = self.net(*self.tensors(episodes, rows)).float()
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
            if counts:
                parts.append(part)
            # the token mean over the whole minibatch; a repeated pass adds nothing
            return part.loss_sum * (scale if counts else 0.0)

        norm = self.core.step(self.my_passes(episodes, chunk), loss_of)
        return parts, norm

    def save_weights(self, out: Path) -> Path:
        """The weights as an HF directory (rank 0 writes it; every rank must call)."""
        return self.core.save_weights(out)

    def save(self, folder: Path) -> None:
        """Weights and optimizer state into a checkpoint's `policy/` folder; the optimizer
        state is keyed by parameter name, so any number of ranks can resume it."""
        self.core.save(folder)

    def restore(self, folder: Path) -> None:
        self.core.load(folder)


def up_to_last_response(episode: PolicyEpisode) -> PolicyEpisode:
    """The episode cut after its last response token: the observation (or anything) after it
    carries no loss, and the model being causal, it changes nothing before it. The cut
    context is at most what the engine generated from, engine.max_model_len tokens."""
    end = max(t for t, m in enumerate(episode.mask) if m) + 1
    if end == len(episode.ids):
        return episode
    return PolicyEpisode(
        episode.ids[:end], episode.mask[:end], episode.engine_logprobs[:end], episode.advantage
    )


def check_lengths(episodes: list[PolicyEpisode], batch_tokens: int) -> None:
    """An episode longer than a forward pass may hold is an error, not an uncapped pass."""
    longest = max(range(len(episodes)), key=lambda i: len(episodes[i].ids))
    length = len(episodes[longest].ids)
    if length > batch_tokens:
        raise TrainingError(
            f"episode {longest} of the step has {length} tokens up to its last response "
            f"token, more than grpo.batch_tokens {batch_tokens} (one forward pass)",
            hint=f"raise grpo.batch_tokens to at least {length}; RLConfig refuses a value "
            "below engine.max_model_len, which bounds every episode the engine generated",
        )


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
