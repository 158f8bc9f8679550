"""vLLM throughput of a model on this machine: 1 stream vs N concurrent streams, side by side.

Prints one JSON object. Usage: python bench/engine_throughput.py [--model NAME|PATH]
[--streams 8] [--tokens 64] [--rounds 2]. Placement: engine threads bound by vLLM to the
visible cores; nothing else runs during the measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time


async def measure(engine, prompt_ids, streams: int, tokens: int, seed: int) -> float:
    from obsspec.inference.base import Sampling

    start = time.monotonic()
    gens = await asyncio.gather(
        *[
            engine.generate(prompt_ids, Sampling(max_tokens=tokens, temperature=1.0, seed=seed + i))
            for i in range(streams)
        ]
    )
    return sum(len(g.token_ids) for g in gens) / (time.monotonic() - start)


def chat_prompt(name: str):
    """The model's directory, and a short chat prompt's ids (also bench/engine_cpu_setup.py's)."""
    from transformers import AutoTokenizer

    from obsspec.config import GlobalConfig
    from obsspec.models.registry import resolve_model

    model = resolve_model(name, GlobalConfig().paths.models_dir)
    tokenizer = AutoTokenizer.from_pretrained(model)
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write a shell script that backs up /etc."}],
        add_generation_prompt=True,
        tokenize=False,
    )
    return model, tokenizer(text, add_special_tokens=False)["input_ids"]


async def main(args) -> dict:
    from obsspec.inference.vllm_local import EngineSettings, LocalVLLMEngine

    model, prompt_ids = chat_prompt(args.model)
    start = time.monotonic()
    settings = EngineSettings(
        model=model, max_model_len=2048, kv_cache_gb=1.0, max_num_seqs=max(args.streams, 1)
    )
    async with LocalVLLMEngine(settings) as engine:
        load_s = time.monotonic() - start
        await measure(engine, prompt_ids, 1, 8, 0)  # warm-up: the first request is slow
        rates: dict[int, list[float]] = {1: [], args.streams: []}
        orders = []
        # interleaved so machine noise hits both alike, the order alternating (ABBA over two
        # rounds) so that neither always runs first
        for r in range(args.rounds):
            order = (1, args.streams) if r % 2 == 0 else (args.streams, 1)
            orders.append(",".join(f"{n}_streams" for n in order))
            for streams in order:
                rates[streams].append(
                    await measure(engine, prompt_ids, streams, args.tokens, 100 * r)
                )
    best_single, best_many = max(rates[1]), max(rates[args.streams])
    return {
        "model": str(model),
        "load_s": round(load_s, 1),
        "cores": os.cpu_count(),
        "tokens_per_request": args.tokens,
        "streams": args.streams,
        "tok_per_s_single": round(best_single, 1),
        f"tok_per_s_{args.streams}_streams": round(best_many, 1),
        "concurrency_speedup": round(best_many / best_single, 2),
        "arm_order": orders,
    }


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")  # vLLM would log to stdout
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
