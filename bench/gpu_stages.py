"""The stages' parts of bench/gpu_check.py: shapes that fit, random-weight models, engine
throughput, episodes on built-in tasks, and the figures taken from them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path

GIB = 1 << 30


TINY_SHAPE = {  # head_dim 64: a size vLLM's CPU attention has
    "hidden": 128,
    "layers": 2,
    "intermediate": 256,
    "heads": 2,
    "kv_heads": 1,
    "head_dim": 64,
}
TINY = {  # --tiny: the same stages in seconds on CPUs
    "policy": {**TINY_SHAPE, "tied": False},
    "world_model": {**TINY_SHAPE, "tied": True},
}


MAX_MODEL_LEN = 4096


def device_report() -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"kind": "cpu", "cores": os.cpu_count()}
    props = torch.cuda.get_device_properties(0)
    return {
        "kind": "cuda",
        "name": props.name,
        "gpus": torch.cuda.device_count(),
        "memory_gib": round(props.total_memory / GIB, 1),
    }


def gpu_used_gib() -> float | None:
    """Memory in use on GPU 0 by every process (vLLM's engines run in their own)."""
    import torch

    if not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info(0)
    return (total - free) / GIB


def peak_gib() -> float | None:
    """This process's peak GPU memory since the last reset, GiB to 2 places (None on CPU)."""
    import torch

    if not torch.cuda.is_available():
        return None
    return round(torch.cuda.max_memory_allocated() / GIB, 2)


def fitted_layers(shape, budget_gib: float, batch_tokens: int) -> int:
    """Decoder layers of `shape` whose trainer (16 bytes a parameter, activations with
    checkpointing, a chunk of logits) fits the budget: the 8B shape does not fit one GPU
    beside its engines, so its width is kept and its depth cut."""
    from obsspec.rl.capacity import ModelShape, trainer_memory

    for layers in range(shape.layers, 0, -1):
        trial = ModelShape(**{**shape.__dict__, "layers": layers})
        need = trainer_memory("t", trial, ranks=1, batch_tokens=batch_tokens, checkpointing=True)
        if need.total / GIB <= budget_gib:
            return layers
    raise RuntimeError(f"not one layer of this shape fits {budget_gib:.0f} GiB")


def model_shapes(args, vocab: int) -> dict:
    from obsspec.rl.capacity import ModelShape

    if args.tiny:
        return {role: ModelShape(vocab=vocab, **shape) for role, shape in TINY.items()}
    policy = ModelShape.of(args.policy_shape).with_vocab(vocab)
    wm = ModelShape.of(args.wm_shape).with_vocab(vocab)
    device = device_report()
    if device["kind"] == "cuda":  # what the engines leave of the GPU, less a margin
        budget = device["memory_gib"] * (1 - args.policy_share - args.wm_share) - 6
        layers = fitted_layers(policy, budget, MAX_MODEL_LEN)
        policy = ModelShape(**{**policy.__dict__, "layers": layers})
    return {"policy": policy, "world_model": wm}


def write_model(shape, out: Path, tokenizer, seed: int) -> Path:
    """A Qwen3 model of `shape` with random weights, saved in bf16 with the tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(shape.hf_config()))
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(
            AutoConfig.from_pretrained(out), dtype=torch.bfloat16
        )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    del model
    return out


async def throughput(engine, vocab: int, streams: int = 8, tokens: int = 128) -> float:
    """Tokens per second with `streams` requests at once (random 256-token prompts)."""
    import random
    import time

    from obsspec.inference.base import Sampling

    rng = random.Random(0)
    prompts = [[rng.randrange(3, vocab) for _ in range(256)] for _ in range(streams)]
    sampling = Sampling(max_tokens=tokens, temperature=1.0, ignore_eos=True, seed=1)
    started = time.monotonic()
    outs = await asyncio.gather(*(engine.generate(p, sampling) for p in prompts))
    return sum(len(o.token_ids) for o in outs) / (time.monotonic() - started)


def engine_settings(args, model: Path, share: float):
    from obsspec.inference.vllm_settings import EngineSettings

    if args.tiny or device_report()["kind"] == "cpu":
        return EngineSettings(model=model, max_model_len=MAX_MODEL_LEN, kv_cache_gb=0.25)
    return EngineSettings(model=model, max_model_len=MAX_MODEL_LEN, gpu_memory_utilization=share)


async def play_episodes(args, tokenizer, engines, out: Path) -> list:
    """Two built-in tasks, two episodes each, speculative: the oracle's commands at the
    policy engine's pace, the world model's guesses from its engine."""
    from obsspec import api
    from obsspec.agent.oracle import oracle_policy
    from obsspec.environments.suite.generate import generate
    from obsspec.inference.scripted import PacedEngine

    policy_engine, wm_engine = engines
    limits = api.EpisodeLimits(max_turns=12, max_tokens=64, temperature=0)
    always = api.SpeculationSettings(gate={"mode": "always"})  # every command asks
    speculator = api.Speculator(tokenizer, world_model=wm_engine, limits=limits, settings=always)
    played = []
    for path in generate(out / "tasks", n=args.tasks, seed=0, families=[args.family]):
        task = api.load_task(path)
        async with sandboxes_for(task) as (pool, kind):
            args.sandbox_kind = kind
            for seed in (0, 1):
                script = oracle_policy(
                    speculator.builder, task.solution_commands(), limits.action_format
                )
                paced = PacedEngine(policy_engine, script, min_tokens=16)
                played.append(await speculator.play(task, pool, paced, seed=seed))
    return played


@contextlib.asynccontextmanager
async def sandboxes_for(task):
    """Docker sandboxes when a daemon answers, else in-memory ones (commands then take no
    time, and the report says so)."""
    from obsspec import api
    from obsspec.environments.errors import DockerUnavailable

    try:
        async with api.docker_sandboxes(task, size=2) as pool:
            yield pool, "docker"
    except DockerUnavailable:
        yield api.FakeSandboxPool(lambda: api.FakeSandbox(exec_s=0.5)), "in-memory"


async def prediction_ms(wm_engine, played: list, turns: int = 8) -> list[float]:
    """How long the world model takes to write each of the first command turns'
    observations (as many tokens, ignoring its end token: random weights never stop on
    their own), from the context up to the command, one request at a time."""
    import time

    from obsspec.inference.base import Sampling

    latencies = []
    for episode in played:
        offset = len(episode.prompt_ids)
        for turn in episode.turns:
            offset += len(turn.action_ids)
            if turn.command and len(latencies) < turns:
                sampling = Sampling(
                    max_tokens=max(1, len(turn.observation_ids)), temperature=0, ignore_eos=True
                )
                started = time.monotonic()
                await wm_engine.generate(list(episode.context_ids[:offset]), sampling)
                latencies.append((time.monotonic() - started) * 1000)
            offset += len(turn.observation_ids)
    return latencies


def episode_figures(played: list) -> dict:
    from statistics import median

    from obsspec import api

    turns = [t for e in played for t in e.turns if t.command]
    return {
        "episodes": len(played),
        "rewards": [e.reward for e in played],
        "command_turns": len(turns),
        "command_ms_median": round(median(t.exec_s * 1000 for t in turns), 1) if turns else None,
        **{k: v for k, v in api.speculation_summary(played).items() if "rate" in k},
    }


def training_episodes(played: list, vocab: int) -> list:
    """The episodes as GRPO sees them, advantages +1/-1; random ones if none were played."""
    import random

    from obsspec.rl.policy_trainer import PolicyEpisode

    episodes = [
        PolicyEpisode(list(e.context_ids), list(e.mask), list(e.logprobs), (-1.0) ** i)
        for i, e in enumerate(played)
        if any(e.mask)
    ]
    rng = random.Random(0)
    while len(episodes) < 4:
        ids = [rng.randrange(3, vocab) for _ in range(512)]
        mask = [0] * 256 + [1] * 256
        episodes.append(PolicyEpisode(ids, mask, [None] * 512, (-1.0) ** len(episodes)))
    return episodes


def add_stage_args(parser) -> None:
    """The options the stages read (the driver passes them on to each group's process)."""
    parser.add_argument("--tiny", action="store_true", help="Tiny shapes (CPU, tests).")
    parser.add_argument("--policy-shape", default="qwen3-8b", help="qwen3-8b, ... or an HF dir.")
    parser.add_argument("--wm-shape", default="qwen3-0.6b", help="qwen3-0.6b, ... or an HF dir.")
    parser.add_argument("--policy-share", type=float, default=0.3, help="Policy engine's GPU.")
    parser.add_argument("--wm-share", type=float, default=0.1, help="World model's GPU share.")
    parser.add_argument("--check-tolerance", type=float, default=0.1)
    parser.add_argument(
        "--lr", type=float, default=1e-2, help="GRPO's step: large, so that the clip binds."
    )
    parser.add_argument("--tasks", type=int, default=2, help="Built-in tasks to play (x2).")
    parser.add_argument("--family", default="workflow-ci", help="Their family.")


STAGE_ARGS = (  # (flag, attribute, is a switch)
    ("--tiny", "tiny", True),
    ("--policy-shape", "policy_shape", False),
    ("--wm-shape", "wm_shape", False),
    ("--policy-share", "policy_share", False),
    ("--wm-share", "wm_share", False),
    ("--check-tolerance", "check_tolerance", False),
    ("--lr", "lr", False),
    ("--tasks", "tasks", False),
    ("--family", "family", False),
)


def stage_argv(args) -> list[str]:
    """args' stage options as a command line for a group's process."""
    argv: list[str] = []
    for flag, name, switch in STAGE_ARGS:
        value = getattr(args, name)
        if switch:
            argv += [flag] if value else []
        else:
            argv += [flag, str(value)]
    return argv
