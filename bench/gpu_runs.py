"""The groups of bench/gpu_check.py's stages, each run by bench/gpu_child.py in its own
process: `run_models`, `run_grpo`, `run_serve` (engines, episodes, sync: they share the
engines) and `run_cotrain`. What one group leaves the next is under OUT/state/."""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict
from itertools import chain
from pathlib import Path
from statistics import median

from gpu_stages import (
    MAX_MODEL_LEN,
    device_report,
    engine_settings,
    episode_figures,
    gpu_used_gib,
    model_shapes,
    play_episodes,
    prediction_ms,
    throughput,
    training_episodes,
    write_model,
)

PROBE_TOKENS = 256
GIB = 1 << 30


def shape_of(state: Path, role: str):
    from obsspec.rl.capacity import ModelShape

    return ModelShape(**json.loads((state / "shapes.json").read_text())[role])


def tokenizer_of(state: Path):
    from obsspec.models.tokenizer import load_tokenizer

    return load_tokenizer(state / "models" / "policy")


async def run_models(args, stages, state: Path) -> None:
    """Random-weight Qwen3-shaped models with the default model's tokenizer."""
    from obsspec.config import DEFAULT_MODEL, GlobalConfig
    from obsspec.models.registry import resolve_model
    from obsspec.models.tokenizer import load_tokenizer

    with stages.stage("models") as entry:
        if entry is None:
            return
        entry["device"] = device_report()
        tokenizer = load_tokenizer(resolve_model(DEFAULT_MODEL, GlobalConfig().paths.models_dir))
        shapes = model_shapes(args, len(tokenizer))
        for i, (role, shape) in enumerate(shapes.items()):
            write_model(shape, state / "models" / role, tokenizer, seed=i)
        (state / "shapes.json").write_text(json.dumps({r: asdict(s) for r, s in shapes.items()}))
        entry["shapes"] = {
            role: {"params_b": round(s.params / 1e9, 3), "layers": s.layers, "hidden": s.hidden}
            for role, s in shapes.items()
        }


def trainer_estimate_gib(shape) -> float:
    """capacity.py's plan for one trainer rank of this shape (checkpointing on)."""
    from obsspec.rl.capacity import trainer_memory

    need = trainer_memory("t", shape, ranks=1, batch_tokens=MAX_MODEL_LEN, checkpointing=True)
    return round(need.total / GIB, 2)


async def run_grpo(args, stages, state: Path) -> None:
    """One GRPO step in 2 minibatches (the second sees ratios the first moved, so the clip
    can bind), activation checkpointing on; the trained weights and a probe's
    log-probabilities before and after go to state/ for the sync stage."""
    import torch
    from safetensors.torch import save_file

    from obsspec.rl.config import GRPOSettings
    from obsspec.rl.policy_trainer import PolicyTrainer
    from obsspec.rl.weight_sync import probe_logprobs, tied_duplicates, trainer_weights

    with stages.stage("grpo") as entry:
        if entry is None:
            return
        settings = GRPOSettings(
            lr=args.lr,
            batch_tokens=MAX_MODEL_LEN,
            activation_checkpointing=True,
            dtype="auto",
            minibatches=2,
        )
        trainer = PolicyTrainer(state / "models" / "policy", settings, seed=0)
        episodes = training_episodes([], len(tokenizer_of(state)))
        probe = list(episodes[0].ids[:PROBE_TOKENS])
        before = probe_logprobs(trainer, probe)
        stats = trainer.update(episodes, 0)
        after = probe_logprobs(trainer, probe)
        skip = set(tied_duplicates(trainer.model.config))
        weights = {
            name: tensor.detach().to(torch.bfloat16).contiguous().cpu()
            for name, tensor in trainer_weights(trainer).items()
            if name not in skip
        }
        save_file(weights, str(state / "policy-trained.safetensors"))
        record = {"ids": probe, "before": before, "after": after}
        (state / "probe.json").write_text(json.dumps(record))
        entry.update(
            trained_tokens=stats["trained_tokens"],
            step_s=round(stats["policy_train_seconds"], 2),
            clip_fraction=round(stats["clip_fraction"], 4),
            minibatches=settings.minibatches,
            estimate_gib=trainer_estimate_gib(shape_of(state, "policy")),
        )


def check_vllm_build(tiny: bool) -> str:
    """vLLM's platform; its CPU build on a machine with a GPU is refused (it would run the
    GPU check on CPUs and say nothing), unless --tiny asks for CPUs."""
    import torch
    from vllm.platforms import current_platform

    kind = getattr(current_platform, "device_type", "?")
    if torch.cuda.is_available() and kind == "cpu" and not tiny:
        raise RuntimeError(
            "vLLM here is its CPU build, on a machine with a GPU: the check would run on CPUs; "
            "install vLLM's CUDA build (make setup on this machine), or pass --tiny"
        )
    return kind


async def run_serve(args, stages, state: Path) -> None:
    """Both engines side by side, speculative episodes on built-in tasks, and the trained
    weights loaded into the policy engine in memory, with the post-sync check."""
    from obsspec.inference.vllm_local import LocalVLLMEngine

    tokenizer = tokenizer_of(state) if (state / "models" / "policy").is_dir() else None
    async with contextlib.AsyncExitStack() as stack:
        engines: dict = {}
        with stages.stage("engines") as entry:
            if entry is not None:
                entry["vllm_platform"] = check_vllm_build(args.tiny)
                shares = {"policy": args.policy_share, "world_model": args.wm_share}
                for role in ("policy", "world_model"):
                    used = gpu_used_gib()  # each engine's memory: what its start took
                    settings = engine_settings(args, state / "models" / role, shares[role])
                    engines[role] = await stack.enter_async_context(LocalVLLMEngine(settings))
                    after = gpu_used_gib()
                    entry[role] = {"memory_gib": after and round(after - used, 2)}
                for role, engine in engines.items():
                    rate = await throughput(engine, len(tokenizer))
                    entry[role]["tokens_per_s"] = round(rate, 1)
        with stages.stage("episodes") as entry:
            if entry is not None:
                pair = (engines["policy"], engines["world_model"])
                played = await play_episodes(args, tokenizer, pair, state / "scratch")
                (state / "played.json").write_text(json.dumps([e.to_dict() for e in played]))
                entry.update(episode_figures(played), sandbox=args.sandbox_kind)
                latencies = await prediction_ms(engines["world_model"], played)
                entry["prediction_ms_median"] = round(median(latencies), 1) if latencies else None
        with stages.stage("sync") as entry:
            if entry is not None:
                await sync_trained_weights(args, engines["policy"], state, entry)


async def sync_trained_weights(args, engine, state: Path, entry: dict) -> None:
    """The engine's floor on the old weights, the trained weights loaded in memory, then
    the post-sync check: exact checksums where the engine keeps its weights as parameters,
    and the probe's log-probabilities."""
    from safetensors.torch import load_file

    from obsspec.inference.weight_checksums import weight_checksums
    from obsspec.rl.weight_sync import compare_logprobs, weight_buckets

    probe = json.loads((state / "probe.json").read_text())
    floor = compare_logprobs(await engine.score(probe["ids"]), probe["before"], probe["before"])
    started = time.monotonic()
    weights = load_file(str(state / "policy-trained.safetensors"))
    buckets = list(weight_buckets(weights, bucket_bytes=512 << 20))
    sent = weight_checksums(chain.from_iterable(buckets))
    await engine.load_weight_buckets(buckets, version=1)
    entry["seconds_load"] = round(time.monotonic() - started, 2)
    scores = await engine.score(probe["ids"])
    result = compare_logprobs(scores, probe["after"], probe["before"], floor=floor.error)
    result = result.with_weights(await engine.weight_checksums(), sent)
    entry.update(
        check_error=round(result.error, 5),
        check_shift=round(result.shift, 5),
        check_floor=round(result.floor, 5),
        weights=result.weights,
        weight_detail=list(result.weight_detail[:4]),
    )
    result.raise_if_stale(args.check_tolerance, worker=0, step=1)


async def run_cotrain(args, stages, state: Path) -> None:
    """One world-model co-training step on the episodes the serve group played."""
    from obsspec.agent.protocol import ActionFormat
    from obsspec.world_model.config import CotrainSettings
    from obsspec.world_model.cotrain import CoTrainer

    with stages.stage("cotrain") as entry:
        if entry is None:
            return
        played = json.loads((state / "played.json").read_text())
        settings = CotrainSettings(max_len=MAX_MODEL_LEN, activation_checkpointing=True)
        cotrainer = CoTrainer(
            state / "models" / "world_model", settings, ActionFormat.markdown, seed=0
        )
        stats = cotrainer.update(played)
        entry.update(
            examples=stats["wm_examples_used"],
            step_s=round(stats["wm_seconds"], 2),
            estimate_gib=trainer_estimate_gib(shape_of(state, "world_model")),
        )
