"""Where obsspec places the engines and sandboxes on a CPU machine, for any core count."""

from __future__ import annotations

import pytest

from obsspec.inference.cpu_libraries import parse_cores
from obsspec.rollout.config import RolloutSettings
from obsspec.rollout.cores import CorePlan, core_list, physical_cores, place, plan_cores
from obsspec.rollout.events import WorkerReady
from obsspec.rollout.stats import CollectStats


def cores(n: int) -> list[list[int]]:
    return [[i] for i in range(n)]


def planned(n: int, **kwargs) -> CorePlan:
    kwargs.setdefault("policy", True)
    kwargs.setdefault("world_model", True)
    kwargs.setdefault("fixed", {})
    return plan_cores(cores(n), **kwargs)


def test_two_cores_put_the_policy_alone_and_the_world_model_with_the_sandboxes():
    plan = planned(2)
    assert (plan.policy, plan.world_model, plan.sandboxes) == ("0", "1", "1")
    assert set(plan.chosen.values()) == {"obsspec"}
    assert plan.describe() == (
        "placement (2 cores): policy engine core 0 (obsspec), world model core 1 (obsspec), "
        "sandboxes core 1 (obsspec)"
    )
    alone = planned(2, world_model=False)  # collect without a world model
    assert (alone.policy, alone.world_model, alone.sandboxes) == ("0", None, "1")
    assert alone.chosen["world_model"] == "absent"


@pytest.mark.parametrize("n", range(2, 65))
@pytest.mark.parametrize(("policy", "world_model"), [(True, True), (True, False), (False, True)])
def test_every_core_count_gives_every_role_its_own_cores_within_the_machine(n, policy, world_model):
    plan = planned(n, policy=policy, world_model=world_model)
    roles = {"policy": plan.policy, "world_model": plan.world_model, "sandboxes": plan.sandboxes}
    used = {role: parse_cores(c) for role, c in roles.items() if c is not None}
    assert set(used) == {r for r, on in (("policy", policy), ("world_model", world_model))
                         if on} | {"sandboxes"}  # fmt: skip
    assert all(cpus and cpus <= set(range(n)) for cpus in used.values())
    if n >= 3:  # enough cores: no two roles share one
        assert sum(len(c) for c in used.values()) == len(set().union(*used.values()))
    if policy and n >= 4:  # the policy engine, the hot path, gets the most
        assert len(used["policy"]) >= max(len(c) for c in used.values())
    if n >= 8:
        assert 0 not in set().union(*used.values())  # left to the driver


def test_settings_win_and_the_rest_go_where_they_leave_room():
    plan = planned(4, fixed={"policy": "0-1"})
    assert plan.policy == "0-1" and plan.chosen["policy"] == "setting"
    assert not parse_cores(plan.world_model) & {0, 1}
    assert not parse_cores(plan.sandboxes) & {0, 1}
    forced = planned(2, fixed={"policy": "0", "world_model": "0", "sandboxes": "0"})
    assert (forced.policy, forced.world_model, forced.sandboxes) == ("0", "0", "0")
    assert set(forced.chosen.values()) == {"setting"}


def test_no_free_core_leaves_the_rest_unpinned_and_says_so():
    plan = planned(2, fixed={"policy": "0-1"})
    assert plan.world_model is None and plan.sandboxes is None
    assert plan.chosen["world_model"] == "vllm" and "no core free" in plan.note


def test_off_on_gpu_and_with_engines_handed_in_nothing_is_placed():
    off = planned(2, mode="off")
    assert (off.policy, off.world_model, off.sandboxes) == (None, None, None)
    assert off.chosen == {"policy": "vllm", "world_model": "vllm", "sandboxes": "unpinned"}
    gpu = planned(8, platform="cuda")
    assert (gpu.policy, gpu.sandboxes) == (None, None) and "GPU" in gpu.describe()
    given = planned(2, given=(True, False))
    assert given.chosen["policy"] == "caller" and given.sandboxes is None
    oracle = planned(2, policy=False, world_model=False)  # no engine here: sandboxes keep all
    assert oracle.sandboxes is None and oracle.chosen["sandboxes"] == "unpinned"


def test_workers_sharing_a_machine_take_a_slice_each():
    first = planned(8, share=(0, 2))
    second = planned(8, share=(1, 2))
    mine = [parse_cores(c) for c in (first.policy, first.world_model, first.sandboxes)]
    theirs = [parse_cores(c) for c in (second.policy, second.world_model, second.sandboxes)]
    assert set().union(*mine) <= {0, 1, 2, 3} and set().union(*theirs) <= {4, 5, 6, 7}


def test_engines_take_one_hyperthread_of_each_core_sandboxes_all(tmp_path):
    for cpu, core in enumerate([0, 1, 2, 3, 0, 1, 2, 3]):  # 4 cores, 2 threads each
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text("0\n")
        (topology / "core_id").write_text(f"{core}\n")
    groups = physical_cores(range(8), sysfs=tmp_path)
    assert groups == [[0, 4], [1, 5], [2, 6], [3, 7]]
    plan = plan_cores(groups, policy=True, world_model=True, fixed={})
    assert plan.policy == "0-1" and plan.world_model == "2" and plan.sandboxes == "3,7"
    assert "8 logical CPUs on 4 cores" in plan.describe()
    assert physical_cores([0, 1], sysfs=tmp_path / "missing") == [[0], [1]]


def test_core_list_round_trips():
    assert core_list([5, 0, 1, 2]) == "0-2,5"
    assert parse_cores(core_list([0, 2, 3, 4, 9])) == {0, 2, 3, 4, 9}


def test_place_fills_the_settings_the_engines_and_pools_read():
    settings = RolloutSettings.model_validate(
        {"speculation": {"enabled": True, "world_model": "wm"}, "engine": {"cpu_cores": "0"}}
    )
    placed, plan = place(settings, "cpu", groups=cores(2))
    assert placed.engine.cpu_cores == "0" and plan.chosen["policy"] == "setting"
    assert placed.speculation.wm_cpu_cores == "1" and placed.sandbox_cpuset == "1"
    # the world model's engine yields its core to the sandboxes (obsspec.inference.engine_nice)
    assert placed.speculation.wm_nice == plan.world_model_nice == 10
    assert "world model core 1 at nice +10 (obsspec)" in plan.describe()
    assert CorePlan.of(plan.as_dict()) == plan
    oracle, plan = place(RolloutSettings(policy="oracle"), "cpu", groups=cores(2))
    assert oracle.sandbox_cpuset is None and plan.describe().endswith("(unpinned)")
    off, _ = place(settings.model_copy(update={"cpu_placement": "off"}), "cpu", groups=cores(2))
    assert off.speculation.wm_cpu_cores is None and off.engine.cpu_cores == "0"


def test_a_bad_core_list_is_refused_naming_the_key_and_a_bare_number_is_one_core():
    with pytest.raises(ValueError, match=r"sandbox_cpuset(.|\n)*'one' is not a list of CPU cores"):
        RolloutSettings.model_validate({"sandbox_cpuset": "one"})
    # `--set engine.cpu_cores=0`: the shell drops the quotes, TOML reads a number
    settings = RolloutSettings.model_validate({"engine": {"cpu_cores": 0}, "sandbox_cpuset": 1})
    assert (settings.engine.cpu_cores, settings.sandbox_cpuset) == ("0", "1")


def test_collect_json_records_each_workers_placement():
    stats = CollectStats(total=2, already_done=0)
    plan = planned(2).as_dict()
    stats.update(WorkerReady(0, 2, plan))
    assert stats.summary()["placement"] == plan
    stats.update(WorkerReady(1, 2, plan))
    assert set(stats.summary()["placement"]) == {"0", "1"}
