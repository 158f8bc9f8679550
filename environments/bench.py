"""`obsspec env bench`: what a command and a sandbox cost, ours against plain Docker.

Measured side by side in one run, interleaved so that machine noise hits both alike:
- a command's round trip through our persistent shell vs `docker exec` (the same API call
  the docker CLI makes) into the same container;
- acquiring a sandbox from a warm pool vs starting one cold (create, start, shell ready).
"""

from __future__ import annotations

import asyncio
import statistics
import time

from obsspec.environments.pool import SandboxPool
from obsspec.environments.sandbox import DockerSandbox, SandboxLimits


def p50(values: list[float]) -> float:
    return round(statistics.median(values), 3)


async def bench_exec(client, image: str, run_id: str, n: int) -> tuple[list[float], list[float]]:
    ours, docker_exec = [], []
    async with DockerSandbox(client, image, SandboxLimits(), run_id=run_id) as sandbox:
        await sandbox.run("true")  # warm-up
        for _ in range(n):
            start = time.perf_counter()
            await sandbox.run("true")
            ours.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            await asyncio.to_thread(sandbox.container.exec_run, ["true"])
            docker_exec.append((time.perf_counter() - start) * 1000)
    return ours, docker_exec


async def bench_acquire(client, image: str, run_id: str, n: int) -> tuple[list[float], list[float]]:
    warm, cold = [], []
    async with SandboxPool(client, image, size=1, run_id=run_id) as pool:
        for _ in range(n):
            while not pool.ready:  # let the pool refill: we measure a warm hit
                await asyncio.sleep(0.05)
            sandbox = await pool.acquire()
            warm.append(pool.stats.acquire_ms[-1])
            await pool.release(sandbox)
            start = time.perf_counter()
            async with DockerSandbox(client, image, run_id=run_id):
                cold.append((time.perf_counter() - start) * 1000)
    return warm, cold


async def run_bench(
    client, image: str, run_id: str, *, n_exec: int = 100, n_acquire: int = 10
) -> dict:
    ours, docker_exec = await bench_exec(client, image, run_id, n_exec)
    warm, cold = await bench_acquire(client, image, run_id, n_acquire)
    return {
        "image": image,
        "exec_ms_p50": p50(ours),
        "docker_exec_ms_p50": p50(docker_exec),
        "exec_overhead_ratio": round(statistics.median(ours) / statistics.median(docker_exec), 4),
        "acquire_ms_p50": p50(warm),
        "cold_start_ms_p50": p50(cold),
        "n_exec": n_exec,
        "n_acquire": n_acquire,
    }
