"""What speculation saves as more episodes share the policy engine: `obsspec profile` at
several concurrency levels on the same unseen slow-command tasks.

Prints one JSON object: per level N (episodes at once in each arm, as in an RL step) the
latency reduction, the oracle's (the ceiling) and the fraction of it reached, each with its
bootstrap 95% interval, the match rates, seconds per episode per arm, how many episodes
really ran at once and how many waves ran in each arm order (`arm_orders`, with
`arm_order_note` when a level had one order only: a level of one wave); `pays_most_at` (the
level with the largest reduction); the placement of the engines and sandboxes on the
machine's cores. Writes OUT/report.json, OUT/report.html and
the plot OUT/profile_concurrency.png (reduction and fraction of the ceiling vs N, with
intervals). Usage:

    python bench/profile_concurrency.py [--policy POLICY] [--world-model WM]
        [--levels 1,4,8,16] [--tasks 8] [--episodes-per-task 1] [--task-seed 2]
        [--max-turns 10] [--max-tokens 128]
        [--policy-cores auto] [--wm-cores auto] [--sandbox-cpuset auto]
        [--cpu-placement auto|off] [--out DIR]

The tasks are `obsspec env generate --families workflow-ci --n TASKS --seed TASK_SEED` (seed
2: neither `make demo`'s training tasks, seed 0, nor its profile tasks, seed 1). The policy
and world model default to `make demo`'s (demo-run/policy, demo-run/wm). One profile run plays
every level in order (`--concurrency 1,4,8,16`): the same episodes at each, one policy engine
and one world-model engine loaded once. Placement: 'auto' leaves a role's cores to obsspec's
placement (what a user gets: obsspec.rollout.cores); `--cpu-placement off` leaves the roles no
flag places to vLLM (both engines on core 0) and the sandboxes unpinned, as before obsspec
placed them. The JSON's `placement` is the report's: where each role ran, and who chose.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo-run"
LEVEL_KEYS = (
    "episodes",
    "latency_reduction",
    "latency_reduction_ci95",
    "latency_reduction_median",
    "oracle_latency_reduction",
    "oracle_latency_reduction_ci95",
    "oracle_fraction",
    "oracle_fraction_ci95",
    "match_rate_wm",
    "match_rate_attempted",
    "match_rate_used",
    "predictor_speedup_p50",
    "wm_speedup_p50",
    "exec_won_rate",
    "tokens_wasted_fraction",
    "lossless_violations",
    "episodes_at_once",
    "arm_orders",  # waves that ran seq first / spec first: profile alternates them
    "arm_order_note",  # set when a level's waves all ran in one order
    "gate",  # the speculative arm's gate: decisions by reason, what it measured per load
    "wm_prefix_cache",  # the world model engine's prefix-cache hits over the level
)


def demo_model(given: str | None, name: str, flag: str) -> str:
    """The model given, else make demo's; neither is a clear error."""
    if given:
        return given
    path = DEMO / name
    if not path.is_dir():
        sys.exit(
            f"error: {flag} not given and {path} does not exist: run `make demo` first (it "
            f"trains demo-run/policy and demo-run/wm), or pass --policy and --world-model"
        )
    return str(path)


def cores(value: str) -> str | None:
    return None if value == "auto" else value


def profile_config(args, tasks: Path, out: Path):
    from obsspec.profile.config import ProfileConfig

    return ProfileConfig.model_validate(
        {
            "tasks": str(tasks),
            "policy": args.policy,
            "concurrency": args.levels,
            "out": out / "profile",
            "overwrite": True,
            "seed": 0,
            "episodes_per_task": args.episodes_per_task,
            "limits": {
                "max_turns": args.max_turns,
                "max_tokens": args.max_tokens,
                "temperature": 0.0,
            },
            "engine": {"cpu_cores": cores(args.policy_cores)},
            "speculation": {
                "world_model": args.world_model,
                "wm_cpu_cores": cores(args.wm_cores),
            },
            "sandbox_cpuset": cores(args.sandbox_cpuset),
            "cpu_placement": args.cpu_placement,
        }
    )


def level_summary(figures: dict) -> dict:
    phases = figures["phases"]
    seconds = {f"{arm}_s_per_episode": phases[arm]["agent_s_mean"] for arm in phases}
    return (
        {key: figures[key] for key in LEVEL_KEYS}
        | seconds
        | {"lost": len(figures["lost_episodes"])}
    )


async def run(args, out: Path) -> dict:
    from rich.console import Console

    from obsspec.cli.profile_view import printer
    from obsspec.config import GlobalConfig
    from obsspec.environments.suite.generate import generate
    from obsspec.profile.concurrency_plot import plot_by_concurrency
    from obsspec.profile.run import profile

    tasks = out / f"tasks-workflow-ci-n{args.tasks}-seed{args.task_seed}"
    if not tasks.is_dir():
        generate(tasks, n=args.tasks, seed=args.task_seed, families=["workflow-ci"])
    config = profile_config(args, tasks, out)
    start = time.monotonic()
    report = await profile(config, GlobalConfig().paths.models_dir, printer(Console(stderr=True)))
    wall_s = time.monotonic() - start
    levels = {n: level_summary(figures) for n, figures in report["by_concurrency"].items()}
    plot = plot_by_concurrency(report["by_concurrency"], out / "profile_concurrency.png")
    measured = {n: f["latency_reduction"] for n, f in levels.items()}
    paying = {n: v for n, v in measured.items() if v is not None}
    return {
        "policy": args.policy,
        "world_model": args.world_model,
        "tasks": {
            "dir": str(tasks),
            "n": args.tasks,
            "seed": args.task_seed,
            "command": f"obsspec env generate --families workflow-ci --n {args.tasks} "
            f"--seed {args.task_seed}",
        },
        "limits": {"max_turns": args.max_turns, "max_tokens": args.max_tokens},
        "levels": args.levels,
        "episodes_per_task": args.episodes_per_task,
        "by_concurrency": levels,
        "pays_most_at": max(paying, key=lambda n: paying[n]) if paying else None,
        "placement": report["placement"],
        "wall_s": round(wall_s, 1),
        "report": str(config.out / "report.json"),
        "plot": None if plot is None else str(plot),
    }


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")  # vLLM would log to stdout
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default=None, help="[default: demo-run/policy]")
    parser.add_argument("--world-model", default=None, help="[default: demo-run/wm]")
    parser.add_argument("--levels", default="1,4,8,16", help="Concurrency levels, in order.")
    parser.add_argument("--tasks", type=int, default=8, help="Unseen workflow-ci tasks.")
    parser.add_argument(
        "--episodes-per-task",
        type=int,
        default=1,
        help="Episodes per task: more than N episodes give level N two waves, one per arm order.",
    )
    parser.add_argument("--task-seed", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--policy-cores", default="auto", help="The policy engine's cores.")
    parser.add_argument("--wm-cores", default="auto", help="The world-model engine's cores.")
    parser.add_argument("--sandbox-cpuset", default="auto", help="The sandboxes' cores.")
    parser.add_argument(
        "--cpu-placement",
        choices=("auto", "off"),
        default="auto",
        help="off: vLLM and Docker place the roles no flag places (the old default).",
    )
    parser.add_argument(
        "--out", default=str(ROOT / "runs" / "profile-concurrency"), help="Runs and the plot."
    )
    parser.add_argument("--json", action="store_true", help="JSON only (the default output)")
    args = parser.parse_args()
    from obsspec.errors import ObsspecError
    from obsspec.profile.levels import parse_levels

    try:
        args.levels = parse_levels(args.levels, flag="--levels")
    except ObsspecError as e:
        parser.error(str(e))
    args.policy = demo_model(args.policy, "policy", "--policy")
    args.world_model = demo_model(args.world_model, "wm", "--world-model")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(json.dumps(asyncio.run(run(args, out)), indent=2))


if __name__ == "__main__":
    main()
