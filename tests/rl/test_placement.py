"""Placement of the rl roles: the bundles each role asks for, a group no node can hold refused
with what the nodes have, and the policy trainer's rendezvous between Ray actors."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from obsspec.errors import ClusterError
from obsspec.rl.actors import PolicyTrainerActor
from obsspec.rl.config import RLConfig
from obsspec.rl.placement import (
    CPU_SHARE,
    ROLLOUT,
    TRAINER,
    WM_TRAINER,
    Group,
    plan_groups,
    reserve,
)


def rl_config(**placement) -> RLConfig:
    return RLConfig.model_validate({"tasks": "t", "out": "o", "placement": placement})


def test_gpu_roles_get_one_bundle_per_process_with_their_custom_resources():
    config = rl_config(
        rollout_workers=3, rollout_gpus=1, trainer_gpus=4, wm_trainer_gpus=1,
        trainer_strategy="STRICT_PACK", trainer_resources={"trainer_node": 1},
        rollout_resources={"second_node": 0.5},
    )  # fmt: skip
    groups = {g.role: g for g in plan_groups(config)}
    assert groups[TRAINER].bundles == [{"GPU": 1, "CPU": 1, "trainer_node": 1}] * 4
    assert groups[TRAINER].strategy == "STRICT_PACK"
    assert groups[ROLLOUT].bundles == [{"GPU": 1, "CPU": 1, "second_node": 0.5}] * 3
    assert groups[ROLLOUT].strategy == "SPREAD"
    assert groups[WM_TRAINER].bundles == [{"GPU": 1, "CPU": 1}]
    assert groups[TRAINER].describe() == (
        "policy trainer: 4 x {GPU 1, CPU 1, trainer_node 1} (STRICT_PACK)"
    )


def test_cpu_roles_share_the_cores_and_the_world_model_trainer_only_when_co_training():
    config = rl_config(rollout_workers=2).model_copy(
        update={"cotrain": rl_config().cotrain.model_copy(update={"enabled": False})}
    )
    groups = plan_groups(config)
    assert [g.role for g in groups] == [TRAINER, ROLLOUT]
    assert all(b == {"CPU": CPU_SHARE} for g in groups for b in g.bundles)


@pytest.mark.parametrize(
    "resources, why",
    [({"GPU": 1}, "Ray sets itself"), ({"trainer_node": 0}, "must be above 0")],
)
def test_resources_tables_take_only_custom_resources(resources, why):
    with pytest.raises(ValueError, match=why):
        rl_config(trainer_resources=resources)


@pytest.fixture(scope="module")
def ray_here():
    """A one-node local cluster: 2 CPUs and a custom resource."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, resources={"head": 1}, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.ray
async def test_a_group_no_node_can_hold_is_a_cluster_error_naming_it_and_the_nodes(ray_here):
    # Two bundles that must go to two different nodes, on a one-node cluster: the totals
    # suffice, so only the wait can tell.
    apart = Group(ROLLOUT, [{"CPU": 0.5}, {"CPU": 0.5}], "STRICT_SPREAD")
    began = time.monotonic()
    with pytest.raises(ClusterError) as info:
        await reserve(ray_here, [apart], timeout_s=1.5)
    assert time.monotonic() - began < 10
    message = str(info.value)
    assert "could not place the rollout workers within 1.5 s" in message
    assert "2 x {CPU 0.5} (STRICT_SPREAD)" in message
    assert "GPU 0, CPU 2, head 1" in message  # what the one node has
    assert ray_here.util.placement_group_table() == {} or all(
        g["state"] == "REMOVED" for g in ray_here.util.placement_group_table().values()
    )  # nothing kept reserved

    with pytest.raises(ClusterError, match=r"more than it has in all: second_node 1 \(it has 0"):
        await reserve(ray_here, [Group(ROLLOUT, [{"CPU": 0.1, "second_node": 1}], "PACK")], 60)


@pytest.mark.ray
async def test_two_trainer_ranks_meet_at_rank_zeros_store_without_a_port_race(ray_here):
    config = rl_config(trainer_ranks=2)
    placed = await reserve(ray_here, plan_groups(config), timeout_s=30)
    try:
        rank_class = ray_here.remote(PolicyTrainerActor)
        ranks = [rank_class.options(**placed.options(TRAINER, r)).remote(r, 2) for r in range(2)]
        master = await ranks[0].rendezvous.remote()
        host, port = master.rsplit(":", 1)
        with socket.socket() as intruder, pytest.raises(OSError):
            intruder.bind((host, int(port)))  # rank 0's store still holds the port
        await gathered([rank.join.remote(master) for rank in ranks])

        def all_sum(_actor, value: float) -> float:  # runs inside the rank's process
            from obsspec.train import distributed

            return distributed.all_sum([value])[0]

        sums = await gathered([r.__ray_call__.remote(all_sum, n) for n, r in enumerate(ranks)])
        assert sums == [1.0, 1.0]  # 0 + 1 on both ranks: one gloo process group
        assert len(set(await gathered([r.node_id.remote() for r in ranks]))) == 1
    finally:
        for rank in locals().get("ranks", []):
            ray_here.kill(rank)
        placed.release(ray_here)


async def gathered(refs: list) -> list:
    return await asyncio.wait_for(asyncio.gather(*refs), 60)


@pytest.mark.parametrize(
    ("placement", "shared"),
    [
        ({"rollout_gpus": 1, "trainer_gpus": 4, "wm_trainer_gpus": 1}, False),  # whole GPUs
        ({}, False),  # CPUs only
        ({"rollout_gpus": 0.5, "trainer_gpus": 0.4, "wm_trainer_gpus": 0.1}, True),  # one GPU
        ({"rollout_gpus": 1, "trainer_gpus": 1, "wm_trainer_gpus": 0.25}, True),
    ],
)
def test_a_fraction_of_a_gpu_means_trainers_load_before_the_engines(placement, shared):
    """Roles that may share a GPU start in order (obsspec.rl.actors.Roles.start): trainers
    allocate before vLLM measures the GPU to size its cache."""
    assert rl_config(**placement).placement.shares_gpus is shared
