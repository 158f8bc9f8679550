"""What a shallower world model buys: `train-wm --layers K` for several K, one table.

Prints one JSON object (and writes it to OUT/result.json). Usage:

    python bench/wm_depth.py --data demo-run/oracle --data demo-run/policy-run \
        --held-out demo-run/profile/arms/seq --out wm-depth [--layers 30,15,10,6] \
        [--teacher demo-run/wm] [--bottom 6] [--epochs 3] [--lr 3e-4] [--batch-tokens 4096] \
        [--match-on MORE-EPISODES]

Every row is trained the same way (the same --data, epochs, learning rate and batch: the same
token budget) from K of the base model's layers (K = the base's depth: the base itself), and
with --teacher once more distilling from that teacher (`train-wm --teacher`), and for the K of
--bottom once more from the first K-1 layers and the last (`layer_choice=bottom`). Each is then:

    scored     `train-wm --eval-only` on --held-out, the policy's own episodes of tasks no row
               was trained on, one prediction at a time (concurrency 1, as one episode asks):
               match_rate_wm and its seen/new split (world_model.evaluate), pred_ms_p50, and
               exec_to_pred_ratio_p50 (the commands' seconds over the predictions', on commands
               of at least a second: `predictor_speedup_p50` at concurrency 1); with
               --match-on, scored again on that run's episodes for the match rates only
               (`more_*`; the evaluation's default concurrency: answers are greedy)
    timed      its vLLM engine's decode rate, 1 stream and 8 (bench/engine_throughput.py's
               measure), fresh engine, default placement
    co-trained one `rl` co-training update (world_model.cotrain.CoTrainer, [rl.cotrain]
               defaults) on the first 8 episodes of the last --data run, twice; the second's
               seconds (the first pays the allocator's warm-up)

Trained models are kept in OUT/K<k>[-teacher|-bottom], with their row's figures
(bench-row.json): a rerun reuses both (delete a row's directory to measure it again).
Nothing is pinned: engines and trainers run where obsspec puts them by default.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OBSSPEC = [str(Path(sys.executable).parent / "obsspec")]


def obsspec(*args: str, timeout: float = 7200) -> dict:
    """Run an obsspec command with --json; its JSON, or exit with its error."""
    result = subprocess.run(
        [*OBSSPEC, *args, "--json"], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    if result.returncode != 0:
        sys.exit(f"obsspec {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout)


def train(args, layers: int, teacher: Path | None, out: Path, choice: str) -> dict:
    record = out / "obsspec-train.json"
    if record.is_file():
        return json.loads(record.read_text())["training"]
    flags = ["train-wm", "--base", args.base, "--out", str(out), "--no-eval", "--overwrite"]
    flags += ["--layers", str(layers), "--held-out", "0", "--epochs", str(args.epochs)]
    flags += ["--lr", str(args.lr), "--batch-tokens", str(args.batch_tokens)]
    flags += ["--max-len", str(args.batch_tokens), "--set", f"layer_choice={choice}"]
    for run in args.data:
        flags += ["--data", str(run)]
    if teacher is not None:
        flags += ["--teacher", str(teacher)]
    return obsspec(*flags)


def matches(report: dict, prefix: str = "") -> dict:
    content = report.get("by_content", {})
    return {
        f"{prefix}match_rate_wm": report["match_rate_wm"],
        f"{prefix}match_rate_wm_seen": content.get("seen", {}).get("match_rate_wm"),
        f"{prefix}match_rate_wm_new": content.get("new", {}).get("match_rate_wm"),
        f"{prefix}turns": report["turns"],
    }


def score(args, model: Path) -> dict:
    report = obsspec(
        "train-wm", "--eval-only", "--model", str(model), "--data", str(args.held_out),
        "--set", "eval.concurrency=1",
    )  # fmt: skip
    return matches(report) | {
        "pred_ms_p50": report["pred_ms_p50"],
        "predictor_speedup_p50": report["exec_to_pred_ratio_p50"],
        "slow_turns": report["slow_turns"],
    }


def score_more(args, model: Path) -> dict:
    """Match rates only, on --match-on's episodes, at the evaluation's default concurrency
    (greedy answers do not depend on it; its timings would, so none are kept)."""
    report = obsspec("train-wm", "--eval-only", "--model", str(model), "--data", str(args.match_on))
    return {"match_on": str(args.match_on)} | matches(report, "more_")


def engine_rates(model: Path) -> dict:
    """Decode tokens/s of a fresh engine on the model, 1 stream then 8 (in a child process:
    each engine's memory and threads go with it)."""
    code = (
        "import asyncio, json, sys; sys.path.insert(0, 'bench');"
        "from wm_depth import measure_engine;"
        f"print(json.dumps(asyncio.run(measure_engine({str(model)!r}))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=900
    )
    if result.returncode != 0:
        sys.exit(f"engine on {model} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


async def measure_engine(model: str) -> dict:
    from engine_throughput import chat_prompt, measure

    from obsspec.inference.vllm_local import EngineSettings, LocalVLLMEngine

    _, prompt = chat_prompt(model)
    settings = EngineSettings(model=Path(model), max_model_len=2048, kv_cache_gb=1.0)
    async with LocalVLLMEngine(settings) as engine:
        await measure(engine, prompt, 1, 8, 0)  # the first request is slow
        single = await measure(engine, prompt, 1, 64, 1)
        many = await measure(engine, prompt, 8, 64, 2)
    return {"tok_per_s_1": round(single, 1), "tok_per_s_8": round(many, 1)}


def cotrain_seconds(args, model: Path) -> dict:
    """Seconds of one co-training update on an RL step's worth of episodes."""
    from obsspec.agent.protocol import ActionFormat
    from obsspec.runs import read_rows
    from obsspec.world_model.config import CotrainSettings
    from obsspec.world_model.cotrain import CoTrainer

    rows = read_rows(args.data[-1])[:8]
    settings = CotrainSettings(max_len=args.batch_tokens)
    trainer = CoTrainer(model, settings, ActionFormat.markdown, seed=0)  # the default
    first = trainer.update(rows)
    second = trainer.update(rows)
    return {
        "cotrain_s": round(second["wm_seconds"], 1),
        "cotrain_first_s": round(first["wm_seconds"], 1),
        "cotrain_forward_tokens": second["wm_forward_tokens"],
    }


def lacks_more(args, row: dict) -> bool:
    """The row has no match rates on --match-on's episodes yet (or on another run's)."""
    return args.match_on is not None and row.get("match_on") != str(args.match_on)


def measure_row(args, name: str, layers: int, teacher: Path | None, choice: str) -> dict:
    out = args.out / name
    started = time.monotonic()
    training = train(args, layers, teacher, out, choice)
    row = {"name": name, "layers": layers, "layer_choice": choice}
    row["teacher"] = str(teacher) if teacher else None
    row |= {"train_s": round(training["seconds"], 1), "train_tokens": training["tokens"]}
    row |= {"last_loss": training["last_loss"]}
    row |= score(args, out) | engine_rates(out) | cotrain_seconds(args, out)
    row["row_s"] = round(time.monotonic() - started, 1)
    return row


def one_row(args, layers: int, teacher: Path | None, choice: str = "even") -> dict:
    name = f"K{layers}" + ("-teacher" if teacher else "") + ("-bottom" if choice != "even" else "")
    kept = args.out / name / "bench-row.json"
    if kept.is_file():  # measured by an earlier run of this script
        row = json.loads(kept.read_text())
        if not lacks_more(args, row):
            return row
    else:
        row = measure_row(args, name, layers, teacher, choice)
    if lacks_more(args, row):
        row |= score_more(args, args.out / name)
    kept.write_text(json.dumps(row, indent=2) + "\n")
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def main(args) -> dict:
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for layers in args.layers:
        rows.append(one_row(args, layers, None))
        if args.teacher is not None and layers < args.teacher_layers:
            rows.append(one_row(args, layers, args.teacher))
        if layers in args.bottom:
            rows.append(one_row(args, layers, None, "bottom"))
    result = {
        "data": [str(d) for d in args.data],
        "held_out": str(args.held_out),
        "match_on": str(args.match_on) if args.match_on else None,
        "epochs": args.epochs,
        "lr": args.lr,
        "batch_tokens": args.batch_tokens,
        "cores": os.cpu_count(),
        "rows": rows,
    }
    (args.out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    sys.path.insert(0, str(Path(__file__).parent))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, action="append", required=True)
    parser.add_argument("--held-out", type=Path, required=True)
    parser.add_argument("--match-on", type=Path, help="more held-out episodes: match only")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--base", default="smollm2-135m-instruct")
    parser.add_argument("--layers", default="30,15,10,6")
    parser.add_argument("--teacher", type=Path)
    parser.add_argument("--teacher-layers", type=int, default=30)
    parser.add_argument("--bottom", default="", help="K values also trained on layer_choice=bottom")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parsed = parser.parse_args()
    parsed.layers = [int(k) for k in parsed.layers.split(",")]
    parsed.bottom = [int(k) for k in parsed.bottom.split(",") if k]
    print(json.dumps(main(parsed), indent=2))
