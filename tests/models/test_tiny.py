import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from obsspec.errors import ModelError
from obsspec.models.tiny import TinyShape, make_tiny_model


def test_tiny_model_shares_the_real_tokenizer(tiny_model_dir, default_model_dir):
    tiny_tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    real_tok = AutoTokenizer.from_pretrained(default_model_dir)
    messages = [{"role": "user", "content": "ls -la /tmp"}]
    assert tiny_tok.apply_chat_template(messages, tokenize=False) == real_tok.apply_chat_template(
        messages, tokenize=False
    )
    assert tiny_tok("echo hi")["input_ids"] == real_tok("echo hi")["input_ids"]

    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["num_hidden_layers"] == 2 and config["hidden_size"] == 128
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert sum(p.numel() for p in model.parameters()) < 10_000_000
    with torch.no_grad():
        logits = model(torch.tensor([tiny_tok("echo hi")["input_ids"]])).logits
    assert logits.shape[-1] == len(real_tok)


def test_seed_decides_the_weights(default_model_dir, tmp_path):
    shape = TinyShape(layers=1, hidden=64, heads=1, kv_heads=1, intermediate=64)
    a = make_tiny_model(default_model_dir, tmp_path / "a", shape, seed=1)
    b = make_tiny_model(default_model_dir, tmp_path / "b", shape, seed=1)
    c = make_tiny_model(default_model_dir, tmp_path / "c", shape, seed=2)
    weights = [(d / "model.safetensors").read_bytes() for d in (a, b, c)]
    assert weights[0] == weights[1] != weights[2]


def test_refuses_non_empty_output_and_bad_shapes(default_model_dir, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep me")
    with pytest.raises(ModelError, match="not empty"):
        make_tiny_model(default_model_dir, tmp_path / "full")
    assert (tmp_path / "full" / "x").read_text() == "keep me"
    with pytest.raises(ModelError, match="divisible"):
        make_tiny_model(default_model_dir, tmp_path / "odd", TinyShape(hidden=100, heads=3))
