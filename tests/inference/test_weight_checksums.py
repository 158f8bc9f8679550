"""Weight checksums by layer (obsspec.inference.weight_checksums): the same whatever the
layout (HF's q, k and v against a fused qkv), exact enough that one bfloat16 step in 1% of a
layer's values is a difference, and a group that cannot be compared is never called equal;
the sync check's verdict from them (obsspec.rl.weight_sync)."""

from __future__ import annotations

import torch

from obsspec.inference.weight_checksums import checksum_mismatches, weight_checksums
from obsspec.rl.weight_sync import compare_logprobs, weights_verdict


def hf_layer(seed: int = 0) -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (f"model.layers.0.self_attn.{p}_proj.weight", torch.randn(64, 32, generator=g) * 0.02)
        for p in "qkv"
    ] + [("model.embed_tokens.weight", torch.randn(100, 32, generator=g) * 0.02)]


def bf16(named):
    return [(n, t.to(torch.bfloat16)) for n, t in named]


def test_a_fused_layout_has_the_same_checksums():
    sent = bf16(hf_layer())
    qkv = torch.cat([t for n, t in sent if "_proj" in n]).float()  # as vLLM holds it, float32
    engine = [("model.layers.0.self_attn.qkv_proj.weight", qkv), sent[-1]]
    assert checksum_mismatches(weight_checksums(engine), weight_checksums(sent)) == []


def test_one_bfloat16_step_in_one_percent_of_a_layers_values_is_a_difference():
    sent = bf16(hf_layer())
    name, q = sent[0]
    moved = q.clone().view(-1)
    moved[::100] = (moved[::100].float() * (1 + 2**-7)).to(torch.bfloat16)  # one step up
    engine = [(name, moved.view_as(q)), *sent[1:]]
    assert checksum_mismatches(weight_checksums(engine), weight_checksums(sent)) == [
        "layer 0: its values differ from those sent"
    ]


def test_a_group_that_cannot_be_compared_is_named_not_passed():
    sent = bf16(hf_layer())
    padded = torch.cat([sent[-1][1], torch.zeros(28, 32, dtype=torch.bfloat16)])  # vocab padded
    engine = [*sent[:-1], ("model.embed_tokens.weight", padded)]
    found = checksum_mismatches(weight_checksums(engine), weight_checksums(sent))
    assert found == ["other: 4096 values in the engine, 3200 sent"]
    verdict, detail = weights_verdict(
        {"dtype": "bfloat16", "groups": weight_checksums(engine)}, weight_checksums(sent)
    )
    assert verdict == "not compared" and detail == found


def test_checksums_decide_the_sync_check_where_they_exist():
    sums = weight_checksums(bf16(hf_layer()))
    other = weight_checksums(bf16(hf_layer(seed=1)))
    noisy = compare_logprobs([None, -1.0], [0.0, -1.13], [0.0, -1.13])  # bf16 against fp32
    assert noisy.stale(0.1)  # the log-probabilities alone: a false alarm
    assert not noisy.with_weights({"dtype": "bfloat16", "groups": sums}, sums).stale(0.1)
    close = compare_logprobs([None, -1.0], [0.0, -1.0], [0.0, -1.0])
    assert close.with_weights({"dtype": "float32", "groups": other}, sums).stale(0.1)
    fp16 = close.with_weights({"dtype": "float16", "groups": other}, sums)
    assert fp16.weights == "not compared" and not fp16.stale(0.1)  # the probe decides
    assert close.with_weights(None, sums).weights == "not compared"
