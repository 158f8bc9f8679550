"""How much nicer (lower CPU priority) an engine's processes run than the process that starts
them: the world model's engine yields its cores to real work.

    before = child_pids()
    AsyncLLM.from_engine_args(...)                 # returns once the engine is ready
    renice_processes(child_pids() - before, 10)    # its engine core and workers, every thread

Speculation is only worth anything if it never slows what is real. On a CPU machine the world
model's engine shares its cores with the sandboxes (2 cores: core 1 holds both), and at the
same priority its forward passes took that core from the commands for seconds at a time: in
`make demo`'s profile the speculative arm's `./ci.sh` commands, which only sleep, started up to
10.8 s after they were sent (their shells runnable and waiting for core 1 while core 0 idled)
and ran 1.0 s longer on average than the same commands of the sequential arm, enough to turn a
saving into a loss. At niceness 10 a command's processes get the core ahead of the engine
(docs/benchmarks.md).

The engine is reniced once it is ready, not while it starts: loading the model and sizing the
KV cache block the run, and at niceness 10 on a busy core they would take many times longer.
Linux keeps a niceness per thread, and a new thread starts with its creator's, so every thread
the engine's processes have then is raised; the threads they start later inherit it. Only ever
raised (a lower niceness needs privileges), capped at 19.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

MAX_NICE = 19
CPU_WORLD_MODEL_NICE = 10  # the world model's engine on the CPU build (rollout.engines)


def world_model_nice(setting: int | None, platform: str) -> int:
    """How much nicer the world model's engine runs: the setting, else CPU_WORLD_MODEL_NICE on
    the CPU build (where it shares a core with the sandboxes), else 0."""
    if setting is not None:
        return setting
    return CPU_WORLD_MODEL_NICE if platform == "cpu" else 0


def child_pids() -> set[int]:
    """Every process this one started, and theirs (an engine's core and its workers)."""
    import psutil

    return {child.pid for child in psutil.Process().children(recursive=True)}


def thread_ids(pid: int) -> list[int]:
    """The threads of process pid ([] once it has ended)."""
    tasks = Path(f"/proc/{pid}/task")
    with contextlib.suppress(OSError):
        return [int(name) for name in os.listdir(tasks) if name.isdigit()]
    return []


def renice_processes(pids: Iterable[int], increment: int) -> int:
    """Every thread of these processes runs at least `increment` nicer than this process
    (capped at MAX_NICE); returns that niceness. A thread or process that ended meanwhile is
    skipped; one this process may not renice is an error (PermissionError), never ignored."""
    target = min(MAX_NICE, os.getpriority(os.PRIO_PROCESS, 0) + increment)
    if increment <= 0:
        return target
    for pid in pids:
        for tid in thread_ids(pid):
            with contextlib.suppress(ProcessLookupError):
                if os.getpriority(os.PRIO_PROCESS, tid) < target:
                    os.setpriority(os.PRIO_PROCESS, tid, target)
    return target
