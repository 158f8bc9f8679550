"""How much nicer (lower CPU priority) an engine's processes run than the process that starts
them: the world model's engine yields its cores to real work.

    with nice_variable(10):               # the engine's parent, while vLLM spawns its processes
        AsyncLLM.from_engine_args(...)
    apply_from_environment()              # in the engine core (a vLLM plugin: pyproject.toml)
                                          # and in each worker (worker_extension)

Speculation is only worth anything if it never slows what is real. On a CPU machine the world
model's engine shares its cores with the sandboxes (2 cores: core 1 holds both), and at the
same priority its forward passes took half of that core from the commands for seconds at a
time: in `make demo`'s profile the speculative arm's `./ci.sh` commands, which only sleep,
started up to 10 s after they were sent (their shells runnable and waiting for core 1 while
core 0 idled) and ran 1.0 s longer on average than the same commands of the sequential arm,
enough to turn a saving into a loss. With the engine at niceness 10 a command's processes
get the core within a scheduler tick and the world model the rest of it (docs/benchmarks.md).

The parent puts the niceness its engine's processes should run at in NICE_VARIABLE (its own
plus the increment, capped at 19). Linux keeps a niceness per thread, and a new thread or
process starts with its creator's, so every thread an engine process has is raised to it here,
early (before vLLM starts its compute threads): the threads started after inherit it, and so
do the workers the engine core spawns (which raise nothing more). Only ever raised: a lower
niceness needs privileges.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path

NICE_VARIABLE = "OBSSPEC_VLLM_NICE"
MAX_NICE = 19
CPU_WORLD_MODEL_NICE = 10  # the world model's engine on the CPU build (rollout.engines)


def world_model_nice(setting: int | None, platform: str) -> int:
    """How much nicer the world model's engine runs: the setting, else CPU_WORLD_MODEL_NICE on
    the CPU build (where it shares a core with the sandboxes), else 0."""
    if setting is not None:
        return setting
    return CPU_WORLD_MODEL_NICE if platform == "cpu" else 0


def thread_ids() -> list[int]:
    """This process's threads (Linux); just the calling one where /proc has no task list."""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return [0]
    return [int(name) for name in os.listdir(tasks) if name.isdigit()]


def raise_threads_to(niceness: int) -> int:
    """Every thread of this process that runs at less than niceness now runs at it; returns
    the calling thread's niceness after. A thread that ended meanwhile is skipped."""
    for tid in thread_ids():
        with contextlib.suppress(ProcessLookupError):
            if os.getpriority(os.PRIO_PROCESS, tid) < niceness:
                os.setpriority(os.PRIO_PROCESS, tid, niceness)
    return os.getpriority(os.PRIO_PROCESS, 0)


def is_engine_process() -> bool:
    """vLLM's engine core or one of its workers, never the process that starts them (which
    loads vLLM's plugins too, while NICE_VARIABLE is set for its children)."""
    return multiprocessing.current_process().name != "MainProcess"


def apply_from_environment() -> int | None:
    """In an engine's process: its threads run at the niceness the parent asked (at least);
    the niceness it now runs at, or None where nothing was asked (or in the parent)."""
    value = os.environ.get(NICE_VARIABLE)
    if value is None or not is_engine_process():
        return None
    return raise_threads_to(int(value))


@contextlib.contextmanager
def nice_variable(increment: int) -> Iterator[None]:
    """NICE_VARIABLE set while the engine spawns its processes to this process's niceness plus
    increment (0: not set), then restored."""
    previous = os.environ.get(NICE_VARIABLE)
    if increment:
        target = min(MAX_NICE, os.getpriority(os.PRIO_PROCESS, 0) + int(increment))
        os.environ[NICE_VARIABLE] = str(target)
    else:
        os.environ.pop(NICE_VARIABLE, None)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(NICE_VARIABLE, None)
        else:
            os.environ[NICE_VARIABLE] = previous
