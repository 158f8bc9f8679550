"""The CPU engine's own cost under each setup: tokens/s and the CPU it burns idle.

Prints one JSON object. Usage: python bench/engine_cpu_setup.py [--model NAME|PATH]
[--cores 0] [--tokens 64] [--streams 8] [--idle-s 2]
[--setups vllm,tcmalloc,iomp,core-spin,obsspec,bfloat16].

Setups (obsspec.inference.cpu_libraries and obsspec.inference.worker_spin), each a fresh engine
on the same core(s), run in the order A B C .. C B A so that drift hits each alike:
    vllm       nothing preloaded by obsspec, the worker's idle spin vLLM's (1 s): vLLM alone
               (it preloads torch's GNU OpenMP)
    tcmalloc   + Debian's tcmalloc (libtcmalloc_minimal.so.4)
    iomp       + tcmalloc and Intel OpenMP (libiomp5.so: vLLM then sets KMP_BLOCKTIME=5)
    core-spin  iomp, and the worker sleeping after 50 ms idle, the engine core still spinning
               vLLM's 1 s while it waits for each step's result
    obsspec    iomp, the worker sleeping after 50 ms idle and the engine core not spinning:
               obsspec's CPU default (and its dtype: float32 on a CPU without bfloat16
               instructions, obsspec.inference.cpu_dtype)
    bfloat16   obsspec, but computing in bfloat16 whatever the CPU
The first four keep the model's dtype choice as obsspec makes it ('auto').
Per engine: decode tokens/s with one stream and with N at once (64-token replies, ignore
EOS), the cores the engine's processes keep busy while N streams decode (`busy_cores`: CPU
seconds over wall seconds; the worker computes on its core, the engine core waits for it),
and the CPU seconds the engine's processes use in the `idle_s` seconds after a request
ends (`idle_cpu_s`, split per second): vLLM's worker spins on its message queue for
`busy_loop_s` after each step (shm_broadcast), and OpenMP threads may spin too. A CPU second
burnt while idle is a second a sandbox or the other engine on that core does not get.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time

SETUPS = ("vllm", "tcmalloc", "iomp", "core-spin", "obsspec", "bfloat16")


def libraries(setup: str) -> list[str]:
    from obsspec.inference.cpu_libraries import default_libraries, find_library

    if setup == "vllm":
        return []
    tcmalloc = find_library("libtcmalloc_minimal.so.4")
    if tcmalloc is None:
        raise SystemExit("tcmalloc is not installed (Debian: libtcmalloc-minimal4)")
    return [str(tcmalloc)] if setup == "tcmalloc" else default_libraries()


def spins(setup: str) -> tuple[float | None, float | None]:
    """The worker's idle spin and the engine core's: vLLM's own but for obsspec's defaults
    (None: chosen as a user's engine chooses it)."""
    from obsspec.inference.worker_spin import VLLM_SPIN_S

    if setup in ("obsspec", "bfloat16"):
        return None, None
    return (None, VLLM_SPIN_S) if setup == "core-spin" else (VLLM_SPIN_S, VLLM_SPIN_S)


def engine_cpu_s() -> float:
    """CPU seconds used so far by this process's children (the engine's processes)."""
    import psutil

    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


async def rate(engine, prompt_ids, streams: int, tokens: int, seed: int) -> float:
    return (await decode(engine, prompt_ids, streams, tokens, seed))[0]


async def decode(engine, prompt_ids, streams: int, tokens: int, seed: int) -> tuple[float, float]:
    """Tokens/s of `streams` requests at once, and the cores the engine kept busy meanwhile."""
    from obsspec.inference.base import Sampling

    start, cpu = time.monotonic(), engine_cpu_s()
    sampling = [
        Sampling(max_tokens=tokens, temperature=1.0, seed=seed + i, ignore_eos=True)
        for i in range(streams)
    ]
    gens = await asyncio.gather(*(engine.generate(prompt_ids, s) for s in sampling))
    seconds = time.monotonic() - start
    return sum(len(g.token_ids) for g in gens) / seconds, (engine_cpu_s() - cpu) / seconds


async def idle_burn(engine, prompt_ids, idle_s: float) -> list[float]:
    """CPU seconds per second of the engine's processes after one short request ends."""
    await rate(engine, prompt_ids, 1, 8, 7)
    burnt, last = [], engine_cpu_s()
    for _ in range(int(idle_s)):
        await asyncio.sleep(1.0)
        now = engine_cpu_s()
        burnt.append(round(now - last, 3))
        last = now
    return burnt


async def one_engine(model, setup: str, args, prompt_ids) -> dict:
    from obsspec.inference.cpu_dtype import engine_dtype
    from obsspec.inference.vllm_local import EngineSettings, LocalVLLMEngine

    worker_spin, core_spin = spins(setup)
    settings = EngineSettings(
        model=model,
        max_model_len=2048,
        kv_cache_gb=1.0,
        max_num_seqs=max(args.streams, 8),
        cpu_cores=None if args.cores == "auto" else args.cores,
        cpu_libraries=libraries(setup),
        worker_spin_s=worker_spin,
        engine_core_spin_s=core_spin,
        dtype="bfloat16" if setup == "bfloat16" else "auto",
    )
    start = time.monotonic()
    async with LocalVLLMEngine(settings) as engine:
        load_s = time.monotonic() - start
        await rate(engine, prompt_ids, 1, 8, 0)  # warm-up: the first request is slow
        single = await rate(engine, prompt_ids, 1, args.tokens, 1)
        many, busy_cores = await decode(engine, prompt_ids, args.streams, args.tokens, 2)
        idle = await idle_burn(engine, prompt_ids, args.idle_s)
        preloaded = [os.path.basename(path) for path in engine.preloaded]
        spin_s = await engine.worker_spin_s()
    return {
        "load_s": load_s,
        "single": single,
        "many": many,
        "busy_cores": busy_cores,
        "idle": idle,
        "preloaded": preloaded,
        "worker_spin_s": spin_s,
        "dtype": engine_dtype(settings.dtype),
    }


async def main(args) -> dict:
    from engine_throughput import chat_prompt  # bench/ is this script's own path

    model, prompt_ids = chat_prompt(args.model)
    setups = args.setups.split(",")
    unknown = set(setups) - set(SETUPS)
    if unknown:
        raise SystemExit(f"--setups: unknown {sorted(unknown)}; choose from {', '.join(SETUPS)}")
    order = [*setups, *reversed(setups)]
    runs: dict[str, list[dict]] = {setup: [] for setup in setups}
    for setup in order:
        runs[setup].append(await one_engine(model, setup, args, prompt_ids))
    out = {
        "model": str(model),
        "cores": args.cores,
        "machine_cores": os.cpu_count(),
        "tokens_per_request": args.tokens,
        "streams": args.streams,
        "arm_order": order,
        "setups": {setup: summary(found) for setup, found in runs.items()},
    }
    base_name = setups[0]
    base = out["setups"][base_name]
    for setup in setups[1:]:
        mine = out["setups"][setup]
        mine[f"single_vs_{base_name}"] = round(
            mine["tok_per_s_single"] / base["tok_per_s_single"], 3
        )
        mine[f"many_vs_{base_name}"] = round(mine["tok_per_s_many"] / base["tok_per_s_many"], 3)
    return out


def summary(runs: list[dict]) -> dict:
    """The mean of the setup's engines (two: one on each side of the ABBA order)."""
    return {
        "preloaded": runs[0]["preloaded"],
        "worker_spin_s": runs[0]["worker_spin_s"],
        "dtype": runs[0]["dtype"],
        "load_s": round(statistics.fmean(r["load_s"] for r in runs), 1),
        "tok_per_s_single": round(statistics.fmean(r["single"] for r in runs), 1),
        "tok_per_s_many": round(statistics.fmean(r["many"] for r in runs), 1),
        "busy_cores": round(statistics.fmean(r["busy_cores"] for r in runs), 2),
        "idle_cpu_s": [
            round(statistics.fmean(s), 3) for s in zip(*(r["idle"] for r in runs), strict=True)
        ],
        "each": [
            {
                "single": round(r["single"], 1),
                "many": round(r["many"], 1),
                "busy_cores": round(r["busy_cores"], 2),
                "idle": r["idle"],
            }
            for r in runs
        ],
    }


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")  # vLLM would log to stdout
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--cores", default="0", help="The engine's cores (as placed).")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--idle-s", type=float, default=2.0)
    parser.add_argument(
        "--setups", default=",".join(SETUPS), help="Which setups, the first the base of ratios."
    )
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=1))
