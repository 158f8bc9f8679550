"""What speculation saves in an RL step, and what co-training the world model costs.

Prints one JSON object (goals in brackets):

    rollout_speedup   rollout seconds per step with --no-speculate over those with
                      speculation, same tasks, seeds and starting weights (> 1: faster)
    cotrain_overhead  [<= 1.05 when the world-model trainer has its own resources]
                      step seconds with co-training over step seconds with the world model
                      frozen (both speculative); each run's metrics.jsonl has the co-trainer's
                      wm_seconds and wm_forward_tokens per step; `cotrain_overlap` says
                      whether it ran behind the rollout (the default), `wm_wait_s` what the
                      driver still waited for it

Three runs of `obsspec rl` (the library, each its own local Ray cluster) per round: speculative
with co-training, sequential with co-training, speculative without; the second round runs them
in the reverse order, and so on (ABC CBA: over two rounds no arm is favoured by a machine
whose load drifts; `arm_order` in the JSON lists each round's). Each run is --steps steps of
--tasks-per-step groups of --group-size episodes; figures are sums over the rounds and their
steps after the first (--skip-first, default 1: it pays engine warm-up and cold caches).
Usage:

    python bench/rl_step.py [--tasks TASKS] [--policy POLICY] [--world-model WM] [--steps 3]
        [--rounds 2] [--group-size 4] [--tasks-per-step 2] [--max-turns 10]
        [--max-tokens 128] [--policy-cores auto] [--wm-cores auto] [--sandbox-cpuset auto]
        [--json]

Placement (reported in the output, as each run's manifest records it): 'auto' is obsspec's
(obsspec.rollout.cores: on 2 cores the policy engine on core 0, the world model's engine and
the sandboxes on core 1); a flag overrides its role. The trainers use every core while the
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

# name -> (speculate, cotrain); a round runs them in this order, the next in reverse
ARMS = {
    "speculative": (True, True),
    "sequential": (False, True),
    "frozen-wm": (True, False),
}


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


def run_rounds(args, root: Path) -> tuple[dict[str, list[list[dict]]], list[str]]:
    """Per arm, each round's metrics rows; and each round's order ("a,b,c")."""
    runs: dict[str, list[list[dict]]] = {name: [] for name in ARMS}
    orders = []
    for r in range(args.rounds):
        order = list(ARMS) if r % 2 == 0 else list(ARMS)[::-1]
        orders.append(",".join(order))
        for name in order:
            speculate, cotrain = ARMS[name]
            rows = run_arm(args, root / f"round-{r}", name, speculate=speculate, cotrain=cotrain)
            runs[name].append(rows)
    return runs, orders


def placement_of(run: Path) -> list | None:
    """Where a run's rollout workers placed their engines and sandboxes (its manifest)."""
    from obsspec.rl.run_files import RLRunDir

    return RLRunDir(run).read_manifest().get("placement")


def total(rounds: list[list[dict]], key: str, skip: int) -> float:
    """The sum of `key` over every round's steps after its first `skip`."""
    return sum(row[key] for rows in rounds for row in rows[skip:])


def per_round(rounds: list[list[dict]], key: str) -> list[list]:
    return [[row[key] for row in rows] for rows in rounds]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--tasks", default=None, help="Tasks [default: 4 built-in workflow-ci tasks, seed 0]."
    )
    parser.add_argument("--policy", default=None, help="Policy [default: the default model].")
    parser.add_argument("--world-model", default=None)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--rounds", type=int, default=2, help="Rounds of the three runs, order reversed each."
    )
    parser.add_argument("--skip-first", type=int, default=1)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policy-cores", default="auto", help="The policy engine's cores.")
    parser.add_argument("--wm-cores", default="auto", help="The world-model engine's cores.")
    parser.add_argument("--sandbox-cpuset", default="auto", help="The sandboxes' cores.")
    parser.add_argument("--out", default=None, help="Keep the runs here [default: a temp dir].")
    parser.add_argument("--json", action="store_true", help="Only the JSON on stdout.")
    args = parser.parse_args()
    if args.steps <= args.skip_first:
        parser.error("--steps must exceed --skip-first")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from obsspec.config import GlobalConfig

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.out or tmp)
        args.tasks = args.tasks or str(builtin_tasks(root / "tasks"))
        args.policy = args.policy or GlobalConfig().default_model
        runs, orders = run_rounds(args, root)
        placed = placement_of(root / "round-0" / "speculative")  # (the temp dir goes next)
    spec, seq, frozen = runs["speculative"], runs["sequential"], runs["frozen-wm"]
    skip = args.skip_first
    result = {
        "rollout_speedup": total(seq, "rollout_seconds", skip)
        / total(spec, "rollout_seconds", skip),
        "cotrain_overhead": total(spec, "step_seconds", skip) / total(frozen, "step_seconds", skip),
        "steps_counted": (args.steps - skip) * args.rounds,
        "rounds": args.rounds,
        "arm_order": orders,
        # per round, per step
        "spec_match_rate": per_round(spec, "spec_match_rate"),
        "rollout_seconds": {
            "speculative": per_round(spec, "rollout_seconds"),
            "sequential": per_round(seq, "rollout_seconds"),
            "frozen_wm": per_round(frozen, "rollout_seconds"),
        },
        "step_seconds": {
            "speculative": per_round(spec, "step_seconds"),
            "frozen_wm": per_round(frozen, "step_seconds"),
        },
        # whether co-training ran behind the rollout ([rl.cotrain] overlap), and the seconds
        # the driver still waited for its update after the rollout
        "cotrain_overlap": per_round(spec, "cotrain_overlap"),
        "wm_wait_s": per_round(spec, "wm_wait_s"),
        "placement": {
            "flags": {
                "policy_cores": args.policy_cores,
                "wm_cores": args.wm_cores,
                "sandbox_cpuset": args.sandbox_cpuset,
            },
            "rollout_workers": placed,
            "trainers": "every core, while the engines idle",
        },
    }
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
