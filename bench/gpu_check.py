"""The GPU path, checked in one run that downloads nothing: prints one JSON object.

    python bench/gpu_check.py --dry-run [--config examples/rl_gpu.toml] [--gpu-gib 80]
    python bench/gpu_check.py [--policy-shape qwen3-8b] [--wm-shape qwen3-0.6b] [--out DIR]
    python bench/gpu_check.py --tiny        # the same stages with tiny shapes (CPU, tests)

--dry-run validates an `obsspec rl` config (the [rl] table; --tasks and --out are not
needed) and prints its planned placement and memory per GPU (obsspec.rl.capacity), with the
model shapes the config's models have, or --policy-shape / --wm-shape; it exits 1 when a GPU
would not hold its roles. It needs neither a GPU nor the models.

Without --dry-run it runs, on the GPUs of this machine (or CPUs with --tiny), stage by stage,
each timed and reported pass/fail (a failed stage stops the ones that need it):

    models      Qwen3-shaped models with random weights (policy ~8B, world model ~0.6B
                shapes) and the default tokenizer, written as HF directories; on one GPU the
                policy keeps the 8B width with fewer layers, so that trainer and engines fit
                side by side (the JSON says how many)
    engines     both vLLM engines side by side with their memory budgets; tokens/s of each
                with 8 concurrent requests
    episodes    a batch of speculative episodes on built-in tasks (Docker sandboxes, or
                in-memory ones without Docker): prediction ms against command ms
    grpo        one GRPO step of the policy trainer (FSDP2 over the ranks it has)
    sync        the trainer's weights into the policy engine in memory (bf16 buckets), then
                the post-sync check: the engine's log-probabilities of a probe against the
                trainer's
    cotrain     one world-model co-training step on the episodes' observations
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="Plan only; no GPU needed.")
    parser.add_argument("--config", type=Path, default=REPO / "examples" / "rl_gpu.toml")
    parser.add_argument("--gpu-gib", type=float, default=80.0, help="Memory of each GPU.")
    parser.add_argument("--policy-shape", default=None, help="qwen3-8b, ... or an HF dir.")
    parser.add_argument("--wm-shape", default=None, help="qwen3-0.6b, ... or an HF dir.")
    parser.add_argument("--compact", action="store_true", help="JSON on one line.")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.dry_run:
        return dry_run(args)
    parser.error("only --dry-run is built so far")
    return 2


if __name__ == "__main__":
    sys.exit(main())
