"""The weight sync against a real engine: the trainer's bf16 buckets, or its servable
directory, reach vLLM in place and the post-sync check passes; an engine left on the old
weights is caught. The tiny model ties its output layer to its embedding, as the default
model does: vLLM 0.32's reload left such an output layer on the old weights until the
adapter sent it explicitly (the check caught it: 0.18 from the trainer after one update)."""

import pytest

from obsspec.rl.policy_trainer import PolicyTrainer
from obsspec.rl.weight_sync import (
    compare_logprobs,
    probe_logprobs,
    tied_duplicates,
    trainer_weights,
    weight_buckets,
)
from tests.rl.sharded_ranks import SETTINGS, fixed_episodes

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

TOLERANCE = 0.1  # [rl.sync] check_tolerance's default


async def test_synced_buckets_pass_the_check_and_a_stale_engine_fails_it(
    tiny_engine, tiny_model_dir, tokenizer, tmp_path
):
    settings = SETTINGS.model_copy(update={"lr": 2e-2, "minibatches": 1})
    trainer = PolicyTrainer(tiny_model_dir, settings, seed=0)
    episodes = fixed_episodes(len(tokenizer))
    probe = episodes[0].ids[:64]
    before = probe_logprobs(trainer, probe)
    start = compare_logprobs(await tiny_engine.score(probe), before, before)
    assert start.tokens == 63 and not start.stale(TOLERANCE), start  # the same weights
    trainer.update(episodes, 0)
    after = probe_logprobs(trainer, probe)
    try:
        stale = compare_logprobs(await tiny_engine.score(probe), after, before)
        assert stale.shift > TOLERANCE and stale.stale(TOLERANCE), stale
        skip = tied_duplicates(trainer.model.config)
        buckets = list(weight_buckets(trainer_weights(trainer), bucket_bytes=1 << 20, skip=skip))
        assert len(buckets) > 1  # a real bucketed load, layers split across calls
        await tiny_engine.load_weight_buckets(buckets, version=1)
        synced = compare_logprobs(await tiny_engine.score(probe), after, before)
        assert not synced.stale(TOLERANCE), synced
        assert synced.error < synced.before / 5, synced
        # the disk method: a servable directory whose tied output layer is saved once, in
        # the embedding (vLLM's reload by path would leave the output layer stale)
        await tiny_engine.load_weights(tiny_model_dir, 0)
        directory = trainer.save_weights(tmp_path / "sync")
        await tiny_engine.load_weights(directory, 1)
        from_disk = compare_logprobs(await tiny_engine.score(probe), after, before)
        assert not from_disk.stale(TOLERANCE), from_disk
    finally:  # the session's engine back on its own weights
        await tiny_engine.load_weights(tiny_model_dir, 0)
    assert not compare_logprobs(await tiny_engine.score(probe), before, before).stale(TOLERANCE)


async def test_the_engines_checksums_are_exactly_those_of_the_weights_sent(
    tiny_engine, tiny_model_dir, tokenizer
):
    """By layer, the float64 sums of what the engine holds (vLLM's fused qkv and gate_up, its
    tied output layer) equal those of the bf16 buckets sent; an engine left on the old weights
    differs where the step moved a bfloat16 value, and is stale whatever its probe's
    log-probabilities say."""
    from obsspec.inference.weight_checksums import weight_checksums

    settings = SETTINGS.model_copy(update={"lr": 1e-6, "minibatches": 1})  # RL's step size
    trainer = PolicyTrainer(tiny_model_dir, settings, seed=0)
    trainer.update(fixed_episodes(len(tokenizer)), 0)
    skip = tied_duplicates(trainer.model.config)
    buckets = list(weight_buckets(trainer_weights(trainer), bucket_bytes=1 << 20, skip=skip))
    sent: dict = {}
    for bucket in buckets:
        weight_checksums(bucket, into=sent)
    check = compare_logprobs([None, -1.0], [0.0, -1.0], [0.0, -1.0])
    try:
        old = check.with_weights(await tiny_engine.weight_checksums(), sent)
        assert old.weights == "differ" and old.stale(TOLERANCE), old
        # a step of 1e-6 moves few bfloat16 values (most stay within half a step of the
        # old ones): here the embedding's near-zero ones; each such group is named
        assert old.weight_detail and all("differ" in d for d in old.weight_detail), old
        await tiny_engine.load_weight_buckets(buckets, version=1)
        held = await tiny_engine.weight_checksums()
        synced = check.with_weights(held, sent)
        if held["groups"]["layer 0"][0] == sent["layer 0"][0]:  # a GPU build keeps them
            assert synced.weights == "exact" and synced.weight_detail == (), synced
            noisy = compare_logprobs([None, -1.0], [0.0, -1.2], [0.0, -1.2])
            assert not noisy.with_weights(held, sent).stale(TOLERANCE)  # numerics only
        else:  # vLLM's CPU build repacks a reloaded linear layer out of its parameters
            assert synced.weights == "not compared", synced
            assert all("values in the engine" in d for d in synced.weight_detail), synced
        assert not synced.stale(TOLERANCE)
    finally:
        await tiny_engine.load_weights(tiny_model_dir, 0)
