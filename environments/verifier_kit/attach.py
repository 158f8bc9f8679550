"""Which tasks' verifiers the kit serves, decided once before a run: each such Task carries
its KitPlan (Task.verifier_kit), which the verifier uploads after the agent phase.

    tasks = await with_verifier_kits(tasks, mode, network, cache_dir, note)

`auto` (the default) serves verifiers without a network (`--network none`), the only ones
that cannot fetch what they ask for; `on` serves every verifier (the same bytes every time,
and no 40 MB uv download per episode); `off` none. A verifier is served when its script
fetches something the kit holds (environments.verifier_kit.needs): uv, its installer, or
Python packages. What the kit could not prepare is said before the run, per task; the
verifier that needs it later fails with a VerifierError, never a silent 0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from pathlib import Path

from obsspec.environments.node_lock import node_lock
from obsspec.environments.sandbox import NetworkPolicy
from obsspec.environments.tasks.model import Task
from obsspec.environments.verifier_kit.needs import KitNeeds, read_needs
from obsspec.environments.verifier_kit.plan import KitMode, KitPlan
from obsspec.environments.verifier_kit.prepare import kit_root, prepare_kit
from obsspec.environments.verifier_kit.stage import stage_kit

LOCK_KEY = "verifier-kit"


def kit_offline(network: NetworkPolicy) -> bool:
    """Whether the verifier runs without a network under this policy."""
    return NetworkPolicy(network) is NetworkPolicy.none


def kit_applies(mode: KitMode, network: NetworkPolicy) -> bool:
    mode = KitMode(mode)
    return mode is KitMode.on or (mode is KitMode.auto and kit_offline(network))


def task_needs(task: Task) -> KitNeeds:
    return read_needs(task.verifier_script, task.tests_dir)


async def with_verifier_kits(
    tasks: Iterable[Task],
    mode: KitMode,
    network: NetworkPolicy,
    cache_dir: Path,
    note: Callable[[str], None] = lambda _: None,
) -> list[Task]:
    """tasks, those whose verifiers the kit serves carrying their plan."""
    tasks = list(tasks)
    plans = await kit_plans(tasks, mode, network, cache_dir, note)
    return [with_kit(task, plans.get(task.id)) for task in tasks]


def with_kit(task: Task, plan: KitPlan | None) -> Task:
    if plan is None or task.verifier_kit is not None:
        return task
    return task.model_copy(update={"verifier_kit": plan})


async def kit_plans(
    tasks: Iterable[Task],
    mode: KitMode,
    network: NetworkPolicy,
    cache_dir: Path,
    note: Callable[[str], None] = lambda _: None,
) -> dict[str, KitPlan]:
    """task id -> the kit its verifier gets, for the tasks the kit serves in this mode."""
    tasks = list(tasks)
    if not kit_applies(mode, network):
        return {}
    plans: dict[str, KitPlan] = {}
    for task, _, plan in await planned(tasks, cache_dir, kit_offline(network)):
        if plan is None:
            continue
        plans[task.id] = plan
        for problem in (*plan.problems, *plan.notes):
            note(f"verifier kit: task {task.id}: {problem}")
    if plans:
        note(describe(list(plans.values()), len(tasks), cache_dir))
    return plans


async def planned(
    tasks: Iterable[Task],
    cache_dir: Path,
    offline: bool,
    on_fetch: Callable[[Task, KitNeeds], None] = lambda _task, _needs: None,
) -> list[tuple[Task, KitNeeds, KitPlan | None]]:
    """Each task, what its verifier fetches, and the kit's plan for it (None: it fetches
    nothing the kit serves); one plan per distinct set of needs, on_fetch told of each."""
    by_needs: dict[KitNeeds, KitPlan] = {}
    found = []
    for task in tasks:
        needs = await asyncio.to_thread(task_needs, task)
        if needs.served and needs not in by_needs:
            on_fetch(task, needs)
            by_needs[needs] = await kit_plan(needs, cache_dir, offline)
        found.append((task, needs, by_needs.get(needs)))
    return found


async def kit_plan(needs: KitNeeds, cache_dir: Path, offline: bool) -> KitPlan:
    """The plan for needs: fetched (under the node's lock: one fetcher per machine) and
    staged, where not cached yet."""
    async with node_lock(LOCK_KEY):
        plan = await asyncio.to_thread(prepare_kit, needs, cache_dir, offline=offline)
        staged = await asyncio.to_thread(stage_kit, kit_root(cache_dir), plan)
    return plan.model_copy(update={"staged": staged})


async def task_kit_rows(
    tasks: Iterable[Task], cache_dir: Path, progress: Callable[[str], None] = lambda _: None
) -> tuple[list[dict], Path]:
    """`obsspec env kit`'s rows: per task, what its verifier needs and what the kit holds for
    it (fetched now where missing; the apt-get shims are staged by the run that needs them),
    and the kit's directory."""

    def fetching(task: Task, needs: KitNeeds) -> None:
        progress(f"fetching for {task.id}: {kit_wants(needs)}")

    rows = [
        {"task": task.id, "needs": None}
        if plan is None
        else {"task": task.id, "needs": needs.as_dict(), **plan.summary()}
        for task, needs, plan in await planned(tasks, cache_dir, True, fetching)
    ]
    return rows, kit_root(cache_dir)


def kit_wants(needs: KitNeeds) -> str:
    uv = [f"uv {needs.uv_version or '(newest)'}"] if needs.uv else []
    return ", ".join(uv + list(needs.requirements))


def describe(plans: list[KitPlan], total: int, cache_dir: Path) -> str:
    versions = sorted({p.uv_version for p in plans if p.uv_version})
    wheels = {w.name for p in plans for w in p.wheels}
    uv = f"uv {', '.join(versions)}; " if versions else ""
    where = "offline" if any(p.offline for p in plans) else "from the kit"
    return (
        f"verifier kit: serves {len(plans)} of {total} tasks' verifiers {where} "
        f"({uv}{len(wheels)} wheels; {kit_root(cache_dir)})"
    )
