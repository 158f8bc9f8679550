"""The stat logger an in-process vLLM engine reports to: load, and prefix-cache tokens summed
over steps. Driven with vLLM's own stats objects, without starting an engine."""

import pytest

pytest.importorskip("vllm")

from vllm.v1.metrics.stats import PrefixCacheStats, SchedulerStats

from obsspec.inference.vllm_local import EngineSettings, LoadTracker, LocalVLLMEngine


def step(running=0, waiting=0, looked_up=(), resumed=()) -> SchedulerStats:
    """One engine step's stats: (prompt tokens, cached tokens) per request admitted, fresh
    or resumed after a preemption, recorded the way vLLM's scheduler records them."""
    prefix = PrefixCacheStats()
    for tokens, hits in looked_up:
        prefix.record(num_tokens=tokens, num_hits=hits, preempted=False)
    for tokens, hits in resumed:
        prefix.record(num_tokens=tokens, num_hits=hits, preempted=True)
    return SchedulerStats(
        num_running_reqs=running, num_waiting_reqs=waiting, prefix_cache_stats=prefix
    )


def test_the_recorder_sums_prefix_cache_tokens_over_steps():
    tracker = LoadTracker()
    recorder = tracker.factory(None)
    recorder.record(step(1, 2, looked_up=[(100, 0)]), None)
    recorder.record(step(3, 0, looked_up=[(120, 96), (40, 32)], resumed=[(500, 500)]), None)
    recorder.record(step(2, 0), None)  # decoding only: nothing looked up
    recorder.record(None, None)  # a step without scheduler stats changes nothing
    assert (tracker.running, tracker.waiting) == (2, 0)
    # resumed requests are not counted again, as in vLLM's own counters
    assert (tracker.prefix_queried_tokens, tracker.prefix_hit_tokens) == (260, 128)


def test_engine_stats_carry_the_counts(tmp_path):
    engine = LocalVLLMEngine(EngineSettings(model=tmp_path))  # not started: no vLLM engine
    assert engine.stats().prefix_queried_tokens == 0
    engine._load.factory(None).record(step(1, 0, looked_up=[(64, 48)]), None)
    stats = engine.stats()
    assert (stats.running, stats.prefix_queried_tokens, stats.prefix_hit_tokens) == (1, 64, 48)
