"""Distillation under data parallel (gloo, CPU): the frozen teacher beside each rank's DDP
student, two ranks learning what one process accumulating both ranks' batches learns."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from obsspec.train.config import TrainSettings
from obsspec.train.distill import Distillation
from obsspec.train.loop import train
from tests.train.test_distributed import SETTINGS, free_port, sequences


def distilled_train(model: str, teacher: str, out: Path, **settings) -> list[float]:
    losses: list[float] = []
    train(
        Path(model),
        sequences(model),
        TrainSettings(**SETTINGS, epochs=2, dtype="float32", device="cpu", **settings),
        out,
        progress=lambda p: losses.append(p.loss),
        distill=Distillation(Path(teacher), alpha=0.5, temperature=2.0),
    )
    return losses


def rank_main(rank: int, port: int, model: str, teacher: str, out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    losses = distilled_train(model, teacher, Path(out))
    if rank == 0:
        Path(out, "losses.json").write_text(json.dumps(losses))
    dist.destroy_process_group()


@pytest.mark.slow
def test_two_distilling_ranks_match_one_process(tiny_model_dir, deep_tiny_model_dir, tmp_path):
    model, teacher, out = str(tiny_model_dir), str(deep_tiny_model_dir), tmp_path / "ddp"
    mp.spawn(rank_main, args=(free_port(), model, teacher, str(out)), nprocs=2, join=True)
    ddp_losses = json.loads((out / "losses.json").read_text())
    single = distilled_train(model, teacher, tmp_path / "one", grad_accum=2)
    assert len(ddp_losses) == len(single) == 4
    assert ddp_losses == pytest.approx(single, rel=1e-4)
    assert (out / "model.safetensors").is_file()  # rank 0 saved the student, not the teacher
