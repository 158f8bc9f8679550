"""Where the roles of an RL run go: Ray placement groups, reserved before any actor starts.

    groups = plan_groups(config)                      # what each role's bundles ask for
    placed = await reserve(ray, groups, timeout_s)    # every group placed, or a ClusterError
    actor_class.options(**placed.options("rollout workers", index)).remote(...)
    placed.release(ray)                               # when the roles are gone

One group per role, one bundle per process:
- "policy trainer": a bundle per rank ({"GPU": 1, "CPU": 1} on GPUs), `trainer_strategy`
  (PACK, or STRICT_PACK for one node). The ranks are placed together or not at all, so a
  sharded trainer never holds half its GPUs while it waits for the rest.
- "rollout workers": a bundle per worker (its policy and world-model engines share its GPU),
  `rollout_strategy` (SPREAD by default: each node's Docker runs its worker's sandboxes).
- "world-model trainer": one bundle, when co-training is on.
Custom resources (`*_resources`) join each bundle, so a role goes only to nodes that have them
(`ray start --resources '{"trainer_node": 1}'`). On CPUs (no GPUs asked for) a bundle asks
for CPU_SHARE of a CPU, so every role fits on the cores of one laptop.

Ray waits for ever for a group no node can hold (2 nodes x 4 GPUs cannot hold a STRICT_PACK
group of 8 GPU bundles). `reserve` refuses at once when even the cluster's totals are short,
and otherwise waits `placement_timeout_s`, then raises a ClusterError naming the group, its
bundles, and what each node has.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field

from obsspec.errors import ClusterError
from obsspec.rl.config import PlacementSettings, RLConfig

CPU_SHARE = 0.01  # an actor's CPU "reservation" when roles share the CPUs
TRAINER, ROLLOUT, WM_TRAINER = "policy trainer", "rollout workers", "world-model trainer"
# Resources every Ray node has that say nothing about where a role can go.
IMPLICIT = ("memory", "object_store_memory")


@dataclass(frozen=True)
class Group:
    """One role's bundles and how Ray may spread them over nodes."""

    role: str
    bundles: list[dict[str, float]]
    strategy: str

    def describe(self) -> str:
        counted = Counter(format_resources(bundle) for bundle in self.bundles)
        parts = [f"{n} x {{{text}}}" if n > 1 else f"{{{text}}}" for text, n in counted.items()]
        return f"{self.role}: {', '.join(parts)} ({self.strategy})"


def bundle(gpus: float, resources: dict[str, float]) -> dict[str, float]:
    if gpus:
        return {"GPU": gpus, "CPU": 1, **resources}
    return {"CPU": CPU_SHARE, **resources}


def plan_groups(config: RLConfig) -> list[Group]:
    p: PlacementSettings = config.placement
    ranks = p.policy_ranks
    groups = [
        Group(TRAINER, [bundle(p.trainer_gpus / ranks, p.trainer_resources)] * ranks,
              p.trainer_strategy),
        Group(ROLLOUT, [bundle(p.rollout_gpus, p.rollout_resources)] * p.rollout_workers,
              p.rollout_strategy),
    ]  # fmt: skip
    if config.cotrain.enabled:
        groups.append(
            Group(WM_TRAINER, [bundle(p.wm_trainer_gpus, p.wm_trainer_resources)], "PACK")
        )
    return groups


@dataclass
class Placed:
    """The reserved placement groups, by role."""

    groups: dict[str, Group] = field(default_factory=dict)
    handles: dict[str, object] = field(default_factory=dict)  # role -> PlacementGroup

    def options(self, role: str, index: int) -> dict:
        """Ray actor options that run the actor in bundle `index` of role's group."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        wanted = self.groups[role].bundles[index]
        return {
            "num_cpus": wanted["CPU"],
            "num_gpus": wanted.get("GPU", 0),
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                placement_group=self.handles[role], placement_group_bundle_index=index
            ),
        }

    def release(self, ray) -> None:
        """Give the groups' resources back to the cluster (also done by Ray when the driver's
        job ends; a driver that joined a long-lived cluster should not wait for that)."""
        for handle in self.handles.values():
            with contextlib.suppress(Exception):
                ray.util.remove_placement_group(handle)
        self.handles.clear()


async def reserve(ray, groups: list[Group], timeout_s: float) -> Placed:
    """Every group placed within timeout_s (one deadline for all), else a ClusterError and
    none kept."""
    from ray.util.placement_group import placement_group

    refuse_if_totals_short(ray, groups)
    placed = Placed({g.role: g for g in groups})
    deadline = time.monotonic() + timeout_s
    try:
        for group in groups:
            placed.handles[group.role] = placement_group(group.bundles, strategy=group.strategy)
        for group in groups:
            left = max(0.0, deadline - time.monotonic())
            if not await asyncio.to_thread(placed.handles[group.role].wait, left):
                raise not_placed(ray, group, timeout_s)
    except BaseException:
        placed.release(ray)
        raise
    return placed


def refuse_if_totals_short(ray, groups: list[Group]) -> None:
    """The cheap check first: no wait when the whole cluster lacks what the groups ask for."""
    have = ray.cluster_resources()
    wanted: Counter[str] = Counter()
    for group in groups:
        for one in group.bundles:
            wanted.update(one)
    short = [key for key, amount in wanted.items() if have.get(key, 0) < amount - 1e-9]
    if short:
        missing = ", ".join(f"{key} {wanted[key]:g} (it has {have.get(key, 0):g})" for key in short)
        raise ClusterError(
            f"the roles ask the Ray cluster for more than it has in all: {missing}; "
            f"{describe_groups(groups)}; {describe_nodes(ray)}",
            hint=HINT,
        )


HINT = (
    "every bundle must fit on one node that has all it asks for: lower the *_gpus settings "
    "or rollout_workers in [rl.placement], start nodes with the custom resources named "
    "(`ray start --resources`), relax trainer_strategy/rollout_strategy, or raise "
    "placement_timeout_s while an autoscaler adds nodes"
)


def not_placed(ray, group: Group, timeout_s: float) -> ClusterError:
    one_node = " (STRICT_PACK: all on one node)" if group.strategy == "STRICT_PACK" else ""
    return ClusterError(
        f"Ray could not place the {group.role} within {timeout_s:g} s (placement_timeout_s): "
        f"{group.describe()}{one_node}; {describe_nodes(ray)}",
        hint=HINT,
    )


def describe_groups(groups: list[Group]) -> str:
    return "asked for " + "; ".join(g.describe() for g in groups)


def describe_nodes(ray) -> str:
    """What each live node has, e.g. `10.0.0.5 (node 3f2a9c1d): 4 GPU, 16 CPU, trainer 1`."""
    lines = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        kept = {
            key: amount
            for key, amount in node.get("Resources", {}).items()
            if key not in IMPLICIT and not key.startswith(("node:", "accelerator_type:")) and amount
        }
        kept.setdefault("GPU", 0)
        kept.setdefault("CPU", 0)
        where = f"{node.get('NodeManagerAddress', '?')} (node {node.get('NodeID', '?')[:8]})"
        lines.append(f"{where}: {format_resources(kept)}")
    return "the cluster's nodes: " + ("; ".join(lines) if lines else "none alive")


def format_resources(resources: dict[str, float]) -> str:
    """GPU and CPU first, then custom resources by name: `GPU 1, CPU 1, trainer 1`."""
    order = sorted(resources, key=lambda key: (key != "GPU", key != "CPU", key))
    return ", ".join(f"{key} {resources[key]:g}" for key in order)
