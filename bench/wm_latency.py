"""How long the world model takes to predict, under each setup of its engine: prompt-lookup
drafting on or off, tcmalloc and Intel OpenMP preloaded or not.

Prints one JSON object. Usage: python bench/wm_latency.py [--data RUN] [--world-model WM]
[--episodes 4] [--cores 1] [--draft 5].

RUN is a collect run or a profile arm (e.g. PROFILE/arms/seq): the world model is asked
about every command turn of its first `episodes` episodes, with the prompt the speculative
runner would send (world_model.prompt), one request at a time, greedy, as many tokens as an
observation may take. Each setup is a fresh engine on `cores` (obsspec's placement gives the
world model core 1 of 2), in the order A B C D D C B A. Per setup: the mean seconds of a
prediction, and its prefill and decode seconds (vLLM's own timings).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path

SETUPS = {  # name: (draft tokens, preload the default libraries)
    "plain": (0, False),
    "preloaded": (0, True),
    "drafting": (None, False),
    "drafting+preloaded": (None, True),
}


def command_prompts(data: Path, episodes: int, prompt) -> list[list[int]]:
    """The world model's prompt for every command turn of the run's first episodes."""
    from obsspec.runs import read_rows

    prompts = []
    for row in read_rows(data)[:episodes]:
        ids = list(row["prompt_ids"])
        for turn in row["turns"]:
            ids += turn["action_ids"]
            if turn["action"] == "command":
                prompts.append(prompt.prompt_ids(ids))
            ids += turn["observation_ids"]
    return prompts


async def one_setup(model: Path, prompts, draft: int, preload: bool, args) -> list[dict]:
    from obsspec.inference.base import Sampling
    from obsspec.inference.vllm_local import EngineSettings, LocalVLLMEngine

    settings = EngineSettings(
        model=model,
        max_model_len=4096,
        kv_cache_gb=0.5,
        cpu_cores=args.cores,
        ngram_draft_tokens=draft,
        cpu_libraries=None if preload else [],
    )
    found = []
    async with LocalVLLMEngine(settings) as engine:
        await engine.generate([1, 2, 3], Sampling(max_tokens=2, temperature=0.0))  # warm-up
        for ids in prompts:
            start = time.monotonic()
            gen = await engine.generate(ids, Sampling(max_tokens=args.max_tokens, temperature=0.0))
            found.append(
                {
                    "s": time.monotonic() - start,
                    "prefill_s": gen.timings.prefill_s,
                    "decode_s": gen.timings.decode_s,
                    "tokens": len(gen.token_ids),
                }
            )
    return found


async def main(args) -> dict:
    from obsspec.agent.episode import EpisodeLimits, context_builder
    from obsspec.models.tokenizer import load_tokenizer
    from obsspec.world_model.prompt import WorldModelPrompt

    model = Path(args.world_model)
    builder = context_builder(load_tokenizer(model), EpisodeLimits())
    prompts = command_prompts(Path(args.data), args.episodes, WorldModelPrompt(builder))
    order = [*SETUPS, *reversed(SETUPS)]
    runs: dict[str, list[dict]] = {name: [] for name in SETUPS}
    for name in order:
        draft, preload = SETUPS[name]
        runs[name] += await one_setup(model, prompts, args.draft if draft is None else draft,
                                      preload, args)  # fmt: skip
    return {
        "world_model": str(model),
        "data": args.data,
        "predictions_per_setup": len(prompts) * 2,
        "cores": args.cores,
        "draft_tokens": args.draft,
        "arm_order": order,
        "setups": {
            name: {
                key: round(statistics.fmean(p[key] for p in found), 3)
                for key in ("s", "prefill_s", "decode_s", "tokens")
            }
            for name, found in runs.items()
        },
    }


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")  # vLLM would log to stdout
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        default="demo-run/profile/arms/seq",
        help="A collect run or a profile arm [default: make demo's profile's].",
    )
    parser.add_argument("--world-model", default="demo-run/wm")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--cores", default="1", help="The world model engine's cores.")
    parser.add_argument("--draft", type=int, default=5, help="Draft tokens when drafting.")
    parser.add_argument("--max-tokens", type=int, default=1024)
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=1))
