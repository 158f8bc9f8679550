"""A policy's evaluation: episodes on held-out tasks through the real collect path.

    report = evaluate_policy(EvalPolicyConfig(model=..., eval=...), models_dir, emit)

The policy (and, to compare, its base model) runs the held-out tasks with `obsspec collect`'s
own pipeline: same engine, sandboxes, episode loop and verifier, into run directories
MODEL/eval/{policy,base}-<settings digest>. A rerun with the same settings resumes them, so an
evaluation already done costs nothing; other settings (say, another temperature) get their own
directories and leave earlier ones as they are.

Rates are pooled (sums of counts), over episodes the infrastructure did not fail:
    valid_action_rate   replies that parse to an action (a command or done) / replies
    success_rate        episodes the verifier passed (reward 1) / episodes
    mean_turns          replies / episodes
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from obsspec.agent.episode import EpisodeLimits
from obsspec.environments.tasks.model import Task
from obsspec.errors import ConfigError
from obsspec.models.registry import resolve_model
from obsspec.rollout.collect import collect
from obsspec.rollout.config import CollectConfig
from obsspec.rollout.plan import load_task_set
from obsspec.runs import read_rows
from obsspec.sft.config import EvalPolicyConfig, PolicyEvalSettings, check_eval_tasks
from obsspec.train.checkpoint import read_record
from obsspec.world_model.examples import family_of

Emit = Callable[..., None]  # emit("progress", arm, done, total) / emit("note", message)


def evaluate_policy(config: EvalPolicyConfig, models_dir: Path, emit: Emit) -> dict:
    check_eval_tasks(config.eval, training=False)
    model = resolve_model(config.model, models_dir).resolve()  # one identity, however named
    record = read_record(model) or {}
    tasks = held_out_tasks(config.eval.tasks, set(record.get("trained_task_hashes", [])))
    base = config.base or record.get("base")
    style = (record.get("action_format", "markdown"), record.get("chat_template_kwargs") or {})
    out = model / "eval"
    digest = settings_digest(config.eval)
    arms = {"policy": str(model)}
    if base and config.eval.compare_base:
        arms["base"] = base
    emit("note", f"evaluating {' and '.join(arms)} on {len(tasks)} held-out task(s)")
    results = {
        arm: score_arm(arm, policy, config.eval, style, out / f"{arm}-{digest}", models_dir, emit)
        for arm, policy in arms.items()
    }
    report = {"model": str(model), "tasks": len(tasks), **results["policy"]}
    report["base_model"] = base
    for key in ("valid_action_rate", "success_rate", "mean_turns"):
        report[f"base_{key}"] = results["base"][key] if "base" in results else None
    report["base"] = results.get("base")
    return report


def held_out_tasks(spec: str, trained_hashes: set[str]) -> list[Task]:
    tasks, broken = load_task_set(spec, strict=False)
    if not tasks:
        raise ConfigError(
            f"--eval-tasks {spec}: no task loads"
            + (f" ({len(broken)} broken, e.g. {next(iter(broken.values()))})" if broken else "")
        )
    check_unseen(tasks, trained_hashes)
    return tasks


def check_unseen(tasks: list[Task], trained_hashes: set[str]) -> None:
    for task in tasks:
        if task.content_hash in trained_hashes:
            raise ConfigError(
                f"--eval-tasks: task {task.id} is also in the training data (same content); "
                "held-out tasks must be unseen (generate them with another --seed)"
            )


def settings_digest(settings: PolicyEvalSettings) -> str:
    """Names an evaluation's run directories: the settings that decide its episodes."""
    decisive = settings.model_dump(mode="json", exclude={"concurrency", "compare_base"})
    decisive["tasks"] = os.path.abspath(settings.tasks)
    return hashlib.sha256(json.dumps(decisive, sort_keys=True).encode()).hexdigest()[:8]


def score_arm(
    arm: str,
    policy: str,
    settings: PolicyEvalSettings,
    style: tuple[str, dict],
    out: Path,
    models_dir: Path,
    emit: Emit,
) -> dict:
    """style: the action format and chat-template kwargs the policy was trained with."""
    fmt, template_kwargs = style
    config = CollectConfig(
        tasks=settings.tasks,
        out=out,
        policy=policy,
        episodes_per_task=settings.episodes_per_task,
        concurrency=settings.concurrency,
        seed=settings.seed,
        limits=EpisodeLimits(
            max_turns=settings.max_turns,
            max_tokens=settings.max_tokens,
            temperature=settings.temperature,
            action_format=fmt,
            chat_template_kwargs=template_kwargs,
        ),
        engine=settings.engine,
    )

    def on_event(_event, stats) -> None:
        emit("progress", arm, stats.collected, stats.total)

    summary = asyncio.run(collect(config, models_dir, on_event))
    metrics = policy_metrics(read_rows(out, flag="--eval-tasks"))
    return {**metrics, "run": str(out), "missing_episodes": summary["missing"]}


def policy_metrics(rows: list[dict]) -> dict:
    scored = [row for row in rows if row.get("error_kind") != "infra"]
    replies = sum(len(row["turns"]) for row in scored)
    valid = sum(turn["action"] != "invalid" for row in scored for turn in row["turns"])
    successes = [row for row in scored if row["reward"] == 1.0]
    by_family: dict[str, Counter] = {}
    for row in scored:
        family = by_family.setdefault(family_of(row["task_id"]), Counter())
        family["episodes"] += 1
        family["successes"] += row["reward"] == 1.0
    n = len(scored)
    return {
        "episodes": n,
        "infra_failed": len(rows) - n,
        "valid_action_rate": valid / replies if replies else None,
        "success_rate": len(successes) / n if n else None,
        "mean_turns": replies / n if n else None,
        "done_rate": sum(row["declared_done"] for row in scored) / n if n else None,
        "by_family": {name: dict(counts) for name, counts in sorted(by_family.items())},
    }
