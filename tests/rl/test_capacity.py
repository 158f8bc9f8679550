"""The memory planner of a GPU placement: shapes, parameter counts, per-GPU fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from obsspec.errors import ConfigError
from obsspec.rl.capacity import SHAPES, ModelShape, plan_memory, trainer_memory
from obsspec.rl.config import RLConfig, load_rl_config

EXAMPLE = Path(__file__).parents[2] / "examples" / "rl_gpu.toml"


def test_parameter_counts_match_the_published_models():
    # Qwen3-8B: 8.19B parameters; Qwen3-0.6B: 0.60B (tied embeddings); Qwen3-32B: 32.8B
    assert SHAPES["qwen3-8b"].params == pytest.approx(8.19e9, rel=0.01)
    assert SHAPES["qwen3-0.6b"].params == pytest.approx(0.596e9, rel=0.01)
    assert SHAPES["qwen3-32b"].params == pytest.approx(32.8e9, rel=0.01)


def test_a_shape_reads_an_hf_config_and_matches_the_model_built_from_it(tmp_path):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = ModelShape(64, 2, 128, 4, 2, 16, 1000, tied=True)
    (tmp_path / "config.json").write_text(json.dumps(shape.hf_config()))
    assert ModelShape.of(str(tmp_path)) == shape
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tmp_path))
    assert shape.params == sum(p.numel() for p in model.parameters())


def test_an_unknown_shape_is_refused_by_name():
    with pytest.raises(ConfigError, match="qwen3-9b: neither a known shape"):
        ModelShape.of("qwen3-9b")


def test_kv_bytes_per_token_of_qwen3_8b():
    # 36 layers x (K and V) x 8 heads x 128 dims x 2 bytes
    assert SHAPES["qwen3-8b"].kv_bytes_per_token() == 36 * 2 * 8 * 128 * 2


def test_activation_checkpointing_shrinks_the_estimate():
    shape = SHAPES["qwen3-8b"]
    assert shape.activation_bytes_per_token(True) < shape.activation_bytes_per_token(False) / 10


def gpu_config(**placement) -> RLConfig:
    return RLConfig.model_validate(
        {
            "tasks": "t",
            "out": "o",
            "engine": {"kv_cache_gb": 20},
            "speculation": {"wm_kv_cache_gb": 4},
            "placement": {"rollout_workers": 2, "rollout_gpus": 1, **placement},
        }
    )


def test_every_gpu_of_the_placement_is_planned_in_order():
    plan = plan_memory(
        gpu_config(trainer_gpus=2, wm_trainer_gpus=1),
        SHAPES["qwen3-8b"],
        SHAPES["qwen3-0.6b"],
        gpu_gib=80,
    )
    roles = [[r.role for r in g.roles] for g in plan.gpus]
    assert roles == [
        ["rollout-0 policy engine", "rollout-0 world-model engine"],
        ["rollout-1 policy engine", "rollout-1 world-model engine"],
        ["policy trainer rank 0/2"],
        ["policy trainer rank 1/2"],
        ["world-model co-trainer"],
    ]
    engine = plan.gpus[0].roles[0].parts
    assert engine["kv_cache"] == 20 * (1 << 30)
    assert engine["weights_bf16"] == SHAPES["qwen3-8b"].params * 2


def test_one_gpu_cannot_train_an_8b_policy_and_the_plan_says_so():
    plan = plan_memory(
        gpu_config(trainer_gpus=1), SHAPES["qwen3-8b"], SHAPES["qwen3-0.6b"], gpu_gib=80
    )
    trainer = plan.gpus[-1]
    assert trainer.roles[0].parts["master_grads_adam_fp32"] == SHAPES["qwen3-8b"].params * 16
    assert not trainer.fits and not plan.fits
    assert plan.as_dict()["gpus"][-1]["fits"] is False


def test_a_cpu_placement_plans_no_gpu():
    plan = plan_memory(
        RLConfig.model_validate({"tasks": "t", "out": "o"}),
        SHAPES["qwen3-8b"],
        SHAPES["qwen3-0.6b"],
        gpu_gib=80,
    )
    assert plan.gpus == [] and plan.fits


def test_the_gpu_example_fits_eight_80_gib_gpus():
    config = load_rl_config(EXAMPLE, {"tasks": "t", "out": "o"})
    plan = plan_memory(config, SHAPES["qwen3-8b"], SHAPES["qwen3-0.6b"], gpu_gib=80)
    assert len(plan.gpus) == 8
    assert plan.fits, json.dumps(plan.as_dict(), indent=1)


def test_a_gpu_share_leaves_its_cache_what_the_weights_do_not_take():
    config = RLConfig.model_validate(
        {
            "tasks": "t",
            "out": "o",
            "engine": {"gpu_memory_utilization": 0.5},
            # 0.8 GiB: less than its weights
            "speculation": {"wm_gpu_memory_utilization": 0.01},
            "placement": {"rollout_workers": 1, "rollout_gpus": 1},
        }
    )
    plan = plan_memory(config, SHAPES["qwen3-8b"], SHAPES["qwen3-0.6b"], gpu_gib=80)
    policy = plan.gpus[0].roles[0].parts
    assert policy["weights_bf16"] + policy["kv_cache"] + policy["runtime_reserve"] == 40 * (1 << 30)
    assert any("policy engine KV cache" in note for note in plan.notes)
    assert "world-model engine: its GPU share leaves no room for a KV cache" in plan.notes


def test_a_trainer_rank_counts_the_reduce_buffers_and_the_optimizer_steps_temporaries():
    """FSDP2's reduce buffers only with several ranks; foreach AdamW's float32 temporaries
    only as far as they exceed what the forward and backward passes freed."""
    shape = SHAPES["qwen3-8b"]
    one = trainer_memory("t", shape, ranks=1, batch_tokens=512, checkpointing=True).parts
    three = trainer_memory("t", shape, ranks=3, batch_tokens=32768, checkpointing=True).parts
    assert one["reduce_buffers"] == 0 and three["reduce_buffers"] == 2 * shape.layer_params * 4
    passes = ("gathered_bf16", "activations", "logits", "reduce_buffers")
    # a short pass frees less than the step's temporaries (a float32 copy of the weights)
    assert one["optimizer_step_extra"] == shape.params * 4 - sum(one[p] for p in passes)
    assert three["optimizer_step_extra"] == 0  # a 32k pass frees more than 1/3 of a copy
    # the logits: bfloat16 out of the output layer, float32 copy, log-softmax, gradient
    assert three["logits"] == 4096 * shape.vocab * (2 + 3 * 4)
