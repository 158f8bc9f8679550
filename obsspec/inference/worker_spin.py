"""How long vLLM's worker busy-waits for its next step before it sleeps: the one place that
knows where vLLM 0.32 keeps that figure, and the one place that changes it.

    with spin_variable(0.05):             # the engine's parent, while vLLM spawns its processes
        AsyncLLM.from_engine_args(...)
    apply_from_environment()              # in each worker, as vLLM builds it (worker_extension)

vLLM's worker takes each step from a shared-memory queue. After reading one it spins
(sched_yield in a loop) for `busy_loop_s` seconds before it sleeps on a socket that the queue's
writer pings with every step (shm_broadcast.SpinCondition). vLLM fixes that at 1 s, a default
of the class, not a setting: on a GPU machine it saves microseconds a step. On a CPU machine it
burns a core-second after every answer, on cores that the sandboxes and the other engine
share: a world-model engine asked once per command turn spins about as long as it predicts.
The CPU default here is 50 ms: steps that follow one another keep the worker spinning, and
a gap longer than that costs one socket wake-up. With 5 ms the 135M model decoded 5-7% slower
(a wake-up between most steps on a busy machine); with 50 ms as fast as with vLLM's second,
and 0.06 core-seconds burnt after a request instead of 1.0. Measured in docs/benchmarks.md
(`bench/engine_cpu_setup.py`).

The figure can only be changed inside the worker process, before the worker opens its queues.
vLLM imports the worker extension's module (obsspec.inference.worker_extension) in the worker
at that moment, and that module applies what the parent put in SPIN_VARIABLE. A vLLM whose
SpinCondition has no `busy_loop_s` is refused there (EngineError: the engine does not start),
never ignored.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterator

from obsspec.errors import EngineError

SPIN_VARIABLE = "OBSSPEC_VLLM_WORKER_SPIN_S"
CPU_DEFAULT_SPIN_S = 0.05
VLLM_SPIN_S = 1.0  # what vLLM 0.32's SpinCondition spins unless told
PARAMETER = "busy_loop_s"


def spin_condition():
    from vllm.distributed.device_communicators import shm_broadcast

    return shm_broadcast.SpinCondition


def default_index(function) -> int:
    """Where PARAMETER's default sits in `function.__defaults__`."""
    with_defaults = [
        name
        for name, p in inspect.signature(function).parameters.items()
        if p.default is not inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if PARAMETER not in with_defaults:
        raise EngineError(
            f"this vLLM's worker queue (shm_broadcast.SpinCondition) has no {PARAMETER}: "
            "the worker's idle spin cannot be set (worker_spin_s); set it to null to leave "
            "vLLM's own"
        )
    return with_defaults.index(PARAMETER)


def set_worker_spin(seconds: float) -> None:
    """Every SpinCondition made from now on in this process spins SECONDS before sleeping."""
    init = spin_condition().__init__
    defaults = list(init.__defaults__)
    defaults[default_index(init)] = float(seconds)
    init.__defaults__ = tuple(defaults)


def worker_spin() -> float:
    """The spin a SpinCondition made now in this process gets."""
    init = spin_condition().__init__
    return init.__defaults__[default_index(init)]


def apply_from_environment() -> float | None:
    """In a worker process: the spin its parent asked for (None: vLLM's own, untouched)."""
    value = os.environ.get(SPIN_VARIABLE)
    if value is None:
        return None
    set_worker_spin(float(value))
    return float(value)


@contextlib.contextmanager
def spin_variable(seconds: float | None) -> Iterator[None]:
    """SPIN_VARIABLE set while the engine spawns its processes (None: not set), then restored."""
    previous = os.environ.get(SPIN_VARIABLE)
    if seconds is not None:
        os.environ[SPIN_VARIABLE] = repr(float(seconds))
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(SPIN_VARIABLE, None)
        else:
            os.environ[SPIN_VARIABLE] = previous
