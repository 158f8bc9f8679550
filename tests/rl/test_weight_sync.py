"""The trainer side of the weight sync: buckets and the post-sync check's verdict."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from obsspec.rl.weight_sync import (
    StaleWeightsError,
    SyncCheck,
    compare_logprobs,
    tied_duplicates,
    weight_buckets,
)


def test_buckets_keep_order_cast_to_bf16_and_respect_the_size():
    state = {f"w{i}": torch.ones(256, dtype=torch.float32) for i in range(5)}  # 512 B in bf16
    buckets = list(weight_buckets(state, bucket_bytes=1024))
    assert [[name for name, _ in b] for b in buckets] == [["w0", "w1"], ["w2", "w3"], ["w4"]]
    assert all(t.dtype == torch.bfloat16 for b in buckets for _, t in b)


def test_a_tensor_larger_than_a_bucket_goes_alone_and_skipped_names_are_left_out():
    state = {"small": torch.zeros(4), "big": torch.zeros(4096), "lm_head.weight": torch.zeros(4)}
    buckets = list(weight_buckets(state, bucket_bytes=64, skip=("lm_head.weight",)))
    assert [[n for n, _ in b] for b in buckets] == [["small"], ["big"]]


def test_only_a_tied_output_layer_is_skipped():
    class Config:
        tie_word_embeddings = True

    assert tied_duplicates(Config()) == ("lm_head.weight",)
    assert tied_duplicates(object()) == ()


def test_an_engine_that_serves_the_new_weights_passes():
    check = compare_logprobs([None, -1.00, -2.01], [math.nan, -1.0, -2.0], [math.nan, -1.5, -2.5])
    assert check.tokens == 2 and check.error == pytest.approx(0.005)
    assert not check.stale(0.05)
    check.raise_if_stale(0.05, worker=0, step=1)


def test_an_engine_still_on_the_old_weights_is_caught_and_named():
    check = compare_logprobs([None, -1.5, -2.5], [math.nan, -1.0, -2.0], [math.nan, -1.5, -2.5])
    assert check.before == 0 and check.shift == pytest.approx(0.5)
    with pytest.raises(StaleWeightsError, match="rollout worker 3's policy engine") as caught:
        check.raise_if_stale(0.05, worker=3, step=7)
    assert "step 7" in str(caught.value) and "rl.sync" in caught.value.hint


def test_nearer_the_old_weights_than_the_new_is_stale_even_within_the_tolerance():
    # the update moved the probe by 0.2; the engine is 0.09 from the new weights but 0.03
    # from the old ones: it did not reload
    check = SyncCheck(error=0.09, before=0.03, shift=0.2, tokens=10)
    assert check.stale(0.1)
    assert not SyncCheck(error=0.03, before=0.09, shift=0.2, tokens=10).stale(0.1)


def test_an_update_too_small_to_see_is_not_called_stale():
    assert not SyncCheck(error=0.01, before=0.005, shift=0.01, tokens=10).stale(0.05)


def test_no_scored_token_is_stale():
    assert compare_logprobs([None], [math.nan], [math.nan]).stale(1.0)


def test_the_engines_own_floor_is_not_taken_for_staleness():
    """Seen at step 1 of a CPU run: a bfloat16 engine 0.129 from a float32 trainer after an
    update that moved the probe 0.004, and 0.1298 before it: numerics, not staleness. Scored
    before the sync on the old weights, the engine was already that far (its floor)."""
    fresh = SyncCheck(error=0.1291, before=0.1298, shift=0.0043, tokens=255, floor=0.1298)
    assert fresh.stale(0.1) is False
    assert replace(fresh, floor=0.0).stale(0.1)  # the bare tolerance: a false alarm
    # a stale engine still shows: the update moved the probe past tolerance and floor, and
    # the engine stayed nearer the old weights
    stale = SyncCheck(error=0.45, before=0.13, shift=0.4, tokens=255, floor=0.13)
    assert stale.stale(0.1)
    with pytest.raises(StaleWeightsError, match=r"beyond the 0\.1300 they differed by"):
        stale.raise_if_stale(0.1, worker=0, step=3)
