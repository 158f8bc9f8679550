"""Our engine wrapper against raw vLLM AsyncLLM.generate: same engine, prompts and sampling.

Prints one JSON object; `throughput_ratio` = our tokens/s / raw tokens/s (goal >= 0.95).
Both run on the one in-process engine, in rounds whose order alternates (ours then raw, raw
then ours: ABBA over two rounds, so neither always runs first; `arm_order` in the JSON) so
that machine noise hits both alike. Placement: vLLM's automatic CPU binding (the engine's thread on
one core, one core reserved). Usage: python bench/engine_overhead.py [--model M] [--json]
[--streams 8] [--tokens 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid


async def ours(engine, prompts, tokens: int, seed: int) -> int:
    from obsspec.inference.base import Sampling

    gens = await asyncio.gather(
        *[
            engine.generate(p, Sampling(max_tokens=tokens, temperature=1.0, seed=seed + i))
            for i, p in enumerate(prompts)
        ]
    )
    return sum(len(g.token_ids) for g in gens)


async def raw(llm, prompts, tokens: int, seed: int) -> int:
    from vllm import SamplingParams

    async def one(prompt, i) -> int:
        params = SamplingParams(max_tokens=tokens, temperature=1.0, seed=seed + i, logprobs=0)
        final = None
        async for out in llm.generate(
            {"prompt_token_ids": prompt}, params, request_id=uuid.uuid4().hex
        ):
            final = out
        return len(final.outputs[0].token_ids)

    return sum(await asyncio.gather(*[one(p, i) for i, p in enumerate(prompts)]))


async def timed(fn, *args) -> float:
    start = time.monotonic()
    tokens = await fn(*args)
    return tokens / (time.monotonic() - start)


async def main(args) -> dict:
    from transformers import AutoTokenizer

    from obsspec.config import GlobalConfig
    from obsspec.inference.vllm_local import EngineSettings, LocalVLLMEngine
    from obsspec.models.registry import resolve_model

    model = resolve_model(args.model, GlobalConfig().paths.models_dir)
    tokenizer = AutoTokenizer.from_pretrained(model)
    prompts = [
        tokenizer(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": f"Task {i}: list the largest files under /var."}],
                add_generation_prompt=True,
                tokenize=False,
            ),
            add_special_tokens=False,
        )["input_ids"]
        for i in range(args.streams)
    ]
    async with LocalVLLMEngine(EngineSettings(model=model, max_model_len=2048)) as engine:
        await ours(engine, prompts, 8, 0)  # warm-up
        rates = {"ours": [], "raw": []}
        runs = {"ours": (ours, engine), "raw": (raw, engine._llm)}
        orders = []
        for r in range(args.rounds):
            order = ("ours", "raw") if r % 2 == 0 else ("raw", "ours")
            orders.append(",".join(order))
            for name in order:
                fn, target = runs[name]
                rates[name].append(await timed(fn, target, prompts, args.tokens, 1000 * r))
    best = {k: max(v) for k, v in rates.items()}
    return {
        "model": str(model),
        "streams": args.streams,
        "tokens_per_request": args.tokens,
        "rounds": args.rounds,
        "arm_order": orders,
        "ours_tok_per_s": round(best["ours"], 1),
        "raw_tok_per_s": round(best["raw"], 1),
        "throughput_ratio": round(best["ours"] / best["raw"], 3),
    }


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")  # vLLM would log to stdout
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="(the output is always JSON)")
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
