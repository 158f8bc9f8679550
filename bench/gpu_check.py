"""The GPU path, checked in one run that downloads nothing and fails soft: one JSON object.

    python bench/gpu_check.py --dry-run [--config examples/rl_gpu.toml] [--gpu-gib 80]
    python bench/gpu_check.py [--stages a,b] [--budget-s 480] [--out OUT] [--policy-shape
        qwen3-8b] [--wm-shape qwen3-0.6b]
    python bench/gpu_check.py --tiny        # the same stages with tiny shapes (CPU, tests)

--dry-run validates an `obsspec rl` config (the [rl] table; --tasks and --out are not
needed) and prints its planned placement and memory per GPU (obsspec.rl.capacity), with the
model shapes the config's models have, or --policy-shape / --wm-shape; it exits 1 when a GPU
would not hold its roles. It needs neither a GPU nor the models.

Without --dry-run it runs, on the GPUs of this machine (or CPUs with --tiny), these stages in
this order, in four groups, each group its own process (bench/gpu_child.py; a CUDA fault or
a hang ends its group, not the check):

    models      [models] Qwen3-shaped models with random weights (policy ~8B, world model
                ~0.6B shapes) and the default model's tokenizer, written as HF directories;
                on one GPU the policy keeps the 8B width with fewer layers, so that trainer
                and engines fit side by side (the JSON says how many)
    grpo        [grpo] one GRPO step of the policy trainer in 2 minibatches at --lr 1e-2
                (the clip binds: clip_fraction), activation checkpointing; the trained
                weights and a probe's log-probabilities kept for sync
    engines     [serve] both vLLM engines side by side with their memory budgets; tokens/s
                of each with 8 concurrent requests (vLLM's CPU build on a GPU machine is
                refused unless --tiny)
    episodes    [serve] speculative episodes on built-in tasks (Docker sandboxes, or
                in-memory ones without Docker): prediction ms against command ms
    sync        [serve] the trained weights into the policy engine in memory (bf16
                buckets), then the post-sync check: exact weight checksums by layer where
                the engine keeps its weights as parameters (`weights`: exact, differ, not
                compared), and the probe's log-probabilities beside the engine's floor
    cotrain     [cotrain] one world-model co-training step on the episodes played

OUT/gpu_check.json is rewritten (atomically) after every stage: per stage its `status` (ok,
failed, timeout, crashed, skipped), seconds, error and the tail of its traceback or log,
the skip's reason (`needs grpo`, `vllm not importable: ...`, `not in --stages`), and memory
(GPU: peak, free and total; CPU: peak resident) beside capacity.py's estimate for the
trainers. A stage past its cap (CAPS_S, or --cap-s STAGE=SECONDS), or the check past
--budget-s, has every thread's
traceback dumped into OUT/logs/<group>.log and its group killed; the stages after it still
run where they can. SIGTERM or Ctrl-C stops the running group, records its stage as
`interrupted` and exits 130; a group's process dies with the check however it ends. Exit 0
when no stage failed (skips allowed), 1 otherwise; stdout gets the final JSON alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).parent / "gpu_child.py"
sys.path.insert(0, str(Path(__file__).parent))  # gpu_child and gpu_stages beside it
from gpu_child import GROUPS, read_entry, stage_dir, write_json  # noqa: E402
from gpu_stages import add_stage_args, stage_argv  # noqa: E402


def dry_run(args) -> int:
    from obsspec.errors import ObsspecError
    from obsspec.rl.capacity import ModelShape, plan_memory
    from obsspec.rl.config import load_rl_config

    try:
        config = load_rl_config(args.config, {"tasks": "tasks", "out": "out"})
        policy = ModelShape.of(args.policy_shape or shape_source(config.policy))
        wm = ModelShape.of(args.wm_shape or shape_source(config.world_model))
    except ObsspecError as e:
        print(json.dumps({"ok": False, "error": str(e)}))
        return 2
    plan = plan_memory(config, policy, wm, gpu_gib=args.gpu_gib)
    p = config.placement
    print(
        json.dumps(
            {
                "ok": plan.fits,
                "config": str(args.config),
                "gpus_requested": p.gpus_requested,
                "policy": {"source": config.policy, "params_b": round(policy.params / 1e9, 3)},
                "world_model": {
                    "source": config.world_model,
                    "params_b": round(wm.params / 1e9, 3),
                },
                "placement": {
                    "rollout_workers": p.rollout_workers,
                    "rollout_gpus": p.rollout_gpus,
                    "trainer_ranks": p.policy_ranks,
                    "trainer_gpus": p.trainer_gpus,
                    "wm_trainer_gpus": p.wm_trainer_gpus,
                },
                **plan.as_dict(),
            },
            indent=None if args.compact else 1,
        )
    )
    return 0 if plan.fits else 1


def shape_source(model: str) -> str:
    """A model directory's own shape; a path that is not here (a cluster's) by its name."""
    if Path(model, "config.json").is_file():
        return model
    name = Path(model).name.lower()
    return name if name.startswith("qwen3-") else model


# --- the run: stages on this machine's accelerator, one group per process ----------------

# Seconds a stage may take before its group is stopped (its tracebacks dumped first): a GPU
# machine is lent for minutes, and a hang must cost a stage, not the whole check.
CAPS_S = {"models": 90, "grpo": 150, "engines": 180, "episodes": 150, "sync": 90, "cotrain": 120}
TINY_CAPS_S = {"models": 60, "grpo": 120, "engines": 240, "episodes": 300, "sync": 120,
               "cotrain": 120}  # fmt: skip
KILL_GRACE_S = 3.0  # after SIGUSR1 (the tracebacks), before SIGKILL
POLL_S = 0.5
LOG_TAIL = 3000
FAILED = ("failed", "timeout", "crashed", "interrupted")


class Run:
    """The report of one check, written to OUT/gpu_check.json after every stage."""

    def __init__(self, out: Path, args) -> None:
        self.out = out
        self.args = args
        self.caps = {**(TINY_CAPS_S if args.tiny else CAPS_S), **args.cap_s}
        self.deadline = time.monotonic() + args.budget_s
        self.report: dict = {"out": str(out), "budget_s": args.budget_s, "stages": {}}

    def record(self, name: str, entry: dict) -> None:
        self.report["stages"][name] = entry
        write_json(self.out / "gpu_check.json", self.report)

    def run_group(self, group: str, wanted: list[str]) -> None:
        if self.deadline - time.monotonic() < 1:
            for name in wanted:
                self.record(name, {"status": "skipped", "reason": "--budget-s spent"})
            return
        log = self.out / "logs" / f"{group}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, str(CHILD), group, "--out", str(self.out)]
        command += ["--stages", ",".join(wanted), *stage_argv(self.args)]
        with open(log, "ab") as sink:
            child = subprocess.Popen(
                command, stdout=sink, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True
            )
        try:
            stopped = self.watch(child, wanted)
        except (Interrupted, KeyboardInterrupt) as e:
            stop(child)
            self.close_group(
                child, wanted, f"interrupted ({str(e) or 'SIGINT'})", log, "interrupted"
            )
            raise
        self.close_group(child, wanted, stopped, log)

    def watch(self, child: subprocess.Popen, wanted: list[str]) -> str | None:
        """Until the group's process ends; each stage's entry recorded as it appears. A
        stage past its cap, or the check past --budget-s, stops it: returns why."""
        while True:
            ended = child.poll() is not None
            for name in wanted:
                entry = read_entry(self.out, name)
                if entry and self.report["stages"].get(name) != entry:
                    self.record(name, entry)
            if ended:
                return None
            current = self.in_flight(wanted)
            now = time.monotonic()
            if current is not None and now - current[1] > self.caps[current[0]]:
                stop(child)
                return f"past its cap of {self.caps[current[0]]:g} s"
            if now > self.deadline:
                stop(child)
                return f"the check's --budget-s {self.args.budget_s:g} ran out"
            time.sleep(POLL_S)

    def in_flight(self, wanted: list[str]) -> tuple[str, float] | None:
        """The stage that has started and not ended, with when it started (monotonic)."""
        for name in wanted:
            marker = stage_dir(self.out) / f"{name}.started"
            if marker.is_file() and not read_entry(self.out, name):
                age = time.time() - json.loads(marker.read_text())["at"]
                return name, time.monotonic() - age
        return None

    def close_group(
        self, child, wanted: list[str], stopped: str | None, log: Path, status: str = "timeout"
    ) -> None:
        """Stages left without an entry: the one running when the group was stopped timed
        out; where its process died, the first such stage crashed (with the log's tail: the
        tracebacks), and the stages after either never ran."""
        tail = log.read_text(errors="replace")[-LOG_TAIL:] if log.is_file() else ""
        blamed = False
        for name in wanted:
            if read_entry(self.out, name):
                continue
            started = (stage_dir(self.out) / f"{name}.started").is_file()
            if stopped and started:
                self.record(name, {"status": status, "error": stopped, "error_tail": tail})
            elif not stopped and not blamed:
                why = f"its group's process ended (exit code {child.returncode}) before it did"
                self.record(name, {"status": "crashed", "error": why, "error_tail": tail})
            else:
                why = stopped or f"exit code {child.returncode}"
                self.record(name, {"status": "skipped", "reason": f"its group stopped ({why})"})
            blamed = True


class Interrupted(Exception):
    """SIGTERM: the check stops its group, records where it was, and exits 130."""


def interrupt(signum, _frame) -> None:
    raise Interrupted(signal.Signals(signum).name)


def stop(child: subprocess.Popen) -> None:
    """Tracebacks first (SIGUSR1: faulthandler in the group's process), then the process
    and everything it started (vLLM's engine processes) are killed."""
    with contextlib.suppress(ProcessLookupError):
        child.send_signal(signal.SIGUSR1)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(KILL_GRACE_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def stage_caps(parser, entries: list[str]) -> dict[str, float]:
    every = [name for names in GROUPS.values() for name in names]
    caps = {}
    for entry in entries:
        name, _, seconds = entry.partition("=")
        try:
            caps[name] = float(seconds)
        except ValueError:
            caps[name] = -1.0
        if name not in every or caps[name] <= 0:
            parser.error(f"--cap-s {entry}: give STAGE=SECONDS, STAGE one of {', '.join(every)}")
    return caps


def selected_stages(text: str | None) -> list[str]:
    every = [name for names in GROUPS.values() for name in names]
    if text is None:
        return every
    asked = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in asked if s not in every]
    if unknown:
        raise SystemExit(f"--stages: unknown {', '.join(unknown)}; the stages: {', '.join(every)}")
    return asked


def run(args) -> int:
    stages = selected_stages(args.stages)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    for old in (out / "stages", out / "state"):
        shutil.rmtree(old, ignore_errors=True)  # a rerun into the same OUT starts afresh
    check = Run(out, args)
    signal.signal(signal.SIGTERM, interrupt)
    code = None
    try:
        for group, names in GROUPS.items():
            for name in names:
                if name not in stages:
                    check.record(name, {"status": "skipped", "reason": "not in --stages"})
            wanted = [n for n in names if n in stages]
            if wanted:
                check.run_group(group, wanted)
    except (Interrupted, KeyboardInterrupt) as e:
        check.report["interrupted"] = str(e) or "SIGINT"
        code = 130
    statuses = [check.report["stages"].get(n, {}).get("status") for n in stages]
    check.report["ok"] = all(s == "ok" for s in statuses)
    write_json(out / "gpu_check.json", check.report)
    print(json.dumps(check.report, indent=None if args.compact else 1), flush=True)
    return code or (1 if any(s in FAILED for s in statuses) else 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="Plan only; no GPU needed.")
    parser.add_argument("--config", type=Path, default=REPO / "examples" / "rl_gpu.toml")
    parser.add_argument("--gpu-gib", type=float, default=80.0, help="Memory of each GPU.")
    parser.add_argument("--compact", action="store_true", help="JSON on one line.")
    parser.add_argument("--stages", default=None, help="Comma-separated [default: all].")
    parser.add_argument(
        "--budget-s", type=float, default=480, help="Seconds for the whole check [480]."
    )
    parser.add_argument("--out", default=None, help="Keep everything here [a temp dir].")
    parser.add_argument(
        "--cap-s",
        action="append",
        default=[],
        metavar="STAGE=SECONDS",
        help="A stage's own cap, over CAPS_S (repeatable).",
    )
    add_stage_args(parser)
    parser.set_defaults(policy_shape=None, wm_shape=None)  # the dry run: the config's
    args = parser.parse_args()
    args.cap_s = stage_caps(parser, args.cap_s)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.dry_run:
        return dry_run(args)
    args.policy_shape = args.policy_shape or "qwen3-8b"
    args.wm_shape = args.wm_shape or "qwen3-0.6b"
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
