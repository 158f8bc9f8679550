"""Does speculation change what RL learns? One config, the same seeds, with and without it.

Runs `obsspec rl --config CONFIG` twice on the same tasks and starting weights: with
speculation (OUT/spec) and with `--no-speculate` (OUT/seq); an arm already finished in OUT is
read, one stopped part-way is resumed. Prints one JSON object, per arm:

    success_first, success_last   success rate over the first / last --window steps' episodes,
                                  each with a bootstrap 95% interval (episodes resampled)
    lift                          success_last - success_first, with its interval
    rollout_seconds               summed over the steps
and across the arms:
    curve_gap                     mean over steps of (spec - seq) success rate, with a 95%
                                  interval from resampling steps: an interval holding 0 means
                                  the curves are statistically indistinguishable
    rollout_time_ratio            spec rollout seconds / seq rollout seconds (< 1: faster)
    rollout_saved_s               seconds a step's rollout saved, mean over steps, with a 95%
                                  interval from resampling steps

Usage (examples/rl_cpu_learning.toml says how its tasks and models are made):

    python bench/rl_learning.py --config examples/rl_cpu_learning.toml --tasks wf-learn \
        --policy demo-run/policy --world-model demo-run/wm --out learn [--window 5] [--json]
    python bench/rl_learning.py --out learn --analyse-only
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARMS = {"spec": [], "seq": ["--no-speculate"]}


def run_arm(args, out: Path, extra: list[str]) -> None:
    done = out / "metrics.jsonl"
    if done.is_file() and len(done.read_text().splitlines()) >= steps_of(args.config):
        return
    obsspec = str(Path(sys.executable).parent / "obsspec")
    command = [obsspec, "rl", "--config", args.config, "--out", str(out)]
    command += ["--tasks", args.tasks, "--policy", args.policy, "--world-model", args.world_model]
    command += ["--resume"] if (out / "checkpoints").is_dir() else []
    print("$ obsspec " + " ".join(command[1:] + extra), file=sys.stderr, flush=True)
    # its tables go to stderr: stdout is this script's one JSON object
    subprocess.run(command + extra, check=True, cwd=ROOT, stdout=sys.stderr)


def steps_of(config: str) -> int:
    import tomllib

    return int(tomllib.loads(Path(config).read_text())["rl"]["steps"])


def read_rows(out: Path) -> list[dict]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def outcomes(rows: list[dict]) -> list[int]:
    """Each episode of the rows as 1 (solved) or 0, from the per-step success rates."""
    episodes = []
    for row in rows:
        solved = round(row["success_rate"] * row["episodes"])
        episodes += [1] * solved + [0] * (row["episodes"] - solved)
    return episodes


RESAMPLES = 4000


def percentile_interval(draw, resamples: int = RESAMPLES) -> list[float]:
    """The 95% percentile interval of `resamples` bootstrap draws (draw() gives one)."""
    draws = sorted(draw() for _ in range(resamples))
    return [draws[int(0.025 * resamples)], draws[int(0.975 * resamples) - 1]]


def interval(values: list, statistic, *, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return percentile_interval(lambda: statistic([rng.choice(values) for _ in values]))


def arm_figures(rows: list[dict], window: int) -> dict:
    first, last = outcomes(rows[:window]), outcomes(rows[-window:])
    rng = random.Random(1)

    def lift_draw() -> float:
        return statistics.fmean(rng.choices(last, k=len(last))) - statistics.fmean(
            rng.choices(first, k=len(first))
        )

    return {
        "steps": len(rows),
        "success_per_step": [row["success_rate"] for row in rows],
        "success_first": statistics.fmean(first),
        "success_first_ci95": interval(first, statistics.fmean),
        "success_last": statistics.fmean(last),
        "success_last_ci95": interval(last, statistics.fmean),
        "lift": statistics.fmean(last) - statistics.fmean(first),
        "lift_ci95": percentile_interval(lift_draw),
        "rollout_seconds": sum(row["rollout_seconds"] for row in rows),
        "step_seconds": sum(row["step_seconds"] for row in rows),
    }


def compare(spec: list[dict], seq: list[dict]) -> dict:
    steps = min(len(spec), len(seq))
    gaps = [spec[i]["success_rate"] - seq[i]["success_rate"] for i in range(steps)]
    rollout = [sum(row["rollout_seconds"] for row in arm[:steps]) for arm in (spec, seq)]
    saved = [seq[i]["rollout_seconds"] - spec[i]["rollout_seconds"] for i in range(steps)]
    return {
        "steps_compared": steps,
        "curve_gap": statistics.fmean(gaps),
        "curve_gap_ci95": interval(gaps, statistics.fmean),
        "rollout_time_ratio": rollout[0] / rollout[1],
        # seconds a step's rollout saved with speculation (seq - spec), mean over steps
        "rollout_saved_s": statistics.fmean(saved),
        "rollout_saved_s_ci95": interval(saved, statistics.fmean),
        "spec_match_rate": [row["spec_match_rate"] for row in spec[:steps]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(ROOT / "examples" / "rl_cpu_learning.toml"))
    parser.add_argument("--tasks")
    parser.add_argument("--policy", default=str(ROOT / "demo-run" / "policy"))
    parser.add_argument("--world-model", default=str(ROOT / "demo-run" / "wm"))
    parser.add_argument("--out", required=True, help="The two runs go in OUT/spec and OUT/seq.")
    parser.add_argument("--window", type=int, default=5, help="Steps at each end compared.")
    parser.add_argument("--analyse-only", action="store_true", help="Read OUT; run nothing.")
    parser.add_argument("--json", action="store_true", help="Only the JSON on stdout.")
    args = parser.parse_args()
    out = Path(args.out)
    if not args.analyse_only:
        if not args.tasks:
            parser.error("--tasks is required unless --analyse-only")
        for name, extra in ARMS.items():
            run_arm(args, out / name, extra)
    rows = {name: read_rows(out / name) for name in ARMS}
    if any(len(r) < 2 * args.window for r in rows.values()):
        sys.exit(f"each arm needs at least {2 * args.window} steps to compare its two ends")
    result = {name: arm_figures(r, args.window) for name, r in rows.items()}
    result["compare"] = compare(rows["spec"], rows["seq"])
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
