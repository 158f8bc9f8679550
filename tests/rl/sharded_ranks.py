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
