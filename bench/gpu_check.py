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
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))  # gpu_stages beside it
from gpu_stages import (  # noqa: E402
    MAX_MODEL_LEN,
    device_report,
    engine_settings,
    episode_figures,
    gpu_used_gib,
    model_shapes,
    peak_gib,
    play_episodes,
    prediction_ms,
    throughput,
    training_episodes,
    write_model,
)


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


# --- the run: stages on this machine's accelerator ----------------------------------------


class Check:
    """The JSON report, stage by stage: a stage that raises is recorded as failed and the
    stages that need its result are skipped."""

    def __init__(self) -> None:
        self.report: dict = {"stages": {}}

    @contextlib.contextmanager
    def stage(self, name: str, *needs: str):
        import time

        missing = [n for n in needs if not self.report["stages"].get(n, {}).get("ok")]
        entry: dict = {"ok": False}
        self.report["stages"][name] = entry
        if missing:
            entry["skipped"] = f"needs {', '.join(missing)}"
            yield None
            return
        started = time.monotonic()
        try:
            yield entry
            entry["ok"] = True
        except Exception as e:  # reported, never silent: the JSON says which stage and why
            entry["error"] = f"{type(e).__name__}: {e}"
            print(traceback.format_exc(), file=sys.stderr)
        entry["seconds"] = round(time.monotonic() - started, 2)

    @property
    def ok(self) -> bool:
        return all(s.get("ok") for s in self.report["stages"].values())


async def run_stages(args, check: Check, out: Path) -> None:
    from statistics import median

    from obsspec.config import DEFAULT_MODEL, GlobalConfig
    from obsspec.inference.vllm_local import LocalVLLMEngine
    from obsspec.models.registry import resolve_model
    from obsspec.models.tokenizer import load_tokenizer

    r = check.report
    r["device"] = device_report()
    tokenizer = load_tokenizer(resolve_model(DEFAULT_MODEL, GlobalConfig().paths.models_dir))
    with check.stage("models") as entry:
        shapes = model_shapes(args, len(tokenizer))
        dirs = {
            role: write_model(shapes[role], out / role, tokenizer, seed=i)
            for i, role in enumerate(shapes)
        }
        entry["shapes"] = {
            role: {"params_b": round(s.params / 1e9, 3), "layers": s.layers, "hidden": s.hidden}
            for role, s in shapes.items()
        }
    async with contextlib.AsyncExitStack() as stack:
        engines = None
        with check.stage("engines", "models") as entry:
            if entry is not None:
                shares = {"policy": args.policy_share, "world_model": args.wm_share}
                engines, figures = {}, {}
                for role in ("policy", "world_model"):
                    used = gpu_used_gib()
                    settings = engine_settings(args, dirs[role], shares[role])
                    engines[role] = await stack.enter_async_context(LocalVLLMEngine(settings))
                    after = gpu_used_gib()
                    figures[role] = {"memory_gib": after and round(after - used, 2)}
                for role, engine in engines.items():
                    figures[role]["tokens_per_s"] = round(
                        await throughput(engine, len(tokenizer)), 1
                    )
                entry.update(figures)
        played: list = []
        with check.stage("episodes", "engines") as entry:
            if entry is not None:
                pair = (engines["policy"], engines["world_model"])
                played = await play_episodes(args, tokenizer, pair, out)
                entry.update(episode_figures(played), sandbox=args.sandbox_kind)
                latencies = await prediction_ms(engines["world_model"], played)
                entry["prediction_ms_median"] = round(median(latencies), 1) if latencies else None
        await train_and_sync(args, check, dirs, engines, played, len(tokenizer))


async def train_and_sync(args, check: Check, dirs, engines, played, vocab: int) -> None:
    import torch

    from obsspec.rl.config import GRPOSettings
    from obsspec.rl.policy_trainer import PolicyTrainer
    from obsspec.rl.weight_sync import (
        compare_logprobs,
        probe_logprobs,
        tied_duplicates,
        trainer_weights,
        weight_buckets,
    )

    trainer = probe = before = None
    with check.stage("grpo", "models") as entry:
        if entry is not None:
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            settings = GRPOSettings(
                lr=1e-4,
                batch_tokens=MAX_MODEL_LEN,
                activation_checkpointing=True,
                dtype="auto",
                minibatches=1,
            )
            trainer = PolicyTrainer(dirs["policy"], settings, seed=0)
            episodes = training_episodes(played, vocab)
            probe = episodes[0].ids[:256]
            before = probe_logprobs(trainer, probe)
            stats = trainer.update(episodes, 0)
            entry.update(
                trained_tokens=stats["trained_tokens"],
                step_s=round(stats["policy_train_seconds"], 2),
                peak_memory_gib=peak_gib(),
            )
    with check.stage("sync", "grpo", "engines") as entry:
        if entry is not None:
            import time

            started = time.monotonic()
            skip = tied_duplicates(trainer.model.config)
            buckets = weight_buckets(trainer_weights(trainer), bucket_bytes=512 << 20, skip=skip)
            await engines["policy"].load_weight_buckets(buckets, version=1)
            entry["seconds_load"] = round(time.monotonic() - started, 2)
            after = probe_logprobs(trainer, probe)
            result = compare_logprobs(await engines["policy"].score(probe), after, before)
            entry.update(check_error=round(result.error, 5), check_shift=round(result.shift, 5))
            result.raise_if_stale(args.check_tolerance, worker=0, step=1)
    del trainer
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    with check.stage("cotrain", "models", "episodes") as entry:
        if entry is not None:
            from obsspec.world_model.config import CotrainSettings
            from obsspec.world_model.cotrain import CoTrainer

            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            settings = CotrainSettings(max_len=MAX_MODEL_LEN, activation_checkpointing=True)
            from obsspec.agent.protocol import ActionFormat

            cotrainer = CoTrainer(dirs["world_model"], settings, ActionFormat.markdown, seed=0)
            stats = cotrainer.update([e.to_dict() for e in played])
            entry.update(
                examples=stats["wm_examples_used"],
                step_s=round(stats["wm_seconds"], 2),
                peak_memory_gib=peak_gib(),
            )


def run(args) -> int:
    check = Check()
    # vLLM's processes log to standard output: it goes to stderr, the JSON alone to stdout
    report = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    with tempfile.TemporaryDirectory(prefix="gpu-check-", dir=args.out) as tmp:
        asyncio.run(run_stages(args, check, Path(tmp)))
    check.report["ok"] = check.ok
    print(json.dumps(check.report, indent=None if args.compact else 1), file=report, flush=True)
    return 0 if check.ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="Plan only; no GPU needed.")
    parser.add_argument("--config", type=Path, default=REPO / "examples" / "rl_gpu.toml")
    parser.add_argument("--gpu-gib", type=float, default=80.0, help="Memory of each GPU.")
    parser.add_argument("--policy-shape", default=None, help="qwen3-8b, ... or an HF dir.")
    parser.add_argument("--wm-shape", default=None, help="qwen3-0.6b, ... or an HF dir.")
    parser.add_argument("--compact", action="store_true", help="JSON on one line.")
    parser.add_argument("--tiny", action="store_true", help="Tiny shapes (CPU, tests).")
    parser.add_argument("--policy-share", type=float, default=0.3, help="Policy engine's GPU.")
    parser.add_argument("--wm-share", type=float, default=0.1, help="World model's GPU share.")
    parser.add_argument("--check-tolerance", type=float, default=0.1)
    parser.add_argument("--tasks", type=int, default=2, help="Built-in tasks to play (x2).")
    parser.add_argument("--family", default="workflow-ci", help="Their family.")
    parser.add_argument("--out", default=None, help="Scratch directory [default: a temp dir].")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.dry_run:
        return dry_run(args)
    args.policy_shape = args.policy_shape or "qwen3-8b"
    args.wm_shape = args.wm_shape or "qwen3-0.6b"
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
