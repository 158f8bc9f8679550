"""The pipeline configs' GPU settings reach each engine's settings (no engine started)."""

import pytest

from obsspec.errors import ConfigError
from obsspec.inference.vllm_settings import engine_kwargs
from obsspec.rollout.config import RolloutSettings
from obsspec.rollout.engines import engine_settings


def gpu_settings(**engine) -> RolloutSettings:
    return RolloutSettings.model_validate(
        {
            "engine": {"gpu_memory_utilization": 0.5, "tensor_parallel_size": 2, **engine},
            "speculation": {
                "enabled": True,
                "world_model": "wm",
                "wm_gpu_memory_utilization": 0.3,
                "wm_tensor_parallel_size": 1,
            },
        }
    )


def test_each_engine_gets_its_own_gpu_share_and_parallelism(tmp_path):
    settings = gpu_settings(enforce_eager=True, allow_untested_vllm=True)
    policy = engine_settings(tmp_path, settings, role="policy")
    wm = engine_settings(tmp_path, settings, role="world_model")
    assert (policy.gpu_memory_utilization, policy.tensor_parallel_size) == (0.5, 2)
    assert (wm.gpu_memory_utilization, wm.tensor_parallel_size) == (0.3, 1)
    assert policy.enforce_eager is wm.enforce_eager is True
    assert policy.allow_untested_vllm and wm.allow_untested_vllm
    assert engine_kwargs(wm, "cuda")["gpu_memory_utilization"] == 0.3


def test_two_engines_may_not_take_the_whole_gpu():
    with pytest.raises(
        ValueError, match=r"engine.gpu_memory_utilization 0.7 and speculation.wm_gpu_memory"
    ):
        gpu_settings(gpu_memory_utilization=0.7)
    # a policy served elsewhere leaves the world model's engine alone on the GPU
    gpu_settings(gpu_memory_utilization=0.7, server="http://127.0.0.1:8000")


def test_kv_caches_default_to_their_cpu_sizes_and_to_the_share_on_gpu(tmp_path):
    settings = gpu_settings()
    cpu_policy = engine_settings(tmp_path, settings, role="policy", platform="cpu")
    cpu_wm = engine_settings(tmp_path, settings, role="world_model", platform="cpu")
    assert engine_kwargs(cpu_policy, "cpu")["kv_cache_memory_bytes"] == 1 << 30
    assert engine_kwargs(cpu_wm, "cpu")["kv_cache_memory_bytes"] == 1 << 29
    for role in ("policy", "world_model"):
        gpu = engine_kwargs(engine_settings(tmp_path, settings, role=role, platform="cuda"), "cuda")
        assert "kv_cache_memory_bytes" not in gpu  # what the share leaves, not 1 GiB


def test_two_engines_on_a_gpu_must_each_say_their_share(tmp_path):
    shares_unset = RolloutSettings.model_validate(
        {"speculation": {"enabled": True, "world_model": "wm"}}
    )
    shares = r"engine\.gpu_memory_utilization and speculation\.wm_gpu_memory_utilization"
    with pytest.raises(ConfigError, match=shares):
        engine_settings(tmp_path, shares_unset, role="policy", platform="cuda")
    engine_settings(tmp_path, shares_unset, role="policy", platform="cpu")  # no GPU: no share
    alone = RolloutSettings()  # no world model: the policy's engine has the GPU to itself
    engine_settings(tmp_path, alone, role="policy", platform="cuda")


def test_only_the_world_models_engine_drafts_by_prompt_lookup(tmp_path):
    settings = gpu_settings()
    policy = engine_kwargs(
        engine_settings(tmp_path, settings, role="policy", platform="cpu"), "cpu"
    )
    wm = engine_kwargs(
        engine_settings(tmp_path, settings, role="world_model", platform="cpu"), "cpu"
    )
    assert "speculative_config" not in policy  # its sampled replies are the data: untouched
    assert wm["speculative_config"]["method"] == "ngram"
    assert wm["speculative_config"]["num_speculative_tokens"] == 5
    off = settings.model_copy(
        update={"speculation": settings.speculation.model_copy(update={"wm_draft_tokens": 0})}
    )
    wm_off = engine_settings(tmp_path, off, role="world_model", platform="cpu")
    assert "speculative_config" not in engine_kwargs(wm_off, "cpu")
