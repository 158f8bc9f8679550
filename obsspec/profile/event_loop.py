"""The simulator's event loop: one configuration of speculation over a workload's episodes.

    end, waste = run_turns(workload, gen, exec_s, Speculation(depth, breadth, attempt, hit, P))
    figures = evaluate(workload, spec, tool_time_scale, load, contention, oracle_delay_s)

The model it implements (turns, commands in order, predictions, engine sharing, the oracle)
is drawn in obsspec.profile.simulate, which calibrates, validates and sweeps it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from obsspec.profile.workload import Workload


@dataclass(frozen=True)
class Speculation:
    depth: int
    breadth: int
    attempt: np.ndarray  # (n, T) bool: the gate asks for a prediction of this command
    hit: np.ndarray  # (n, T) bool: a guess of this command's output is right and branched on
    predict: np.ndarray  # (n, T) prediction seconds


def run_turns(w: Workload, gen: np.ndarray, exec_s: np.ndarray, spec: Speculation):
    """Each episode's speculative latency (n,) and the reply-seconds its wrong guesses cost (n,)."""
    n, T = gen.shape
    start = np.zeros(n)  # when the reply that will be kept starts generating
    last_end = np.zeros(n)  # when the latest command's real output arrived
    recent = np.zeros((n, spec.depth))  # ends of the last `depth` commands, oldest first
    end, waste = np.zeros(n), np.zeros(n)
    for i in range(T):
        valid, command = w.valid[:, i], w.command[:, i]
        ready = start + gen[:, i]
        exec_end = np.maximum(ready, last_end) + exec_s[:, i]
        # A reply resting on `depth` guesses waits for the oldest of them to be verified.
        guess_ready = np.maximum(ready, recent[:, 0]) + spec.predict[:, i]
        arrived = command & spec.attempt[:, i] & (guess_ready < exec_end)
        kept = arrived & spec.hit[:, i]
        next_gen = gen[:, i + 1] if i + 1 < T else np.zeros(n)
        wrong = np.where(kept, spec.breadth - 1, spec.breadth) * arrived
        waste += wrong * np.minimum(next_gen, exec_end - guess_ready)
        end = np.where(valid, np.where(command, exec_end, np.maximum(ready, last_end)), end)
        start = np.where(command, np.where(kept, guess_ready, exec_end), ready)
        last_end = np.where(command, exec_end, last_end)
        shifted = np.column_stack([recent[:, 1:], exec_end])
        recent = np.where(command[:, None], shifted, recent)
    return end, waste


def sequential_total(w: Workload, exec_s: np.ndarray, load: int, contention: float) -> float:
    """Sum of sequential latencies, the other L-1 episodes slowing every reply."""
    g, e = float(w.gen.sum()), float(exec_s.sum())
    slowdown = 1 + contention * (load - 1) * g / (g + e) if g + e > 0 else 1.0
    return g * slowdown + e


def speculative_total(
    w: Workload, exec_s: np.ndarray, spec: Speculation, load: int, contention: float
) -> tuple[float, float]:
    """Sum of speculative latencies and the slowdown (one fixed-point step from none)."""
    end, waste = run_turns(w, w.gen, exec_s, spec)
    total, wasted = float(end.sum()), float(waste.sum())
    if total <= 0:
        return 0.0, 1.0
    busy, own = (float(w.gen.sum()) + wasted) / total, wasted / total
    slowdown = 1 + contention * ((load - 1) * busy + own)
    if slowdown > 1:
        end, _ = run_turns(w, w.gen * slowdown, exec_s, spec)
    return float(end.sum()), slowdown


def evaluate(w: Workload, spec: Speculation, scale: float, load: int, c: float, delay: float):
    """latency_reduction, its oracle ceiling, the fraction and the slowdown at one point."""
    exec_s = w.exec * scale
    seq = sequential_total(w, exec_s, load, c) or 1.0  # an episode of no time saves none
    total, slowdown = speculative_total(w, exec_s, spec, load, c)
    every = np.ones_like(w.command)
    perfect = Speculation(spec.depth, 1, every, every, np.full(w.gen.shape, delay))
    lr, olr = 1 - total / seq, 1 - speculative_total(w, exec_s, perfect, load, c)[0] / seq
    return {
        "latency_reduction": round(lr, 4),
        "oracle_latency_reduction": round(olr, 4),
        "oracle_fraction": round(lr / olr, 4) if olr > 0 else None,
        "slowdown": round(slowdown, 4),
    }
