"""A real `vllm serve` (OpenAI-compatible) on loopback with the tiny model."""

import asyncio

import pytest

from obsspec.errors import ContextLengthError, EngineError
from obsspec.inference.base import Sampling
from obsspec.inference.openai_http import OpenAIEngine
from tests.helpers import chat_ids

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
