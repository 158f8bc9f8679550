"""`obsspec sft`: collect runs -> action-turn samples -> packed sequences -> the shared
trainer -> evaluation on held-out tasks.

    record = train_policy(config, models_dir, on_step, note, on_episodes)

Training writes OUT (an HF model directory vLLM serves as is, so `obsspec collect --policy
OUT` uses it) and OUT/obsspec-train.json, which records the base, the action format and the
content hashes of the tasks trained on, so no evaluation ever scores a task the policy saw.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from obsspec.models.registry import resolve_model
from obsspec.models.tokenizer import load_tokenizer
from obsspec.sft.config import EvalPolicyConfig, SFTConfig, check_eval_tasks
from obsspec.sft.data import load_policy_data
from obsspec.sft.evaluate import evaluate_policy, held_out_tasks
from obsspec.tracking import config_logger, require_wandb
from obsspec.train import distributed
from obsspec.train.checkpoint import write_record
from obsspec.train.fresh import call_in_fresh_process
from obsspec.train.loop import StepProgress, train_into
from obsspec.train.sequences import pack

Note = Callable[[str], None]
OnEpisodes = Callable[[str, int, int], None]  # arm, episodes done, episodes total


def train_policy(
    config: SFTConfig,
    models_dir: Path,
    on_step: Callable[[StepProgress], None],
    note: Note,
    on_episodes: OnEpisodes = lambda arm, done, total: None,
) -> dict:

    require_wandb(config.wandb)  # before any work
    if config.evaluate:
        check_eval_tasks(config.eval, training=True)
    base = resolve_model(config.base, models_dir)
    data = load_policy_data(config.data, load_tokenizer(base), min_reward=config.min_reward)
    if config.evaluate:  # before training: a wrong task set must not cost a training run
        held_out_tasks(config.eval.tasks, data.task_hashes)
    packed = pack(data.samples, config.train.max_len, config.train.loss_weighting)
    report = data.report
    note(
        f"{report.turns} action turns from {report.kept} of {report.episodes} episodes "
        f"({len(packed.sequences)} sequences, {sum(len(s.ids) for s in packed.sequences)} "
        f"tokens, {sum(s.target_tokens for s in packed.sequences)} of them learned)"
        + (f"; {packed.too_long} longer than --max-len skipped" if packed.too_long else "")
    )
    outcome = train_into(
        config.out,
        overwrite=config.overwrite,
        resume=config.resume,
        command="sft",
        inputs={"--data": config.data, "--base": base, "--eval-tasks": config.eval.tasks},
        base=base,
        sequences=packed.sequences,
        settings=config.train,
        progress=on_step,
        open_logger=config_logger(config, "sft"),
    )
    record = {
        "kind": "policy",
        "base": str(base),
        "action_format": data.action_format,
        "chat_template_kwargs": data.chat_template_kwargs,
        "config": config.model_dump(mode="json"),
        "data": report.as_dict() | {"too_long": packed.too_long},
        "trained_task_hashes": sorted(data.task_hashes),
        "training": vars(outcome),
    }
    if not distributed.current().main:
        return record  # rank 0 records and evaluates
    write_record(config.out, record)
    if config.evaluate:
        evaluation = EvalPolicyConfig(model=str(config.out), base=str(base), eval=config.eval)
        record["evaluation"] = evaluate_in_fresh_process(evaluation, models_dir, on_episodes, note)
        write_record(config.out, record)
    return record


def evaluate_in_fresh_process(
    config: EvalPolicyConfig, models_dir: Path, on_episodes: OnEpisodes, note: Note
) -> dict:
    """evaluate_policy in a spawned process (obsspec.train.fresh says why)."""
    handlers = {"progress": on_episodes, "note": note}
    return call_in_fresh_process(evaluate_policy, (config, models_dir), handlers)
