"""The policy's new weights into every rollout engine after an update, and the check that
the engines really serve them.

    syncer = EngineSync(settings, sync_dir, call)        # the driver's, once per run
    before = await syncer.probe_before(roles, episodes)  # ahead of the update
    stats = await syncer.sync(roles, version, policy_changed=True, world_model=True,
                              before=before, step=3)    # {"sync_check_error": ...}

    buckets = weight_buckets(state, bucket_bytes=512 << 20)  # [[(name, bf16 tensor), ...]]
    check = compare_logprobs(engine_scores, trainer_after, trainer_before)

Two ways in (`[rl.sync] method`):
- memory (default): the trainer's rank 0 gathers the full weights (every rank takes part),
  casts them to bfloat16 and cuts them into buckets of about `bucket_mb`, each put into Ray's
  object store; every rollout worker fetches them one at a time and loads them into its
  engine in place (obsspec.inference.weight_loading). Nothing touches a filesystem, and each
  bucket crosses the network once per node. NCCL straight from the trainer's GPUs into the
  engines' (vLLM's weight-transfer engine) would skip the host copy; it is not built.
- disk: rank 0 writes a servable HF directory under OUT/sync and every engine reloads it:
  needs a filesystem that every node shares.

The check: a stale engine, one whose reload silently did not take (or took for some layers
only), would make RL off-policy without a word. After every sync in memory, each engine's
weight checksums by decoder layer (obsspec.inference.weight_checksums: exact sums of the
values it holds) are compared with those of the bfloat16 weights the trainer sent: any
layer that differs is stale, named, however small the update (RL's 1e-6 moves a layer's
bfloat16 values by a step here and there: far beyond float64 rounding). The engine also
scores a probe (the first tokens of one of the step's trained episodes) against the
trainer's log-probabilities after the update and before it; recorded always, it decides
only where checksums cannot (the disk method, a tensor-parallel engine, an engine that
holds another dtype or another layout: vLLM's CPU build repacks its linear layers' weights
out of the model's parameters when it reloads them): stale is an engine further than
`check_tolerance` from the new weights beyond its own floor (the same probe, scored by the
engine before the sync against the trainer before the update: bfloat16 against float32 on
sampled tokens; seen at 0.13, which a bare tolerance of 0.1 took for staleness), or, the
update having moved them further than that, closer to the weights before it than after.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from obsspec.errors import ObsspecError
from obsspec.inference.weight_checksums import Sums, checksum_mismatches, weight_checksums


class StaleWeightsError(ObsspecError):
    """An engine does not serve the weights the trainer just sent (not retryable)."""


def weight_buckets(
    state: Mapping, *, bucket_bytes: int, dtype=None, skip: Sequence[str] = ()
) -> Iterator[list[tuple]]:
    """(name, tensor) pairs in `dtype` (default bfloat16), in order, in lists of at most
    about bucket_bytes (a tensor larger than that is a bucket alone), cast as they go."""
    import torch

    from obsspec.inference.weight_loading import bucketed

    dtype = dtype or torch.bfloat16
    cast = (
        (name, tensor.detach().to(dtype=dtype).contiguous())
        for name, tensor in state.items()
        if name not in skip
    )
    return bucketed(cast, bucket_bytes)


def tied_duplicates(config) -> tuple[str, ...]:
    """Names an engine does not load: the output layer when it is the input embedding."""
    return ("lm_head.weight",) if getattr(config, "tie_word_embeddings", False) else ()


@dataclass(frozen=True)
class SyncCheck:
    error: float  # mean |engine - trainer after the update| over the probe's tokens
    before: float  # mean |engine - trainer before the update|
    shift: float  # mean |trainer after - trainer before|: how far the update moved them
    tokens: int
    weights: str = "not compared"  # exact | differ | not compared (the checksums)
    weight_detail: tuple[str, ...] = ()  # the layers that differ, or why not compared
    floor: float = 0.0  # mean |engine - trainer| on the same old weights: their numerics

    def stale(self, tolerance: float) -> bool:
        """Checksums that differ; where none were compared, further from the new weights
        than the tolerance beyond the engine's own floor (what it differs from the trainer
        on the same weights), or (the update having moved further than that) nearer the
        old weights than the new."""
        if self.weights != "not compared":
            return self.weights == "differ"
        allowed = tolerance + (self.floor if math.isfinite(self.floor) else 0.0)
        if not math.isfinite(self.error) or self.error > allowed:
            return True
        return self.shift > allowed and self.before < self.error

    def with_weights(self, engine: Mapping | None, sent: Sums | None) -> SyncCheck:
        """This check with the checksums' verdict (engine: its weight_checksums answer)."""
        verdict, detail = weights_verdict(engine, sent)
        return replace(self, weights=verdict, weight_detail=tuple(detail))

    def raise_if_stale(self, tolerance: float, *, worker: int, step: int) -> None:
        if not self.stale(tolerance):
            return
        if self.weights == "differ":
            raise StaleWeightsError(
                f"step {step}: rollout worker {worker}'s policy engine does not hold the "
                f"weights just synced: {'; '.join(self.weight_detail[:4])} (exact checksums "
                f"by layer; its probe's log-probabilities are {self.error:.4f} from the "
                f"trainer's after the update and {self.before:.4f} from those before); "
                "sampling from it would make the run silently off-policy",
                hint="the engine's in-place reload did not take: check the vLLM version "
                "(obsspec supports the range pinned in the gpu extra), or try "
                '[rl.sync] method = "disk"',
            )
        raise StaleWeightsError(
            f"step {step}: rollout worker {worker}'s policy engine does not serve the weights "
            f"just synced: its log-probabilities of a {self.tokens}-token probe are "
            f"{self.error:.4f} from the trainer's after the update (tolerance {tolerance:g} "
            f"beyond the {self.floor:.4f} they differed by on the old weights) and "
            f"{self.before:.4f} from those before it (the update moved them "
            f"{self.shift:.4f}); sampling from it would make the run silently off-policy",
            hint="the engine's in-place reload did not take: check the vLLM version "
            "(obsspec supports the range pinned in the gpu extra), or try "
            '[rl.sync] method = "disk"; a bfloat16 engine far from a float32 trainer may '
            "need a larger [rl.sync] check_tolerance",
        )


COMPARABLE_DTYPES = ("bfloat16", "float32")  # hold the bfloat16 values sent exactly


def weights_verdict(engine: Mapping | None, sent: Sums | None) -> tuple[str, list[str]]:
    """("exact" | "differ" | "not compared", details) for an engine's checksums against
    those of the weights sent."""
    if engine is None or sent is None:
        return "not compared", ["no checksums (the disk method, or a tensor-parallel engine)"]
    if engine["dtype"] not in COMPARABLE_DTYPES:
        return "not compared", [f"the engine holds {engine['dtype']}, not the bfloat16 sent"]
    found = checksum_mismatches(engine["groups"], sent)
    differ = [f for f in found if f.endswith("differ from those sent")]
    if differ:
        return "differ", differ
    return ("not compared", found) if found else ("exact", [])


def compare_logprobs(
    engine: Sequence[float | None],
    after: Sequence[float],
    before: Sequence[float],
    floor: float = 0.0,
) -> SyncCheck:
    """Over the positions the engine scored (its first has no prefix: None); floor: the
    same engine against the trainer before either moved (SyncCheck.floor)."""
    if not len(engine) == len(after) == len(before):
        raise ValueError(
            f"probe lengths differ: engine {len(engine)}, trainer {len(after)}, {len(before)}"
        )
    rows = [(e, a, b) for e, a, b in zip(engine, after, before, strict=True) if e is not None]
    if not rows:
        return SyncCheck(math.nan, math.nan, math.nan, 0, floor=floor)
    n = len(rows)
    return SyncCheck(
        error=sum(abs(e - a) for e, a, _ in rows) / n,
        before=sum(abs(e - b) for e, _, b in rows) / n,
        shift=sum(abs(a - b) for _, a, b in rows) / n,
        tokens=n,
        floor=floor,
    )


def trainer_weights(trainer) -> dict:
    """A trainer's (the policy's or the co-trainer's) full weights by HF name (every rank
    calls; sharded, only rank 0 gets them, the others an empty dict)."""
    return trainer.core.full_weights()


def trainer_buckets(trainer, bucket_mb: int) -> tuple[list, Sums | None]:
    """A trainer's weights in bf16 buckets in Ray's object store, the tied output layer left
    to the engine's loader, and the checksums of what was sent; ([], None) on ranks other
    than 0."""
    import ray

    state = trainer_weights(trainer)
    if not state:
        return [], None
    skip = tied_duplicates(trainer.model.config)
    refs, sums = [], {}
    for bucket in weight_buckets(state, bucket_bytes=bucket_mb << 20, skip=skip):
        weight_checksums(bucket, into=sums)
        refs.append(ray.put(bucket))
    return refs, sums


def probe_logprobs(trainer, ids: Sequence[int]) -> list[float]:
    """log p(ids[t] | ids[:t]) under the trainer's current weights for t >= 1 (every rank
    calls: a sharded forward is collective), NaN at 0 (nothing predicts it)."""
    from obsspec.rl.policy_trainer import PolicyEpisode

    n = len(ids)
    probe = PolicyEpisode(list(ids), [0] + [1] * (n - 1), [None] * n, 0.0)
    values = trainer.logprobs(trainer.net, [probe])[0]
    return [math.nan, *values.tolist()]


@dataclass(frozen=True)
class Probe:
    ids: list[int]
    before: list[float]  # the trainer's log-probabilities before the update
    floors: list[float]  # per worker: mean |its engine - the trainer|, both on the old weights


Call = Callable[[Awaitable, str], Awaitable]  # awaits a role's call; failures named by role


class EngineSync:
    """The driver's side of the sync: which way the weights go, then the check."""

    def __init__(self, settings, sync_dir: Path, call: Call) -> None:
        self.settings = settings  # obsspec.rl.config.SyncSettings
        self.sync_dir = sync_dir  # for the disk method
        self.call = call

    async def probe_before(self, roles, episodes: Sequence) -> Probe | None:
        """The first tokens of the step's first trained episode, scored by the trainer as it
        is now (before the update); None when the check is off or nothing trains."""
        n = self.settings.check_tokens
        trained = [e for e in episodes if any(e.mask)]
        if n == 0 or not trained:
            return None
        ids = list(trained[0].ids[:n])
        before = await self.call(roles.on_trainer("probe_logprobs", ids), "the trainer")
        scores = await self.call(
            asyncio.gather(*(w.score_policy.remote(ids) for w in roles.workers)), "a worker"
        )
        return Probe(ids, before, [compare_logprobs(s, before, before).error for s in scores])

    async def sync(
        self,
        roles,
        version: int,
        *,
        policy_changed: bool,
        world_model: bool,
        before: Probe | None,
        step: int,
    ) -> dict:
        """Every engine loads the trainers' new weights; then the policy engines are checked
        against the trainer (a stale one raises StaleWeightsError)."""
        loads = []
        if policy_changed:
            loads += await self.policy_loads(roles, version)
        if world_model and roles.wm_trainer is not None:
            loads += await self.world_model_loads(roles)
        await self.call(asyncio.gather(*loads), "a worker")
        if not (policy_changed and before is not None):
            return {}
        return await self.check(roles, before, step)

    async def policy_loads(self, roles, version: int) -> list:
        if self.settings.method == "memory":
            refs = await self.call(
                roles.on_trainer("weight_refs", self.settings.bucket_mb), "the trainer"
            )
            return [w.load_policy_buckets.remote(refs, version) for w in roles.workers]
        path = await self.call(
            roles.on_trainer("save_weights", self.sync_dir / "policy"), "the trainer"
        )
        return [w.load_policy.remote(path, version) for w in roles.workers]

    async def world_model_loads(self, roles) -> list:
        trainer = roles.wm_trainer
        if self.settings.method == "memory":
            refs = await self.call(
                trainer.weight_refs.remote(self.settings.bucket_mb), "the co-trainer"
            )
            return [w.load_world_model_buckets.remote(refs) for w in roles.workers]
        path = await self.call(
            trainer.save_weights.remote(self.sync_dir / "world_model"), "the co-trainer"
        )
        return [w.load_world_model.remote(path) for w in roles.workers]

    async def check(self, roles, probe: Probe, step: int) -> dict:
        after = await self.call(roles.on_trainer("probe_logprobs", probe.ids), "the trainer")
        scores = await self.call(
            asyncio.gather(*(w.score_policy.remote(probe.ids) for w in roles.workers)),
            "a worker",
        )
        sent, held = None, [None] * len(scores)
        if self.settings.method == "memory":
            sent = await self.call(roles.on_trainer("sent_checksums"), "the trainer")
            held = await self.call(
                asyncio.gather(*(w.policy_checksums.remote() for w in roles.workers)),
                "a worker",
            )
        checks = [
            compare_logprobs(s, after, probe.before, floor=f).with_weights(h, sent)
            for s, h, f in zip(scores, held, probe.floors, strict=True)
        ]
        for worker, check in enumerate(checks):
            check.raise_if_stale(self.settings.check_tolerance, worker=worker, step=step)
        return {
            "sync_check_error": max(c.error for c in checks),
            "sync_check_shift": checks[0].shift,
            "sync_check_weights": checks[0].weights,
            "sync_check_floor": max(c.floor for c in checks),
        }
