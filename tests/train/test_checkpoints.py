"""Checkpoints of the trainer core on the tiny model: model/ is a bfloat16 HF directory with
the tokenizer that transformers (and vLLM: test_checkpoints_vllm.py) load as is; state/ is
sharded (DCP) and resumes on another number of ranks; checkpoints from before state/ still
resume; LoRA checkpoints stay adapters."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from obsspec.errors import ConfigError
from obsspec.models.registry import check_hf_dir
from obsspec.train import sharding
from obsspec.train.checkpoint import save_hf_weights
from obsspec.train.config import LoraSettings
from obsspec.train.core import TrainerCore, warmup_cosine
from obsspec.train.model import load_model
from obsspec.train.precision import Placement


def new_core(model_dir: Path, *, root: bool = True, lora: LoraSettings | None = None):
    """A trainer core on the tiny model (FSDP2-sharded when in a process group of 2)."""
    torch.manual_seed(0)
    model = load_model(model_dir, Placement("cpu", "float32"), lora)
    if sharding.sharded():
        sharding.shard(model, sharding.decoder_layers(model))
    return TrainerCore(
        model,
        lr=1e-2,
        weight_decay=0.01,
        max_grad_norm=1.0,
        schedule=warmup_cosine(1, 0.1, 10),
        root=model if root else None,
        tokenizer_from=model_dir,
    )


def step(core: TrainerCore, seed: int) -> None:
    ids = torch.randint(3, 1000, (2, 12), generator=torch.Generator().manual_seed(seed))
    # the model's own forward: the FSDP2 root's hooks gather its parameters
    core.step([ids], lambda batch: core.model(input_ids=batch, labels=batch).loss)


def full_state(core: TrainerCore) -> dict:
    """Weights and optimizer state, whole and keyed by name (on rank 0; collective); a copy:
    the step counts are the optimizer's own tensors, which the next step increments."""
    return copy.deepcopy(
        {
            "model": sharding.full_model_state(core.module),
            "optimizer": sharding.full_optimizer_state(core.module, core.optimizer),
            "steps": core.steps,
            "lr": core.lr,
        }
    )


def assert_same_state(a: dict, b: dict) -> None:
    assert a["steps"] == b["steps"] and a["lr"] == b["lr"]
    assert a["model"].keys() == b["model"].keys()
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    moments = a["optimizer"]["state"]
    assert moments.keys() == b["optimizer"]["state"].keys() and moments
    for name, values in moments.items():
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(values[key], b["optimizer"]["state"][name][key]), (name, key)
    groups = [{**g, "betas": tuple(g["betas"])} for g in a["optimizer"]["param_groups"]]
    assert groups == [{**g, "betas": tuple(g["betas"])} for g in b["optimizer"]["param_groups"]]


def test_a_checkpoints_model_is_a_bfloat16_hf_directory_with_the_tokenizer(
    tiny_model_dir, tmp_path
):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    core = new_core(tiny_model_dir)
    step(core, 0)
    core.save(tmp_path / "checkpoint")
    sync = core.save_weights(tmp_path / "sync")
    base_template = AutoTokenizer.from_pretrained(tiny_model_dir).chat_template
    for folder in (tmp_path / "checkpoint" / "model", sync):
        check_hf_dir(folder)
        assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"
        served = AutoModelForCausalLM.from_pretrained(folder, dtype="auto")
        assert served.dtype == torch.bfloat16
        for name, tensor in served.state_dict().items():
            assert torch.equal(tensor, core.model.state_dict()[name].bfloat16()), name
        tokenizer = AutoTokenizer.from_pretrained(folder)
        assert tokenizer.chat_template == base_template and base_template
        chat = [{"role": "user", "content": "ls"}]
        assert tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    small = torch.load(tmp_path / "checkpoint" / "trainer.pt", weights_only=False)
    assert "optimizer" not in small and small["step"] == 1  # the optimizer is in state/


def rank_main(rank: int, world: int, model_dir: str, root: str) -> None:
    """Resume the one-process checkpoint `one`, take a step, save `two` (sharded)."""
    import torch.distributed as dist

    folder = Path(root)
    dist.init_process_group(
        "gloo", init_method=f"file://{folder / 'rendezvous'}", rank=rank, world_size=world
    )
    try:
        core = new_core(Path(model_dir))
        core.load(folder / "one")
        resumed = full_state(core)
        step(core, 2)
        core.save(folder / "two")
        saved = full_state(core)
        if rank == 0:
            torch.save({"resumed": resumed, "saved": saved}, folder / "states.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two spawned ranks
def test_a_checkpoint_resumes_on_another_number_of_ranks(tiny_model_dir, tmp_path):
    one = new_core(tiny_model_dir)
    step(one, 0)
    step(one, 1)
    one.save(tmp_path / "one")
    torch.multiprocessing.spawn(rank_main, args=(2, str(tiny_model_dir), str(tmp_path)), nprocs=2)
    states = torch.load(tmp_path / "states.pt", weights_only=False)
    assert_same_state(states["resumed"], full_state(one))  # 1 -> 2

    assert sorted(p.name for p in (tmp_path / "two" / "state").glob("*.distcp")) == [
        "__0_0.distcp",
        "__1_0.distcp",
    ]  # each rank wrote its own shards
    again = new_core(tiny_model_dir)
    again.load(tmp_path / "two")
    assert_same_state(full_state(again), states["saved"])  # 2 -> 1
    assert states["saved"]["steps"] == 3


def write_old_checkpoint(core: TrainerCore, folder: Path, by_name: bool) -> None:
    """A checkpoint as the core wrote them before state/: whole float32 weights in model/,
    the optimizer in trainer.pt (by name when FSDP2 gathered it, else torch's own)."""
    import random

    save_hf_weights(core.model, folder / "model", dtype="float32")
    optimizer = core.optimizer.state_dict()
    if by_name:
        optimizer = sharding.full_optimizer_state(core.module, core.optimizer)
    old = {
        "step": core.steps,
        "optimizer": optimizer,
        "schedule": core.schedule.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
        "identity": {"kept": True},
    }
    torch.save(old, folder / "trainer.pt")


@pytest.mark.parametrize("by_name", [False, True], ids=["by-position", "by-name"])
def test_a_checkpoint_from_before_sharded_state_still_resumes(tiny_model_dir, tmp_path, by_name):
    old = new_core(tiny_model_dir, root=by_name)
    step(old, 0)
    write_old_checkpoint(old, tmp_path / "old", by_name)
    resumed = new_core(tiny_model_dir, root=by_name)
    assert resumed.load(tmp_path / "old")["identity"] == {"kept": True}
    assert_same_state(full_state(resumed), full_state(old))
    step(old, 1)
    step(resumed, 1)
    assert_same_state(full_state(resumed), full_state(old))


def test_a_lora_checkpoint_keeps_the_adapter_and_only_the_trained_state(tiny_model_dir, tmp_path):
    lora = LoraSettings(rank=4)
    core = new_core(tiny_model_dir, root=False, lora=lora)
    step(core, 0)
    core.save(tmp_path / "lora")
    model_files = {p.name for p in (tmp_path / "lora" / "model").iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= model_files
    state_bytes = sum(p.stat().st_size for p in (tmp_path / "lora" / "state").iterdir())
    base_bytes = (tiny_model_dir / "model.safetensors").stat().st_size
    assert state_bytes < base_bytes / 10  # the frozen base is not saved again

    resumed = new_core(tiny_model_dir, root=False, lora=lora)
    resumed.load(tmp_path / "lora")
    assert_same_state(full_state(resumed), full_state(core))
    full = new_core(tiny_model_dir)
    with pytest.raises(ConfigError, match="does not match the model being trained"):
        full.load(tmp_path / "lora")  # a full model's state is not in an adapter's
