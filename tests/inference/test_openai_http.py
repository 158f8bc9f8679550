"""A real `vllm serve` (OpenAI-compatible) on loopback with the tiny model."""

import asyncio
from pathlib import Path

import pytest

from obsspec.errors import ConfigError, ContextLengthError, EngineError
from obsspec.inference.base import Sampling
from obsspec.inference.openai_http import OpenAIEngine
from obsspec.rollout.config import RolloutSettings
from obsspec.rollout.engines import require_priority_scheduling
from tests.helpers import chat_ids

FIXTURE_TASK = Path(__file__).parents[1] / "fixtures" / "tasks" / "harbor-greeting"

pytestmark = pytest.mark.vllm


async def test_token_ids_and_logprobs_match_the_in_process_engine(
    vllm_server, tiny_engine, tiny_model_dir
):
    prompt = chat_ids(tiny_model_dir, "ls /tmp")
    async with OpenAIEngine(vllm_server, "tiny") as remote:
        far = await remote.generate(prompt, Sampling(max_tokens=10), priority=1)
    near = await tiny_engine.generate(prompt, Sampling(max_tokens=10))
    assert far.token_ids == near.token_ids  # greedy, same weights, same exact prompt
    assert far.logprobs == pytest.approx(near.logprobs, abs=1e-3)
    assert far.finish_reason in ("stop", "length")


async def test_errors_are_typed(vllm_server, tiny_model_dir):
    with pytest.raises(EngineError, match="serves"):
        async with OpenAIEngine(vllm_server, "no-such-model"):
            pass
    with pytest.raises(EngineError, match="no OpenAI-compatible server"):
        async with OpenAIEngine("http://127.0.0.1:9", "tiny"):
            pass
    async with OpenAIEngine(vllm_server, "tiny") as remote:
        with pytest.raises(ContextLengthError):
            await remote.generate([1] * 1100, Sampling(max_tokens=4))


async def test_load_is_polled_and_cancel_frees_the_server(vllm_server, tiny_model_dir):
    prompt = chat_ids(tiny_model_dir, "top")
    async with OpenAIEngine(vllm_server, "tiny", poll_s=0.2) as remote:
        tasks = [
            asyncio.create_task(
                remote.generate(prompt, Sampling(max_tokens=600, temperature=1.0, seed=i))
            )
            for i in range(4)
        ]
        seen = 0
        for _ in range(100):
            await asyncio.sleep(0.1)
            seen = max(seen, remote.stats().running + remote.stats().waiting)
            if seen >= 4:
                break
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert seen >= 4
        for _ in range(50):  # aborted on disconnect: the server drains
            await asyncio.sleep(0.2)
            if remote.stats().running + remote.stats().waiting == 0:
                break
        assert remote.stats().running + remote.stats().waiting == 0


@pytest.fixture(scope="module")
def fcfs_server(tiny_model_dir, tmp_path_factory):
    """A second real server, under vLLM's default first-come-first-served scheduling."""
    from tests.conftest import serve_tiny

    with serve_tiny(tiny_model_dir, tmp_path_factory.mktemp("fcfs") / "vllm.log") as url:
        yield url


def speculating_through(server: str, *, check: bool = True) -> RolloutSettings:
    return RolloutSettings.model_validate(
        {
            "policy": "tiny",
            "speculation": {"enabled": True},
            "engine": {"server": server, "served_name": "tiny", "server_priority_check": check},
        }
    )


async def test_a_server_that_ignores_priorities_is_refused_with_the_fix(vllm_server, fcfs_server):
    async with OpenAIEngine(vllm_server, "tiny") as remote:
        assert await remote.scheduling_policy() == "priority"
        await require_priority_scheduling(remote, speculating_through(vllm_server))
    async with OpenAIEngine(fcfs_server, "tiny") as remote:
        assert await remote.scheduling_policy() == "fcfs"
        with pytest.raises(ConfigError, match="'fcfs'") as refused:
            await require_priority_scheduling(remote, speculating_through(fcfs_server))
        assert "--scheduling-policy priority" in refused.value.hint
        # the user's word, when asked for, is taken; so is a session that does not speculate
        await require_priority_scheduling(remote, speculating_through(fcfs_server, check=False))
        sequential = speculating_through(fcfs_server).with_speculation(enabled=False)
        await require_priority_scheduling(remote, sequential)
    silent = OpenAIEngine("http://127.0.0.1:9", "tiny")  # nothing there: it cannot say
    try:
        assert await silent.scheduling_policy() is None
        with pytest.raises(ConfigError, match="cannot tell") as unknown:
            await require_priority_scheduling(silent, speculating_through("http://127.0.0.1:9"))
        assert "VLLM_SERVER_DEV_MODE=1" in unknown.value.hint
    finally:
        await silent.aclose()


@pytest.mark.docker
def test_collect_speculating_through_a_fcfs_server_stops_before_any_episode(
    fcfs_server, tiny_model_dir, tmp_path
):
    from tests.cli.test_cli import obsspec

    config = tmp_path / "served.toml"
    config.write_text('[collect.engine]\nserved_name = "tiny"\n')
    result = obsspec(
        "collect",
        "--config",
        str(config),
        "--tasks",
        str(FIXTURE_TASK),
        "--policy",
        str(tiny_model_dir),
        "--server",
        fcfs_server,
        "--speculate",
        "--out",
        str(tmp_path / "run"),
    )
    assert result.returncode == 1, result.stderr
    assert "'fcfs'" in result.stderr and "--scheduling-policy priority" in result.stderr
    assert not list((tmp_path / "run").glob("**/*.parquet"))  # not one episode was played


def with_output_layer(model_dir, out):
    """A copy of a tied model whose safetensors also hold lm_head.weight."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(model_dir, out)
    (weights,) = out.glob("*.safetensors")
    state = load_file(weights)
    state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    save_file(state, weights, metadata={"format": "pt"})
    return out


async def test_reload_resets_the_server_prefix_cache(vllm_server, tiny_model_dir, tmp_path):
    prompt = chat_ids(tiny_model_dir, "ls")
    same = with_output_layer(tiny_model_dir, tmp_path / "same")
    async with OpenAIEngine(vllm_server, "tiny") as remote:
        before = await remote.generate(prompt, Sampling(max_tokens=6))
        await remote.load_weights(same, 7)  # the same weights, reloaded
        after = await remote.generate(prompt, Sampling(max_tokens=6))
    assert after.weight_version == 7 and after.token_ids == before.token_ids


async def test_a_tied_directory_without_its_output_layer_is_not_reloaded(
    vllm_server, tiny_model_dir
):
    # vLLM's reload by path would leave the served output layer on the old weights
    async with OpenAIEngine(vllm_server, "tiny") as remote:
        with pytest.raises(EngineError, match="tied output layer"):
            await remote.load_weights(tiny_model_dir, 8)
        assert remote.weight_version != 8


async def test_score_matches_the_in_process_engine(vllm_server, tiny_engine, tiny_model_dir):
    ids = chat_ids(tiny_model_dir, "find . -name '*.py' | head")
    async with OpenAIEngine(vllm_server, "tiny") as remote:
        far = await remote.score(ids)
    near = await tiny_engine.score(ids)
    assert far[0] is None and len(far) == len(ids)
    assert far[1:] == pytest.approx(near[1:], abs=1e-3)
