"""One rank of a sharded policy trainer, run by tests/rl/test_policy_trainer.py in its own
process (torch.multiprocessing.spawn imports this module there)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from obsspec.rl.config import GRPOSettings
from obsspec.rl.policy_trainer import PolicyEpisode

SETTINGS = GRPOSettings(lr=1e-3, minibatches=2, batch_tokens=128, dtype="float32")


def fixed_episodes(vocab: int, n: int = 7, seed: int = 0) -> list[PolicyEpisode]:
    """Episodes of different lengths (several forward passes each step), a response span in
    the middle of each, engine logprobs on some of its tokens, advantages of both signs."""
    rng = random.Random(seed)
    episodes = []
    for i in range(n):
        length = rng.randrange(30, 110)
        start, end = length // 3, length - 5
        mask = [int(start <= t < end) for t in range(length)]
        episodes.append(
            PolicyEpisode(
                ids=[rng.randrange(3, vocab) for _ in range(length)],
                mask=mask,
                engine_logprobs=[-rng.random() * 5 if m else None for m in mask],
                advantage=[1.0, -1.0, 0.5][i % 3],
            )
        )
    return episodes


def rank_main(rank: int, world: int, model: str, out: str, vocab: int) -> None:
    """Two updates with a checkpoint between them; rank 0 writes weights and figures."""
    import torch.distributed as dist

    from obsspec.rl.policy_trainer import PolicyTrainer

    root = Path(out)
    dist.init_process_group(
        "gloo", init_method=f"file://{root / 'rendezvous'}", rank=rank, world_size=world
    )
    try:
        trainer = PolicyTrainer(Path(model), SETTINGS, seed=0, device="cpu")
        trainer.core.serve_dtype = "float32"  # the saved weights are compared exactly
        episodes = fixed_episodes(vocab)
        first = trainer.update(episodes, 0)
        trainer.save_weights(root / "after-1")
        trainer.save(root / "checkpoint")
        second = trainer.update(episodes, 1)
        trainer.save_weights(root / "after-2")
        if rank == 0:
            (root / "stats.json").write_text(json.dumps([first, second]))
    finally:
        dist.destroy_process_group()


# What precision_rank_main runs, in order, on two_long_episodes: float32 with and without
# activation checkpointing (the gradients must agree), then bfloat16 reducing the gradients in
# either dtype. One minibatch and a max_grad_norm no gradient reaches: the gradients after the
# step are exactly what the ranks' reduction left in the shards.
EXACT = SETTINGS.model_copy(update={"max_grad_norm": 1e9, "minibatches": 1})
PRECISION_RUNS = {
    "float32": EXACT,
    "float32-recompute": EXACT.model_copy(update={"activation_checkpointing": True}),
    "bfloat16-reduce-float32": EXACT.model_copy(update={"dtype": "bfloat16"}),
    "bfloat16-reduce-bfloat16": EXACT.model_copy(
        update={"dtype": "bfloat16", "reduce_dtype": "bfloat16"}
    ),
}


def two_long_episodes(vocab: int) -> list[PolicyEpisode]:
    """Two episodes too long to share a pass of SETTINGS.batch_tokens: one pass per rank, so
    every sharded gradient is one reduction of the two ranks' gradients."""
    rng = random.Random(3)
    mask = [0] * 10 + [1] * 90
    return [
        PolicyEpisode(
            ids=[rng.randrange(3, vocab) for _ in mask],
            mask=mask,
            engine_logprobs=[-rng.random() * 5 if m else None for m in mask],
            advantage=advantage,
        )
        for advantage in (1.0, -0.5)
    ]


def precision_rank_main(rank: int, world: int, model: str, out: str, vocab: int) -> None:
    """One step of each of PRECISION_RUNS from the same start; rank 0 writes what each saw
    (precision.json): see `what_a_step_did`."""
    import torch.distributed as dist

    root = Path(out)
    dist.init_process_group(
        "gloo", init_method=f"file://{root / 'rendezvous'}", rank=rank, world_size=world
    )
    try:
        seen, plain = {}, []
        for name, settings in PRECISION_RUNS.items():
            seen[name], gradients = what_a_step_did(Path(model), settings, vocab, plain)
            plain = plain or gradients
        if rank == 0:
            (root / "precision.json").write_text(json.dumps(seen))
    finally:
        dist.destroy_process_group()


def what_a_step_did(model: Path, settings: GRPOSettings, vocab: int, plain: list):
    """A fresh trainer's step on two_long_episodes: its figures; the first decoder layer's
    forward calls (counted as they start: a recomputation stops once it has what the backward
    needs) and the training passes this rank ran; the dtype the layers computed in; the dtypes
    of the shards and of the optimizer state; whether every reduced gradient is a bfloat16
    value; and how this rank's gradient shards compare with `plain` (the first run's, when
    given): the largest difference, relative to the largest plain gradient, and the cosine.
    Returns that, and this rank's gradient shards."""
    import torch

    from obsspec.rl.policy_trainer import PolicyTrainer
    from obsspec.train import sharding

    episodes = two_long_episodes(vocab)
    trainer = PolicyTrainer(model, settings, seed=0, device="cpu")
    layer = sharding.decoder_layers(trainer.model)[0]
    calls, computed = [0], set()
    layer.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    layer.mlp.register_forward_pre_hook(
        lambda mlp, _: computed.add(str(mlp.down_proj.weight.dtype))
    )
    figures = trainer.update(episodes, 0)
    params = list(trainer.model.parameters())
    gradients = [p.grad.to_local().flatten() for p in params]
    seen = {
        "figures": figures,
        "layer_calls": calls[0],
        "training_passes": len(trainer.my_passes(episodes, list(range(len(episodes))))),
        "computed_in": sorted(computed),
        "shards": sorted({str(p.to_local().dtype) for p in params}),
        "optimizer": sorted(
            {str(s["exp_avg"].to_local().dtype) for s in trainer.core.optimizer.state.values()}
        ),
        "gradients_bf16_exact": all(torch.equal(g, g.bfloat16().float()) for g in gradients),
    }
    if plain:
        mine, theirs = torch.cat(gradients), torch.cat(plain)
        seen["gradient_gap"] = float((mine - theirs).abs().max() / theirs.abs().max())
        seen["gradient_cosine"] = float(torch.nn.functional.cosine_similarity(mine, theirs, 0))
    return seen, gradients
