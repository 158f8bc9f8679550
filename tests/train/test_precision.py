"""Precision: autocast in one process, FSDP2's mixed precision (and no autocast) when sharded.
The sharded path itself runs in tests/rl/test_policy_trainer.py (two gloo ranks)."""

import torch

from obsspec.train.precision import Placement, autocast, fsdp_precision


def test_one_process_autocasts_and_a_sharded_model_leaves_the_casting_to_fsdp2():
    layer = torch.nn.Linear(8, 8)
    x = torch.randn(2, 8)
    bf16 = Placement("cpu", "bfloat16")
    with autocast(bf16):
        assert layer(x).dtype == torch.bfloat16
    with autocast(bf16, sharded=True):
        assert layer(x).dtype == torch.float32  # FSDP2 gathers bfloat16 copies instead
    with autocast(Placement("cpu", "float32")):
        assert layer(x).dtype == torch.float32


def test_fsdp2_gathers_in_the_compute_dtype_and_reduces_in_reduce_dtype():
    policy = fsdp_precision(Placement("cpu", "bfloat16"), "float32")
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)
    policy = fsdp_precision(Placement("cpu", "bfloat16"), "bfloat16")
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.bfloat16)
    # computing in float32, the parameters are gathered as stored
    policy = fsdp_precision(Placement("cpu", "float32"), "float32")
    assert (policy.param_dtype, policy.reduce_dtype) == (None, torch.float32)
