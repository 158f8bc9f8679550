"""Packing by shared prefixes and length-bucketed batches: exact labels, nothing lost."""

from __future__ import annotations

from obsspec.train.batches import padded_tokens, plan_batches
from obsspec.train.sequences import Sample, pack


def test_turns_that_extend_each_other_chain_into_one_sequence():
    first = Sample([1, 2, 3], [4, 5])
    second = Sample([1, 2, 3, 4, 5, 6, 7], [8])  # its prompt holds the first sample whole
    packing = pack([first, second], max_len=100)
    [sequence] = packing.sequences
    assert sequence.ids == [1, 2, 3, 4, 5, 6, 7, 8]
    assert sequence.labels == [False, False, False, True, True, False, False, True]
    assert sequence.samples == 2 and sequence.target_tokens == 3


def test_a_sample_that_does_not_extend_starts_a_new_sequence():
    packing = pack([Sample([1, 2], [3]), Sample([1, 9, 3, 4], [5])], max_len=100)
    assert [s.ids for s in packing.sequences] == [[1, 2, 3], [1, 9, 3, 4, 5]]
    assert [s.labels for s in packing.sequences] == [
        [False, False, True],
        [False, False, False, False, True],
    ]


def test_each_target_is_labelled_exactly_once_after_its_own_prompt():
    samples = [Sample(list(range(10 * k)), [1000 + k] * 3) for k in range(1, 4)]
    # k-th prompt = 0..10k-1: they do not extend each other (targets differ), three sequences
    for sample, sequence in zip(samples, pack(samples, 100).sequences, strict=True):
        labelled = [i for i, flag in zip(sequence.ids, sequence.labels, strict=True) if flag]
        assert labelled == sample.target_ids
        assert sequence.ids[: len(sample.prompt_ids)] == sample.prompt_ids


def test_samples_longer_than_max_len_are_counted_not_cut():
    packing = pack([Sample([1] * 8, [2, 2]), Sample([1, 2], [3])], max_len=9)
    assert packing.too_long == 1 and packing.samples == 2
    assert [s.ids for s in packing.sequences] == [[1, 2, 3]]


def test_batches_cover_every_sequence_once_and_respect_the_token_budget():
    lengths = [5, 90, 17, 33, 64, 8, 100, 12, 40, 3]
    batches = plan_batches(lengths, batch_tokens=128, seed=1, epoch=0)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    assert all(padded_tokens(lengths, batch) <= 128 for batch in batches)


def test_batch_order_is_fixed_by_seed_and_epoch():
    lengths = list(range(1, 60))
    plan = plan_batches(lengths, 64, seed=3, epoch=1)
    assert plan == plan_batches(lengths, 64, seed=3, epoch=1)
    assert plan != plan_batches(lengths, 64, seed=3, epoch=2)


def test_observation_weighting_makes_each_target_weigh_one_whatever_its_length():
    long, short = Sample([1, 2], [3, 4, 5, 6]), Sample([1, 2, 3, 4, 5, 6, 7], [8])
    [token] = pack([long, short], 100).sequences
    [each] = pack([long, short], 100, weighting="observation").sequences
    assert token.labels == [0, 0, 1, 1, 1, 1, 0, 1] and token.target_weight == 5
    assert each.labels == [0, 0, 0.25, 0.25, 0.25, 0.25, 0, 1.0]
    assert each.target_weight == each.samples == 2
    assert each.target_tokens == token.target_tokens == 5  # the same tokens are learned
