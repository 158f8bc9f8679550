"""Policy training samples from collect runs: each action turn, on its exact context.

    data = load_policy_data([oracle_run, policy_run], tokenizer, min_reward=1.0)

Each kept episode's action turns become samples: `prompt_ids` is the episode's context up to
the reply (exactly what the policy saw), `target_ids` is the reply's ids as generated
(ending with the end-of-turn token when the policy produced it). Packed (obsspec.train), the
turns of an episode chain into one sequence whose labels are exactly the episode's policy
mask: the loss falls on the policy's own tokens and nowhere else.

Not learned, and counted:
    episodes  an infrastructure failure (not data); a reward below --min-reward, or none
    turns     a reply that did not parse to an action; a reply cut off at max tokens
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from obsspec.errors import ConfigError
from obsspec.runs import chat_template_kwargs, load_runs, read_run_manifest
from obsspec.train.sequences import Sample

WHOSE = "the base model's"


@dataclass
class PolicyDataReport:
    episodes: int = 0  # read from the runs
    kept: int = 0  # episodes with at least one learned turn
    filtered: Counter = field(default_factory=Counter)  # reason -> episodes not learned from
    turns: int = 0  # learned action turns
    skipped_turns: Counter = field(default_factory=Counter)  # reason -> turns not learned

    def as_dict(self) -> dict:
        return {
            "episodes": self.episodes,
            "kept_episodes": self.kept,
            "filtered_episodes": dict(self.filtered),
            "turns": self.turns,
            "skipped_turns": dict(self.skipped_turns),
        }


@dataclass
class PolicyData:
    action_format: str
    chat_template_kwargs: dict  # how the runs rendered their prompts (evaluation does the same)
    samples: list[Sample]
    task_hashes: set[str]  # of the episodes learned from
    report: PolicyDataReport


def load_policy_data(
    data_dirs: list[Path], tokenizer, *, min_reward: float | None = None
) -> PolicyData:
    rows, fmt = load_runs(list(data_dirs), tokenizer, "--data", WHOSE)
    report = PolicyDataReport(episodes=len(rows))
    samples: list[Sample] = []
    hashes: set[str] = set()
    for row in rows:
        reason = filtered_because(row, min_reward)
        if reason:
            report.filtered[reason] += 1
            continue
        episode = action_samples(row, report.skipped_turns)
        if episode:
            report.kept += 1
            report.turns += len(episode)
            samples += episode
            hashes.add(row["task_hash"])
    check_not_empty(report, min_reward)
    kwargs = chat_template_kwargs(read_run_manifest(data_dirs[0], flag="--data"))
    return PolicyData(fmt, kwargs, samples, hashes, report)


def filtered_because(row: dict, min_reward: float | None) -> str | None:
    if row.get("error_kind") == "infra":
        return "infrastructure error"
    if min_reward is None:
        return None
    if row.get("reward") is None:
        return "no reward (the verifier did not run)"
    if row["reward"] < min_reward:
        return f"reward below {min_reward:g}"
    return None


def action_samples(row: dict, skipped: Counter) -> list[Sample]:
    """One sample per learnable action turn, checked against the episode's context."""
    context = row["context_ids"]
    offset = len(row["prompt_ids"])
    samples = []
    for turn in row["turns"]:
        ids = list(turn["action_ids"])
        end = offset + len(ids)
        if context[offset:end] != ids or not all(row["mask"][offset:end]):
            raise ConfigError(
                f"--data: task {row['task_id']} episode {row.get('episode_index', '?')} turn "
                f"{turn['index']}: the context does not hold the reply's ids where the turns "
                "say (a damaged or hand-edited dataset)"
            )
        if turn["action"] == "invalid":
            skipped["no action in the reply"] += 1
        elif turn.get("generation_finish") == "length":
            skipped["reply cut off at max tokens"] += 1
        else:
            samples.append(Sample(context[:offset], ids))
        offset = end + len(turn["observation_ids"])
    return samples


def check_not_empty(report: PolicyDataReport, min_reward: float | None) -> None:
    if report.turns:
        return
    filtered = sum(report.filtered.values())
    if min_reward is not None and filtered == report.episodes:
        reasons = ", ".join(f"{n} {reason}" for reason, n in report.filtered.most_common())
        raise ConfigError(
            f"--min-reward {min_reward:g} filtered out all {report.episodes} episode(s) "
            f"({reasons}); lower it, or add runs with successful episodes"
        )
    skipped = dict(report.skipped_turns) or "none"
    raise ConfigError(
        f"--data: no trajectory with an action to learn from in {report.episodes} episode(s) "
        f"(episodes filtered: {dict(report.filtered) or 'none'}; turns skipped: {skipped})"
    )
