"""Data parallel on CPU (gloo): two ranks learn exactly what one process accumulating both
ranks' batches learns."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from obsspec.train.config import TrainSettings
from obsspec.train.loop import train
from obsspec.train.sequences import Sample, pack

# 64 tokens: two sequences a batch, four batches an epoch, two steps of two batches
SETTINGS = {"lr": 3e-3, "warmup_steps": 0, "batch_tokens": 64, "max_len": 64}


def sequences(tokenizer_dir: str):
    from transformers import AutoTokenizer

    from obsspec.agent.context import ChatContextBuilder

    builder = ChatContextBuilder(AutoTokenizer.from_pretrained(tokenizer_dir))
    samples = [
        Sample(builder.prompt_ids("You echo.", f"say {w}"), [*builder.encode(f"{w} {w}"), 2])
        for w in ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")
    ]
    return pack(samples, 64).sequences


def rank_main(rank: int, port: int, model: str, out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    losses: list[float] = []
    settings = TrainSettings(**SETTINGS, epochs=2, dtype="float32", device="cpu")
    train(
        Path(model), sequences(model), settings, Path(out), progress=lambda p: losses.append(p.loss)
    )
    if rank == 0:
        Path(out, "losses.json").write_text(json.dumps(losses))
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_ranks_match_one_process_with_double_accumulation(tiny_model_dir, tmp_path):
    out = tmp_path / "ddp"
    mp.spawn(rank_main, args=(free_port(), str(tiny_model_dir), str(out)), nprocs=2, join=True)
    ddp_losses = json.loads((out / "losses.json").read_text())

    single: list[float] = []
    settings = TrainSettings(**SETTINGS, epochs=2, grad_accum=2, dtype="float32", device="cpu")
    train(
        tiny_model_dir,
        sequences(str(tiny_model_dir)),
        settings,
        tmp_path / "one",
        progress=lambda p: single.append(p.loss),
    )
    assert len(ddp_losses) == len(single) == 4
    assert ddp_losses == pytest.approx(single, rel=1e-4)
    assert (out / "model.safetensors").is_file()  # rank 0 saved the model
