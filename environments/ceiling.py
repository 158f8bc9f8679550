"""The run's ceiling on what a task may ask of its sandbox.

A task's files name its cpus, memory and disk (Harbor's [environment] cpus, memory, storage);
a careless or hostile one could ask for `memory = "512G"` and take the host. The user's
ceiling (the `sandbox` table of [collect], [rl] and [profile]; its cpus no more than the
daemon's machine has: within_machine) caps each: a task that asks more gets the ceiling, and
the run says so once per task (a note naming the task, what it asked and what it got:
`capped_note`), never silently.

    limits, lowered = capped(task.limits, ceiling)   # lowered: ["memory 524288 MiB -> 8192 MiB"]
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import Field

from obsspec.config import StrictModel
from obsspec.environments.sandbox import SandboxLimits


class SandboxCeiling(StrictModel):
    """The most any task's sandbox gets, whatever the task asks."""

    max_cpus: float = Field(default=4.0, gt=0, description="CPU quota, cores.")
    max_memory_mb: int = Field(default=8192, ge=64, description="Memory limit, MiB.")
    max_pids: int = Field(default=4096, ge=16, description="Processes at once.")
    max_storage_mb: int = Field(
        default=10240,
        ge=1,
        description="Disk a sandbox may write, MiB (a task that names no `storage` gets "
        "4096, environments/disk_limit.py).",
    )


# SandboxLimits field -> (ceiling field, how the note names it, its unit)
CAPPED = {
    "cpus": ("max_cpus", "cpus", ""),
    "memory_mb": ("max_memory_mb", "memory", " MiB"),
    "pids": ("max_pids", "pids", ""),
    "storage_mb": ("max_storage_mb", "storage", " MiB"),
}


def capped(limits: SandboxLimits, ceiling: SandboxCeiling) -> tuple[SandboxLimits, list[str]]:
    """limits under the ceiling, and what was lowered ("memory 524288 MiB -> 8192 MiB").
    A disk limit the task did not name is the default, itself capped (not a task's ask)."""
    update: dict[str, float | int] = {}
    lowered: list[str] = []
    for name, (top_name, label, unit) in CAPPED.items():
        asked, top = getattr(limits, name), getattr(ceiling, top_name)
        if name == "storage_mb" and asked is None:
            if limits.disk_mb > top:
                update[name] = top
            continue
        if asked > top:
            update[name] = top
            lowered.append(f"{label} {number(asked)}{unit} -> {number(top)}{unit}")
    return limits.model_copy(update=update), lowered


def within_machine(ceiling: SandboxCeiling, client) -> SandboxCeiling:
    """The ceiling with max_cpus no more than the Docker daemon's machine has: Docker refuses
    to start a container with a larger quota ("Range of CPUs is from 0.01 to 2.00")."""
    cores = client.info().get("NCPU") or 0
    if 0 < cores < ceiling.max_cpus:
        return ceiling.model_copy(update={"max_cpus": float(cores)})
    return ceiling


def number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def capped_note(tasks: Iterable[tuple[str, SandboxLimits]], ceiling: SandboxCeiling) -> list[str]:
    """One line per task whose limits the ceiling lowers, naming the task and each limit."""
    lines = []
    for task_id, limits in tasks:
        _, lowered = capped(limits, ceiling)
        if lowered:
            lines.append(
                f"task {task_id} asks more than the run's sandbox ceiling and gets it: "
                f"{', '.join(lowered)} (raise [<pipeline>.sandbox] max_* to give it more)"
            )
    return lines
