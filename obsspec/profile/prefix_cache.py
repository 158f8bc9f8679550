"""The world model engine's prefix-cache hit rate over one concurrency level.

    start = wm_prefix_counts(session)
    ...the level's waves...
    figures = prefix_cache_figures(start, wm_prefix_counts(session))

Each turn's world-model prompt extends the last turn's (world_model.prompt), so with prefix
caching the engine should find most of a prompt already computed: `hit_rate` is the share
of prompt tokens looked up that were (obsspec.inference.base.EngineStats). The engine serves
every level and counts from its start, so a level's figures are the difference of the
readings at its start and end. None when the speculative arm has no world model; a null
rate when the engine looked nothing up or does not count (a server, a fake).
"""

from __future__ import annotations

from dataclasses import dataclass

from obsspec.speculation.totals import pooled_rate


@dataclass(frozen=True)
class PrefixCounts:
    queried: int  # prompt tokens looked up in the cache
    hit: int  # of those, found there


def wm_prefix_counts(session) -> PrefixCounts | None:
    engine = session.world_model_engine
    if engine is None:
        return None
    stats = engine.stats()
    return PrefixCounts(stats.prefix_queried_tokens, stats.prefix_hit_tokens)


def prefix_cache_figures(start: PrefixCounts | None, end: PrefixCounts | None) -> dict | None:
    """`queried_tokens`, `hit_tokens` and `hit_rate` between two readings."""
    if start is None or end is None:
        return None
    queried, hit = end.queried - start.queried, end.hit - start.hit
    return {"queried_tokens": queried, "hit_tokens": hit, "hit_rate": pooled_rate(hit, queried)}
