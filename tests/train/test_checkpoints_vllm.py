"""vLLM's CPU engine serves a checkpoint's model/ as it is: given only that directory, it
finds the tokenizer and chat template there and computes with the trained weights."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from obsspec.inference.base import Sampling
from obsspec.inference.vllm_local import EngineSettings, LocalVLLMEngine
from tests.helpers import chat_ids
from tests.train.test_checkpoints import new_core, step

pytestmark = pytest.mark.vllm


async def test_the_engine_serves_a_checkpoints_model(tiny_model_dir, tmp_path):
    core = new_core(tiny_model_dir)
    step(core, 0)
    core.save(tmp_path / "checkpoint")
    served = tmp_path / "checkpoint" / "model"
    assert json.loads((served / "config.json").read_text())["dtype"] == "bfloat16"

    prompt = chat_ids(served, "pwd")  # the checkpoint's own tokenizer and chat template
    settings = EngineSettings(model=served, max_model_len=1024, kv_cache_gb=0.25)
    async with LocalVLLMEngine(settings) as engine:
        gen = await engine.generate(prompt, Sampling(max_tokens=4))
    assert 1 <= len(gen.token_ids) <= 4 and gen.text is not None

    # the trained weights, not the base's: the first token's logprob is what transformers
    # computes from the same files (vLLM computes in bfloat16, hence the tolerance)
    model = AutoModelForCausalLM.from_pretrained(served, dtype=torch.float32)
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([prompt])).logits[0, -1], dim=-1)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with torch.no_grad():
        base_logprobs = torch.log_softmax(base(torch.tensor([prompt])).logits[0, -1], dim=-1)
    token = gen.token_ids[0]
    assert abs(logprobs[token].item() - gen.logprobs[0]) < 2e-2
    assert abs(base_logprobs[token].item() - gen.logprobs[0]) > 0.1  # training moved it
