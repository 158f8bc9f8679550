"""Engine arguments per platform, the vLLM version check, and weight buckets' checks and
packing: pure logic, no engine (a GPU engine's arguments are checked without a GPU)."""

import json
import re

import pytest
import torch
from safetensors.torch import save_file

from obsspec.errors import EngineError
from obsspec.inference.vllm_settings import GIB, EngineSettings, engine_kwargs
from obsspec.inference.weight_loading import (
    SUPPORTED_VLLM,
    CheckpointNames,
    check_vllm_version,
    pack_bucket,
    unpack_bucket,
)


def test_cpu_arguments_size_the_cache_and_run_eagerly(tmp_path):
    settings = EngineSettings(model=tmp_path, gpu_memory_utilization=0.5)
    cpu = engine_kwargs(settings, "cpu")
    assert cpu["kv_cache_memory_bytes"] == GIB  # 1 GiB unless set
    assert cpu["enforce_eager"] is True
    assert cpu["enable_chunked_prefill"] is False
    assert "gpu_memory_utilization" not in cpu  # the CPU cache is sized by kv_cache_gb
    sized = engine_kwargs(settings.model_copy(update={"kv_cache_gb": 0.25}), "cpu")
    assert sized["kv_cache_memory_bytes"] == GIB // 4


def test_gpu_arguments_follow_utilization_or_an_explicit_cache(tmp_path):
    shared = EngineSettings(model=tmp_path, gpu_memory_utilization=0.45, tensor_parallel_size=2)
    gpu = engine_kwargs(shared, "cuda")
    assert gpu["gpu_memory_utilization"] == 0.45
    assert gpu["tensor_parallel_size"] == 2
    assert gpu["distributed_executor_backend"] == "mp"  # in the actor's own GPUs, not Ray's
    assert "kv_cache_memory_bytes" not in gpu  # the cache is what the share leaves
    assert gpu["enforce_eager"] is False  # CUDA graphs
    assert "enable_chunked_prefill" not in gpu
    fixed = engine_kwargs(shared.model_copy(update={"kv_cache_gb": 2.0}), "cuda")
    assert fixed["kv_cache_memory_bytes"] == 2 * GIB
    assert fixed["gpu_memory_utilization"] == 0.45  # still the start-up free-memory check
    default = engine_kwargs(EngineSettings(model=tmp_path), "cuda")
    assert "gpu_memory_utilization" not in default and "kv_cache_memory_bytes" not in default
    assert "distributed_executor_backend" not in default  # one GPU: vLLM's own choice
    eager = engine_kwargs(EngineSettings(model=tmp_path, enforce_eager=True), "cuda")
    assert eager["enforce_eager"] is True


def test_prefix_caching_is_on_for_every_engine(tmp_path):
    """Turns' prompts extend each other: every engine reuses the prefix it computed."""
    settings = EngineSettings(model=tmp_path)
    for platform in ("cpu", "cuda"):
        kwargs = engine_kwargs(settings, platform)
        assert kwargs["enable_prefix_caching"] is True


def test_utilization_must_be_a_share(tmp_path):
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        EngineSettings(model=tmp_path, gpu_memory_utilization=1.0)


def test_version_check_refuses_an_unknown_vllm():
    check_vllm_version("0.32.0")
    check_vllm_version("0.32.3+cpu")
    with pytest.raises(EngineError, match=r"vLLM 0\.11\.0 is installed.*>=0\.32,<0\.33") as e:
        check_vllm_version("0.11.0")
    assert "allow_untested_vllm" in e.value.hint
    with pytest.raises(EngineError, match=re.escape("0.33.1")):
        check_vllm_version("0.33.1")
    with pytest.raises(EngineError, match="not-a-version"):
        check_vllm_version("not-a-version")
    check_vllm_version("0.33.1", allow_untested=True)
    assert SUPPORTED_VLLM == ">=0.32,<0.33"


@pytest.fixture
def checkpoint(tmp_path):
    save_file(
        {"model.embed_tokens.weight": torch.zeros(8, 4), "model.norm.weight": torch.ones(4)},
        tmp_path / "model.safetensors",
    )
    (tmp_path / "config.json").write_text(json.dumps({"tie_word_embeddings": True}))
    return tmp_path


def test_buckets_are_checked_against_the_checkpoint(checkpoint):
    names = CheckpointNames.of(checkpoint)
    names.check([("model.norm.weight", torch.ones(4, dtype=torch.bfloat16))])
    names.check([("lm_head.weight", torch.zeros(8, 4))])  # tied: a trainer's state_dict has it
    with pytest.raises(EngineError, match=re.escape("'model.layers.0.nope.weight' is not in")):
        names.check([("model.norm.weight", torch.ones(4)), ("model.layers.0.nope.weight", None)])
    with pytest.raises(EngineError, match=r"'model.norm.weight' has shape \(5,\).*\(4,\)"):
        names.check([("model.norm.weight", torch.ones(5))])
    with pytest.raises(EngineError, match=re.escape("'model.norm.weight' is torch.int64")):
        names.check([("model.norm.weight", torch.ones(4, dtype=torch.long))])


def test_a_directory_without_safetensors_is_refused(tmp_path):
    with pytest.raises(EngineError, match=re.escape("no .safetensors")):
        CheckpointNames.of(tmp_path)


def test_packed_buckets_come_back_bit_for_bit():
    bucket = [
        ("a", torch.randn(3, 5, dtype=torch.bfloat16)),
        ("b", torch.randn(7).to(torch.float16)),
        ("c", torch.randn(2, 2)[:, 0]),  # not contiguous
    ]
    packed = pack_bucket(bucket)
    assert all(isinstance(raw, bytes) for *_, raw in packed)  # what msgpack carries intact
    for (name, tensor), (back_name, back) in zip(bucket, unpack_bucket(packed), strict=True):
        assert back_name == name and back.dtype == tensor.dtype
        assert torch.equal(back, tensor)
