"""What speculation saves in an RL step, and what co-training the world model costs.

Prints one JSON object (goals in brackets):

    rollout_speedup   rollout seconds per step with --no-speculate over those with
                      speculation, same tasks, seeds and starting weights (> 1: faster)
    cotrain_overhead  [<= 1.05 when the world-model trainer has its own resources]
                      step seconds with co-training over step seconds with the world model
                      frozen (both speculative); each run's metrics.jsonl has the co-trainer's
                      wm_seconds and wm_forward_tokens per step

Three runs of `obsspec rl` (the library, each its own local Ray cluster), in this order:
speculative with co-training, sequential with co-training, speculative without. Each runs
--steps steps of --tasks-per-step groups of --group-size episodes; figures are sums over the
steps after the first (--skip-first, default 1: it pays engine warm-up and cold caches).
Usage:

    python bench/rl_step.py [--tasks TASKS] [--policy POLICY] [--world-model WM] [--steps 3]
        [--group-size 4] [--tasks-per-step 2] [--max-turns 10] [--max-tokens 128]
        [--policy-cores 0] [--wm-cores N-1] [--sandbox-cpuset N-1] [--json]

Placement (reported in the output): the policy engine's threads on --policy-cores, the world
model's on --wm-cores, the sandboxes on --sandbox-cpuset ('auto': vLLM's choice, which puts
both engines on core 0; the sandboxes anywhere). The trainers use every core while the
engines idle, so the co-trainer competes with the policy trainer, and the 1.05 goal, which
presumes it has its own GPU, is not expected to hold on one CPU machine; on a cluster give it
`placement.wm_trainer_gpus`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path


def arm_config(args, out: Path, *, speculate: bool, cotrain: bool):
    from obsspec.rl.config import RLConfig

    return RLConfig.model_validate(
        {
            "tasks": args.tasks,
            "out": out,
            "policy": args.policy,
            "steps": args.steps,
            "seed": args.seed,
            "speculate": speculate,
            "tensorboard": False,
            "checkpoint_every": 1000,
            "concurrency": args.group_size * args.tasks_per_step,
            "limits": {"max_turns": args.max_turns, "max_tokens": args.max_tokens},
            "grpo": {"group_size": args.group_size, "tasks_per_step": args.tasks_per_step},
            "cotrain": {"enabled": cotrain},
            "engine": {"cpu_cores": cores(args.policy_cores)},
            "speculation": {
                "world_model": args.world_model,
                "wm_cpu_cores": cores(args.wm_cores),
            },
            "sandbox_cpuset": cores(args.sandbox_cpuset),
        }
    )


def cores(value: str) -> str | None:
    return None if value == "auto" else value


def run_arm(args, root: Path, name: str, **arm) -> list[dict]:
    from obsspec.config import GlobalConfig
    from obsspec.rl.driver import run_rl
    from obsspec.rl.run_files import RLRunDir

    config = arm_config(args, root / name, **arm)
    print(f"arm {name}: {arm}", file=sys.stderr)
    asyncio.run(run_rl(config, GlobalConfig().paths.models_dir))
    return RLRunDir(config.out).read_metrics()


def builtin_tasks(out: Path) -> Path:
    """Slow-command tasks (CI stages that take seconds): where speculation can pay."""
    from obsspec.environments.suite.generate import generate

    if not out.is_dir():
        generate(out, n=4, seed=0, families=["workflow-ci"])
    return out


def total(rows: list[dict], key: str, skip: int) -> float:
    return sum(row[key] for row in rows[skip:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--tasks", default=None, help="Tasks [default: 4 built-in workflow-ci tasks, seed 0]."
    )
    parser.add_argument("--policy", default=None, help="Policy [default: the default model].")
    parser.add_argument("--world-model", default=None)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--skip-first", type=int, default=1)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    last = str((os.cpu_count() or 1) - 1)
    parser.add_argument("--policy-cores", default="0", help="The policy engine's cores.")
    parser.add_argument("--wm-cores", default=last, help="The world-model engine's cores.")
    parser.add_argument("--sandbox-cpuset", default=last, help="The sandboxes' cores.")
    parser.add_argument("--out", default=None, help="Keep the runs here [default: a temp dir].")
    parser.add_argument("--json", action="store_true", help="Only the JSON on stdout.")
    args = parser.parse_args()
    if args.steps <= args.skip_first:
        parser.error("--steps must exceed --skip-first")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from obsspec.config import GlobalConfig

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.out or tmp)
        args.tasks = args.tasks or str(builtin_tasks(root / "tasks"))
        args.policy = args.policy or GlobalConfig().default_model
        spec = run_arm(args, root, "speculative", speculate=True, cotrain=True)
        seq = run_arm(args, root, "sequential", speculate=False, cotrain=True)
        frozen = run_arm(args, root, "frozen-wm", speculate=True, cotrain=False)
    skip = args.skip_first
    result = {
        "rollout_speedup": total(seq, "rollout_seconds", skip)
        / total(spec, "rollout_seconds", skip),
        "cotrain_overhead": total(spec, "step_seconds", skip) / total(frozen, "step_seconds", skip),
        "steps_counted": args.steps - skip,
        "spec_match_rate": [row["spec_match_rate"] for row in spec],
        "rollout_seconds": {
            "speculative": [row["rollout_seconds"] for row in spec],
            "sequential": [row["rollout_seconds"] for row in seq],
            "frozen_wm": [row["rollout_seconds"] for row in frozen],
        },
        "step_seconds": {
            "speculative": [row["step_seconds"] for row in spec],
            "frozen_wm": [row["step_seconds"] for row in frozen],
        },
        "placement": f"one machine, {os.cpu_count()} CPUs: policy engine on "
        f"{args.policy_cores}, world-model engine on {args.wm_cores}, sandboxes on "
        f"{args.sandbox_cpuset}; both trainers on every core while the engines idle",
    }
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
