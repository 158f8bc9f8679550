"""Which CPU cores each role of a rollout runs on: obsspec's choice unless a setting says.

    settings, plan = place(settings, platform="cpu")      # settings with the cores filled in
    print(plan.describe())      # placement (2 cores): policy engine 0, world model 1, ...
    plan.as_dict()              # what --json output and the profile report record

Left to vLLM, every CPU engine binds its compute thread(s) to the same core (on 2 cores:
core 0 for both engines, core 1 for nothing), so the world model's engine starves the
policy's, its guesses arrive after the commands, and speculation slows episodes down (8
episodes at once on make demo's models: 20% slower than sequential; with the policy engine on
core 0 and the world model and sandboxes on core 1: 12% faster, docs/benchmarks.md). So
obsspec places the engines it starts, and the sandboxes beside them, itself:

    physical cores (m)   policy engine           world model   sandboxes
    1                    0                       0             (unpinned)
    2                    0                       1             1
    3                    0                       1             2
    4 to 7               the rest                m // 8, >= 1  the last m // 4
    8 and more           the rest, after core 0  m // 8        the last m // 4

From 8 physical cores the first is left to the driver (this process, vLLM's front ends and
schedulers, dockerd), as vLLM's own binding leaves one. Without a world model its cores go to
the policy; without a policy engine here (the oracle, or a policy on a server) they go to the
world model; with no engine on this machine's CPUs nothing is pinned (sandboxes would only
lose cores), and when the caller hands in an engine (tests, obsspec.api) obsspec places
nothing: it cannot know where that engine runs. Engines get one logical CPU per physical
core (vLLM's rule on x86: a hyperthread sibling adds contention, not speed); sandboxes get
every logical CPU of theirs.
Only the 2-core split is measured (docs/benchmarks.md); the larger ones follow the rule.
Where the world model's engine shares a core with the sandboxes, the commands come first: on
the CPU build its engine runs 10 nicer (`speculation.wm_nice`, obsspec.inference.engine_nice),
and the plan records and prints it.

A role set in the config (`engine.cpu_cores`, `speculation.wm_cpu_cores`, `sandbox_cpuset`)
keeps its cores, and the roles left are placed on the cores no setting names. `cpu_placement
= "off"` leaves every unset role to vLLM and Docker (what obsspec did before). On a GPU build
nothing is placed: the engines' GPU shares decide. Several workers on one machine (collect's
local Ray workers) each place themselves within their slice of the cores (`share`).
"""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from obsspec.inference.cpu_libraries import parse_cores
from obsspec.inference.engine_nice import world_model_nice

if TYPE_CHECKING:
    from obsspec.rollout.config import RolloutSettings

Role = Literal["policy", "world_model", "sandboxes"]
ROLES: tuple[Role, ...] = ("policy", "world_model", "sandboxes")
ROLE_NAMES = {"policy": "policy engine", "world_model": "world model", "sandboxes": "sandboxes"}
# Where each role's cores are set in a config (what a user writes to override obsspec).
ROLE_KEYS = {
    "policy": "engine.cpu_cores",
    "world_model": "speculation.wm_cpu_cores",
    "sandboxes": "sandbox_cpuset",
}
SYSFS_CPUS = Path("/sys/devices/system/cpu")
DRIVER_CORE_FROM = 8  # physical cores from which one is left to the driver


class PlacementMode(enum.StrEnum):
    auto = "auto"  # obsspec places the roles no setting places
    off = "off"  # vLLM and Docker decide for the roles no setting places


class Chosen(enum.StrEnum):
    """Who decided where a role runs."""

    setting = "setting"  # the config named its cores
    obsspec = "obsspec"  # this module's rule
    vllm = "vllm"  # left to vLLM's own binding (placement off, or no core left to give)
    unpinned = "unpinned"  # sandboxes left to the kernel's scheduler
    absent = "absent"  # the role does not run on this machine's CPUs (oracle, server, GPU)
    caller = "caller"  # an engine handed in by the caller, who placed it


@dataclass(frozen=True)
class CorePlan:
    """The cores of each role ('0', '1-3'; None: not pinned) and who chose them."""

    cores: int  # logical CPUs this process may use
    physical: int  # physical cores among them
    platform: str
    policy: str | None = None
    world_model: str | None = None
    sandboxes: str | None = None
    chosen: dict[str, str] = field(default_factory=dict)
    note: str = ""  # why some role could not be placed, when that happened
    world_model_nice: int = 0  # how much nicer its engine runs (obsspec.inference.engine_nice)

    def describe(self) -> str:
        """One line, printed when a run starts."""
        parts = []
        for role in ROLES:
            chosen = self.chosen.get(role, Chosen.absent)
            if chosen == Chosen.absent:
                continue
            where = getattr(self, role)
            shown = f"core {where}" if where and where.isdigit() else f"cores {where}"
            if where is None:
                shown = "vLLM's choice" if role != "sandboxes" else "any core"
            if role == "world_model" and self.world_model_nice:
                shown = f"{shown} at nice +{self.world_model_nice}"
            parts.append(f"{ROLE_NAMES[role]} {shown} ({chosen})")
        size = f"{self.cores} core{'s' if self.cores > 1 else ''}"
        if self.cores != self.physical:
            size = f"{self.cores} logical CPUs on {self.physical} cores"
        body = ", ".join(parts) if parts else "nothing to place"
        if self.platform != "cpu":
            body = f"engines on the GPU; {body}"
        line = f"placement ({size}): {body}"
        return f"{line}; {self.note}" if self.note else line

    @classmethod
    def of(cls, record: dict) -> CorePlan:
        """Back from `as_dict` (it crossed Ray, or was read from a file)."""
        fields = {role: record.get(role) for role in ROLES}
        return cls(
            record["cores"], record["physical_cores"], record["platform"], **fields,
            chosen=dict(record.get("chosen", {})), note=record.get("note", ""),
            world_model_nice=record.get("world_model_nice", 0),
        )  # fmt: skip

    def as_dict(self) -> dict:
        return {
            "cores": self.cores,
            "physical_cores": self.physical,
            "platform": self.platform,
            **{role: getattr(self, role) for role in ROLES},
            "chosen": dict(self.chosen),
            "world_model_nice": self.world_model_nice,
            **({"note": self.note} if self.note else {}),
        }


# --- the machine ------------------------------------------------------------------------------
def physical_cores(logical: Sequence[int], sysfs: Path = SYSFS_CPUS) -> list[list[int]]:
    """The logical CPUs grouped by physical core (hyperthread siblings together), in order of
    their first CPU; each CPU alone when the topology cannot be read."""
    groups: dict[tuple[str, str], list[int]] = {}
    for cpu in sorted(logical):
        topology = sysfs / f"cpu{cpu}" / "topology"
        try:
            package = (topology / "physical_package_id").read_text().strip()
            core = (topology / "core_id").read_text().strip()
        except OSError:
            package, core = "cpu", str(cpu)
        groups.setdefault((package, core), []).append(cpu)
    return sorted(groups.values(), key=lambda group: group[0])


def usable_cores() -> list[int]:
    """The logical CPUs this process may run on (a container's or taskset's share)."""
    return sorted(os.sched_getaffinity(0))


# --- the rule ---------------------------------------------------------------------------------
def split(groups: list[list[int]], *, policy: bool, world_model: bool) -> dict[str, list[int]]:
    """Physical-core indices for each role to place (see the module's table); the sandboxes
    are always placed, beside the engines or, with no engine to place, on every core given."""
    m = len(groups)
    everyone = list(range(m))
    if m == 0:
        return {}
    if not (policy or world_model):
        return {"sandboxes": everyone}
    if m == 1:
        return {"policy": [0], "world_model": [0], "sandboxes": [0]}
    if m <= 3:
        sandboxes, engines = [m - 1], everyone[: max(1, m - 1)]
        if policy and world_model:
            return {"policy": [0], "world_model": [1], "sandboxes": sandboxes}
    else:
        first = 1 if m >= DRIVER_CORE_FROM else 0
        sandboxes = everyone[m - max(1, m // 4) :]
        engines = everyone[first : sandboxes[0]]
        if policy and world_model:
            wm = max(1, m // 8)
            return {"policy": engines[:-wm], "world_model": engines[-wm:], "sandboxes": sandboxes}
    return {"policy" if policy else "world_model": engines, "sandboxes": sandboxes}


def core_list(cpus: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (as Linux writes cpusets)."""
    runs: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][-1] + 1:
            runs[-1].append(cpu)
        else:
            runs.append([cpu])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def slice_of(groups: list[list[int]], share: tuple[int, int]) -> list[list[int]]:
    """Worker `index` of `count` on one machine: its contiguous slice of the physical cores
    (all of them when there are fewer cores than workers: they then share)."""
    index, count = share
    if count <= 1 or len(groups) < count:
        return groups
    size = len(groups) // count
    return groups[index * size : (index + 1) * size]


def plan_cores(
    groups: list[list[int]],
    *,
    policy: bool,
    world_model: bool,
    fixed: dict[str, str | None],
    platform: str = "cpu",
    mode: PlacementMode = PlacementMode.auto,
    share: tuple[int, int] = (0, 1),
    given: tuple[bool, bool] = (False, False),
) -> CorePlan:
    """Where each role runs. groups: the physical cores (logical CPUs each); policy,
    world_model: whether that engine runs on this machine (given: handed in by the caller,
    who placed it); fixed: the cores a setting gives a role (None: unset)."""
    starts = {"policy": policy, "world_model": world_model}
    plan = {role: fixed.get(role) for role in ROLES}
    chosen = {role: initial_choice(role, plan[role], policy, world_model, given) for role in ROLES}
    local = platform == "cpu" and any(starts.values())  # an engine of ours on these CPUs
    open_roles = [r for r in ROLES if chosen[r] in (Chosen.vllm, Chosen.unpinned)]
    note = ""
    if any(given):  # the caller placed its engines; where, this module cannot know
        note = "engines handed in by the caller: obsspec places nothing"
    elif local and mode == PlacementMode.auto and open_roles:
        taken = set().union(*(parse_cores(c) for c in plan.values() if c))
        free = [g for g in slice_of(groups, share) if not taken.intersection(g)]
        if not free:
            note = "the settings leave no core free: the roles they do not name are not pinned"
        to_place = {r: starts[r] and r in open_roles for r in ("policy", "world_model")}
        for role, indices in split(free, **to_place).items():
            if role in open_roles and indices:
                picked = [free[i] for i in indices]
                # Engines: one logical CPU per physical core; sandboxes: all of them.
                cpus = (
                    [g[0] for g in picked]
                    if role != "sandboxes"
                    else [c for g in picked for c in g]
                )
                plan[role], chosen[role] = core_list(cpus), Chosen.obsspec
    return CorePlan(
        cores=sum(len(g) for g in groups),
        physical=len(groups),
        platform=platform,
        **plan,
        chosen={role: str(c) for role, c in chosen.items()},
        note=note,
    )


def initial_choice(
    role: str, cores: str | None, policy: bool, world_model: bool, given: tuple[bool, bool]
) -> Chosen:
    """Who places the role before obsspec's rule runs."""
    if role == "sandboxes":
        return Chosen.setting if cores is not None else Chosen.unpinned
    runs, handed_in = (policy, given[0]) if role == "policy" else (world_model, given[1])
    if not runs:
        return Chosen.absent
    if handed_in:
        return Chosen.caller
    return Chosen.setting if cores is not None else Chosen.vllm


def machine_plan(
    *, world_model: bool = True, platform: str = "cpu", fixed: dict[str, str | None] | None = None
) -> CorePlan:
    """The default placement of a policy engine, (with world_model) a world model's engine
    and sandboxes on this machine, `fixed` roles kept where given: for `obsspec doctor`,
    obsspec.api and bench/ scripts that start their own engines."""
    groups = physical_cores(usable_cores())
    plan = plan_cores(
        groups, policy=True, world_model=world_model, fixed=fixed or {}, platform=platform
    )
    if world_model:
        plan = dataclasses.replace(plan, world_model_nice=world_model_nice(None, platform))
    return plan


# --- rollout settings -------------------------------------------------------------------------
def engines_here(settings: RolloutSettings) -> tuple[bool, bool]:
    """Whether a rollout with these settings starts the policy's and the world model's engines
    in this process (not for the oracle, nor for a policy on a server)."""
    policy = not settings.is_oracle and not settings.engine.server
    spec = settings.speculation
    return policy, bool(spec.enabled and spec.world_model)


def place(
    settings: RolloutSettings,
    platform: str,
    *,
    groups: list[list[int]] | None = None,
    share: tuple[int, int] = (0, 1),
    given: tuple[bool, bool] = (False, False),
) -> tuple[RolloutSettings, CorePlan]:
    """The settings with every role's cores filled in as planned, and the plan. given: the
    policy's and the world model's engines were handed in by the caller (not placed here)."""
    policy, world_model = engines_here(settings)
    groups = physical_cores(usable_cores()) if groups is None else groups
    fixed: dict[str, str | None] = {
        "policy": settings.engine.cpu_cores,
        "world_model": settings.speculation.wm_cpu_cores,
        "sandboxes": settings.sandbox_cpuset,
    }
    plan = plan_cores(
        groups,
        policy=policy,
        world_model=world_model,
        fixed=fixed,
        platform=platform,
        mode=settings.cpu_placement,
        share=share,
        given=given,
    )
    if world_model and not given[1]:  # an engine handed in runs as its caller started it
        nice = world_model_nice(settings.speculation.wm_nice, platform)
        plan = dataclasses.replace(plan, world_model_nice=nice)
    placed = settings.model_copy(
        update={
            "engine": settings.engine.model_copy(update={"cpu_cores": plan.policy}),
            "speculation": settings.speculation.model_copy(
                update={"wm_cpu_cores": plan.world_model, "wm_nice": plan.world_model_nice}
            ),
            "sandbox_cpuset": plan.sandboxes,
        }
    )
    return placed, plan
