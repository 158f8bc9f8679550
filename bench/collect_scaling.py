"""Collection throughput at concurrency 1 vs 8 on the same tasks and seeds, side by side.

Prints one JSON object with `speedup_c8_vs_c1` (episodes/min at concurrency 8 over
concurrency 1; goal >= 3). Usage: python bench/collect_scaling.py [--model NAME|PATH]
[--tasks 8] [--max-turns 4] [--max-tokens 96] [--rounds 1] [--json].

Both concurrencies share one vLLM engine in this process (loaded once) and one generated set
of built-in tasks (images built before timing starts). Rounds alternate c1 and c8 so machine
noise hits both alike. Placement: obsspec's, as `obsspec collect` gives it with no setting
(obsspec.rollout.cores: on 2 cores the engine on core 0, the sandboxes on core 1);
--sandbox-cpuset overrides the sandboxes' cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path


async def collect_once(tasks: Path, out: Path, concurrency: int, args, engine) -> dict:
    from obsspec.config import GlobalConfig
    from obsspec.rollout.collect import collect
    from obsspec.rollout.config import CollectConfig

    config = CollectConfig.model_validate(
        {
            "tasks": str(tasks),
            "out": out,
            "policy": args.model,
            "concurrency": concurrency,
            "seed": 0,
            "limits": {"max_turns": args.max_turns, "max_tokens": args.max_tokens},
            "sandbox_cpuset": args.placement.sandboxes,
        }
    )
    summary = await collect(config, GlobalConfig().paths.models_dir, engine=engine)
    print(f"c={concurrency}: {json.dumps(summary)}", file=sys.stderr)
    return summary


async def main(args) -> dict:
    from obsspec.config import GlobalConfig
    from obsspec.environments.suite.generate import generate
    from obsspec.inference.vllm_local import EngineSettings, LocalVLLMEngine
    from obsspec.models.registry import resolve_model

    model = resolve_model(args.model, GlobalConfig().paths.models_dir)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generate(root / "tasks", args.tasks, seed=0)
        settings = EngineSettings(
            model=model, max_model_len=4096, kv_cache_gb=1.0, cpu_cores=args.placement.policy
        )
        async with LocalVLLMEngine(settings) as engine:
            # Warm-up: builds every task image and runs the engine once, outside the timing.
            await collect_once(root / "tasks", root / "warmup", 8, args, engine)
            rates: dict[int, list[float]] = {1: [], 8: []}
            turns: dict[int, int] = {1: 0, 8: 0}
            for r in range(args.rounds):
                for c in (1, 8) if r % 2 == 0 else (8, 1):
                    summary = await collect_once(
                        root / "tasks", root / f"c{c}-{r}", c, args, engine
                    )
                    rates[c].append(summary["episodes_per_min"])
                    turns[c] += summary["turns"]
    c1, c8 = sum(rates[1]) / len(rates[1]), sum(rates[8]) / len(rates[8])
    return {
        "model": str(model),
        "cores": os.cpu_count(),
        "placement": args.placement.as_dict(),
        "tasks": args.tasks,
        "max_turns": args.max_turns,
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "turns_c1": turns[1],
        "turns_c8": turns[8],
        "episodes_per_min_c1": round(c1, 2),
        "episodes_per_min_c8": round(c8, 2),
        "speedup_c8_vs_c1": round(c8 / c1, 2),
    }


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")  # vLLM would log to stdout
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--sandbox-cpuset", default=None, help="[default: obsspec's placement]")
    parser.add_argument("--json", action="store_true", help="JSON only (the default output)")
    args = parser.parse_args()
    from obsspec.rollout.cores import machine_plan

    args.placement = machine_plan(world_model=False, fixed={"sandboxes": args.sandbox_cpuset})
    print(json.dumps(asyncio.run(main(args)), indent=2))
