"""The stages of bench/gpu_check.py, run one group per process (the driver starts them):

    python bench/gpu_child.py GROUP --out OUT [--stages a,b] [--tiny] [...]

A group's stages share what lives only in its process (the engines, for `serve`); between
groups what a stage made is on disk under OUT/state/ (the models, the trained weights and
the probe, the episodes played). Each stage writes OUT/stages/<name>.started when it begins
and OUT/stages/<name>.json when it ends (status, seconds, error tail, memory), so the
driver knows where a group that hung or crashed was. SIGUSR1 dumps every thread's traceback
to stderr (the driver sends it before killing a group past its time). A package a group
needs that does not import makes its stages `skipped`, with the import's error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import importlib
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # gpu_stages beside it

GROUPS = {  # in the order the driver runs them
    "models": ("models",),
    "grpo": ("grpo",),
    "serve": ("engines", "episodes", "sync"),
    "cotrain": ("cotrain",),
}
PACKAGES = {
    "models": ("torch", "transformers"),
    "grpo": ("torch", "transformers"),
    "serve": ("torch", "vllm"),
    "cotrain": ("torch", "transformers"),
}
NEEDS = {  # stage -> the stages whose results it uses
    "models": (),
    "grpo": ("models",),
    "engines": ("models",),
    "episodes": ("engines",),
    "sync": ("engines", "grpo"),
    "cotrain": ("models", "episodes"),
}
ERROR_TAIL = 3000


def stage_dir(out: Path) -> Path:
    return out / "stages"


def read_entry(out: Path, name: str) -> dict:
    path = stage_dir(out) / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def write_json(path: Path, data) -> None:
    """Atomically: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def memory_now() -> dict:
    """GPU 0's peak (this process, since the stage began) and free memory; on CPUs this
    process's peak resident memory."""
    import resource

    import torch
    from gpu_stages import peak_gib

    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info(0)
        return {
            "peak_gib": peak_gib(),
            "free_gib": round(free / (1 << 30), 2),
            "total_gib": round(total / (1 << 30), 2),
        }
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_rss_gib": round(peak_kib / (1 << 20), 2)}


class Stages:
    """The stage entries of one group's process."""

    def __init__(self, out: Path, selected: set[str]) -> None:
        self.out = out
        self.selected = selected

    @contextlib.contextmanager
    def stage(self, name: str):
        """Yields the stage's entry to fill, or None when it does not run (not selected, or
        a stage it needs did not pass: the entry says which)."""
        if name not in self.selected:
            yield None
            return
        missing = [n for n in NEEDS[name] if read_entry(self.out, n).get("status") != "ok"]
        if missing:
            self.write(name, {"status": "skipped", "reason": f"needs {', '.join(missing)}"})
            yield None
            return
        write_json(stage_dir(self.out) / f"{name}.started", {"at": time.time()})
        reset_peak()
        entry: dict = {}
        started = time.monotonic()
        try:
            yield entry
            entry["status"] = "ok"
        except Exception as e:  # recorded, never silent: the JSON says which stage and why
            entry["status"] = "failed"
            entry["error"] = f"{type(e).__name__}: {e}"
            entry["error_tail"] = traceback.format_exc()[-ERROR_TAIL:]
            print(traceback.format_exc(), file=sys.stderr, flush=True)
        entry["seconds"] = round(time.monotonic() - started, 2)
        entry["memory"] = memory_now()
        self.write(name, entry)

    def write(self, name: str, entry: dict) -> None:
        write_json(stage_dir(self.out) / f"{name}.json", entry)


def reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def skip_all(stages: Stages, group: str, reason: str) -> None:
    for name in GROUPS[group]:
        if name in stages.selected:
            stages.write(name, {"status": "skipped", "reason": reason})


def missing_package(group: str) -> str | None:
    for package in PACKAGES[group]:
        try:
            importlib.import_module(package)
        except Exception as e:  # ImportError, or a broken install raising anything
            return f"{package} not importable: {type(e).__name__}: {e}"[:500]
    return None


def die_with_parent() -> None:
    """Killed when the driver dies, however it dies (Linux's parent-death signal): a group
    never outlives the check that started it."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def main(argv: list[str] | None = None) -> int:
    from gpu_stages import add_stage_args

    parser = argparse.ArgumentParser(description="One group of bench/gpu_check.py's stages.")
    parser.add_argument("group", choices=list(GROUPS))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stages", default=",".join(s for g in GROUPS.values() for s in g))
    add_stage_args(parser)
    args = parser.parse_args(argv)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    die_with_parent()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    stages = Stages(args.out, set(args.stages.split(",")))
    why = missing_package(args.group)
    if why is not None:
        skip_all(stages, args.group, why)
        return 0
    import gpu_runs

    runner = getattr(gpu_runs, f"run_{args.group}")
    asyncio.run(runner(args, stages, args.out / "state"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
