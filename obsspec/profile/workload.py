"""The calibration as arrays: the simulator's input (obsspec.profile.simulate).

`workload(cal, episodes, seed)` lays the episodes out as (episodes, turns) arrays for the
simulator (obsspec.profile.simulate): with at most `episodes` calibrated episodes, each is
replicated equally (the weights of the measured pooled figure); with more, a random subset.
Uniform draws for attempts and hits, and each command's prediction seconds, are drawn there
once per seed, so every simulated point shares them (common random numbers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from obsspec.profile.calibrate import Calibration

FALLBACK_PREDICT_S = 0.25  # seconds per prediction when a run measured none


@dataclass(frozen=True)
class Workload:
    """Episodes side by side, (n, T); turns past an episode's end are zero padding."""

    gen: np.ndarray  # reply seconds on an idle engine
    exec: np.ndarray  # command seconds; 0 where no command
    command: np.ndarray  # bool: the turn runs a command
    valid: np.ndarray  # bool: the turn exists
    predict: np.ndarray  # prediction seconds (the family's samples, drawn once)
    u_attempt: np.ndarray  # uniforms shared by every point
    u_hit: np.ndarray
    attempt_rate: np.ndarray  # the command family's calibrated attempt rate
    kept_rate: np.ndarray  # the command family's calibrated kept rate


def workload(
    cal: Calibration, episodes: int = 400, seed: int = 0, predict_s: float | None = None
) -> Workload:
    """The calibrated episodes as arrays; predict_s, if given, replaces the measured seconds."""
    rng = np.random.default_rng(seed)
    pool = cal.episodes
    if len(pool) <= episodes:
        chosen = [ep for ep in pool for _ in range(math.ceil(episodes / len(pool)))]
    else:
        chosen = [pool[i] for i in sorted(rng.choice(len(pool), episodes, replace=False))]
    gen = pad([ep.gen_s for ep in chosen])
    u_predict = rng.random(gen.shape)
    pooled = [s for f in cal.families.values() for s in f.predict_s] or [FALLBACK_PREDICT_S]

    def figure(family: str | None, name: str, default: float) -> float:
        own = getattr(cal.families.get(family or ""), name, None)
        return own if own is not None else _or(getattr(cal, name), default)

    def prediction(row: int, i: int, family: str | None) -> float:
        if predict_s is not None:
            return predict_s
        samples = getattr(cal.families.get(family or ""), "predict_s", None) or pooled
        return samples[int(u_predict[row, i] * len(samples))]

    families = [ep.family for ep in chosen]
    return Workload(
        gen=gen,
        exec=pad([ep.exec_s for ep in chosen]),
        command=pad([[f is not None for f in fs] for fs in families], bool),
        valid=pad([[True] * len(fs) for fs in families], bool),
        predict=pad(
            [[prediction(r, i, f) for i, f in enumerate(fs)] for r, fs in enumerate(families)]
        ),
        u_attempt=rng.random(gen.shape),
        u_hit=rng.random(gen.shape),
        attempt_rate=pad([[figure(f, "attempt_rate", 1.0) for f in fs] for fs in families]),
        kept_rate=pad([[figure(f, "kept_rate", 0.0) for f in fs] for fs in families]),
    )


def pad(rows: Sequence[Sequence], dtype: type = float) -> np.ndarray:
    """Ragged rows as one (len(rows), longest) array, zero (False) past each row's end."""
    out = np.zeros((len(rows), max(map(len, rows), default=0)), dtype)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def _or(value: float | None, default: float) -> float:
    return default if value is None else value
