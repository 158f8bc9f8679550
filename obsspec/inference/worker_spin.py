"""How long vLLM's worker busy-waits for its next step before it sleeps: the one place that
knows where vLLM 0.32 keeps that figure, and the one place that changes it.

    with spin_variable(0.05, core=0.0):   # the engine's parent, while vLLM spawns its processes
        AsyncLLM.from_engine_args(...)
    apply_from_environment()              # in each worker, as vLLM builds it (worker_extension)
    apply_in_engine_core()                # in the engine core (a vLLM plugin: pyproject.toml)

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

The engine core (vLLM's scheduler, a process of its own) reads each step's result from the
worker through the same kind of queue, and spins the same second while it waits: for the whole
of every forward pass, which on a CPU lasts 10-100 ms, so a decoding engine burns a second core
(about 0.6 of one measured in `obsspec profile`'s policy engine) besides its worker's. That
core is the one the sandboxes and the world model's engine run on. So on the CPU build the
engine core does not spin at all (`core` = 0): it sleeps on the socket until the worker's
result is written, one wake-up a step, which a step of tens of milliseconds does not notice.
`[*.engine] engine_core_spin_s` sets it (vLLM's own on GPU), apart from `worker_spin_s`.

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
CORE_SPIN_VARIABLE = "OBSSPEC_VLLM_ENGINE_CORE_SPIN_S"
CPU_DEFAULT_SPIN_S = 0.05
CPU_ENGINE_CORE_SPIN_S = 0.0  # the engine core waits a whole forward pass: never worth a spin
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


def apply_in_engine_core() -> float | None:
    """vLLM's general plugin (loaded in each of its processes): in the engine core, before it
    builds the queues it reads the worker's results from, the spin its parent asked for there
    (None: another process, or vLLM's own)."""
    import multiprocessing

    value = os.environ.get(CORE_SPIN_VARIABLE)
    if value is None or not multiprocessing.current_process().name.startswith("EngineCore"):
        return None
    set_worker_spin(float(value))
    return float(value)


@contextlib.contextmanager
def spin_variable(seconds: float | None, *, core: float | None = None) -> Iterator[None]:
    """SPIN_VARIABLE (the workers') and CORE_SPIN_VARIABLE (the engine core's) set while the
    engine spawns its processes (None: not set), then restored."""
    values = {SPIN_VARIABLE: seconds, CORE_SPIN_VARIABLE: core}
    previous = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        if value is not None:
            os.environ[name] = repr(float(value))
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
