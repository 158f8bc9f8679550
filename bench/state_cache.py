"""How often the state-keyed cache answers the commands of a GRPO group, against the
exact-context cache it replaces.

Prints one JSON object: per way of running the group (`together`: the episodes at once, as in
an RL step; `one_after_another`), per predictor cascade (`context_cache`: the exact-context
cache then rules, the old default; `state_cache`: the state cache then rules, the new
default; `state_cache_no_wait`: the same without waiting for a sibling's running command;
`both`: the state cache, then the exact-context cache, then rules, so the context
cache's hits there are those the state cache missed), for the group and for the next group
of the same task on the same predictor (a later RL step):

    attempted            commands the predictor was asked about (gate=always: every one)
    matched_by_source    exact-match hits by the predictor that answered
    state_hit_share      state-cache hits / attempted
    match_rate_attempted all hits / attempted

The workload: `--group` episodes of one task on the base image, in real Docker sandboxes.
The policy is scripted: every sibling runs the same commands (files written and read,
sorting, a Python one-liner, a clock, a sleep, a command killed by its timeout, one more
after it) but words its replies differently, and with a different length, so their contexts
differ and, run together, they are staggered. Replies take --seconds-per-token per token.
The cascades run one after another, in the reverse order for the second way of running the
group, so that no cascade always meets the machine first (`arm_order` in the JSON). Usage:
python bench/state_cache.py [--group 4] [--seconds-per-token 0.01]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

TASK_HASH = "bench-state-cache"
TIMEOUT_S = 2.0
COMMANDS = [
    "ls /",
    "mkdir -p /work && cd /work",
    "printf 'name,qty\\npear,3\\napple,5\\nfig,1\\n' > stock.csv",
    "cat stock.csv",
    "sort -t, -k2 -n stock.csv | head -3",
    "python3 -c \"import csv; print(sum(int(r['qty']) for r in csv.DictReader(open('stock.csv'))))\"",  # noqa: E501
    "wc -l stock.csv",
    "date +%s%N",  # the clock: never the same twice
    "sleep 0.5; echo built > status.txt; cat status.txt",
    "sleep 5",  # killed by its timeout: what ran after it is not known
    "ls",
]


def sibling_policy(tokenizer, salt: int, seconds_per_token: float):
    """Reply k runs COMMANDS[k] (then done), worded and padded by sibling."""
    from obsspec.agent.protocol import Action, ActionFormat, format_action
    from obsspec.inference.scripted import ScriptedEngine

    def reply(context: str) -> str:
        k = context.count("<|im_start|>assistant") - 1  # replies already in the context
        if k >= len(COMMANDS):
            return format_action(Action("done"), ActionFormat.markdown)
        musing = " Let me check that once more." * ((salt * 3 + k) % 4)
        action = format_action(Action("command", COMMANDS[k]), ActionFormat.markdown)
        return f"Sibling {salt}, step {k}.{musing}\n{action}"

    return ScriptedEngine(tokenizer, reply, seconds_per_token=seconds_per_token)


async def play_one(sandbox, builder, loop, salt: int, seconds_per_token: float):
    from obsspec.agent.context import TokenContext
    from obsspec.agent.episode import EpisodeLimits, play
    from obsspec.agent.protocol import SYSTEM_PROMPTS, ActionFormat, task_prompt
    from obsspec.trajectory import Trajectory

    limits = EpisodeLimits(max_turns=len(COMMANDS) + 1, max_tokens=256, command_timeout_s=TIMEOUT_S)
    prompt = builder.prompt_ids(
        SYSTEM_PROMPTS[ActionFormat.markdown], task_prompt("Total the stock.")
    )
    trajectory = Trajectory("bench-stock", TASK_HASH, "scripted", salt, prompt)
    context = TokenContext()
    context.extend(prompt, generated=False)
    engine = sibling_policy(builder.tokenizer, salt, seconds_per_token)
    await play(trajectory, context, sandbox, engine, builder, limits, loop)
    if trajectory.error or trajectory.finish_reason != "done":
        raise RuntimeError(f"the episode ended {trajectory.finish_reason}: {trajectory.error}")
    return trajectory


async def play_group(
    pool, builder, loop, *, size: int, together: bool, first_salt: int, seconds_per_token: float
):
    """The group's trajectories. Sandboxes are started before the episodes so that, played
    together, the siblings begin at the same moment."""
    sandboxes = await asyncio.gather(*(pool.acquire() for _ in range(size)))
    episodes = [
        play_one(sandbox, builder, loop, first_salt + i, seconds_per_token)
        for i, sandbox in enumerate(sandboxes)
    ]
    try:
        if together:
            return list(await asyncio.gather(*episodes))
        return [await episode for episode in episodes]
    finally:
        for sandbox in sandboxes:
            await pool.release(sandbox)


def cascades() -> dict:
    from obsspec.world_model.cache import CachePredictor
    from obsspec.world_model.cascade import CascadePredictor, default_cascade
    from obsspec.world_model.rules import RulePredictor
    from obsspec.world_model.state_cache import StateCachePredictor

    return {
        "context_cache": lambda: CascadePredictor([CachePredictor(), RulePredictor()]),
        "state_cache": default_cascade,
        "state_cache_no_wait": lambda: CascadePredictor(
            [StateCachePredictor(wait_s=0), RulePredictor()]
        ),
        "both": lambda: CascadePredictor(
            [StateCachePredictor(), CachePredictor(), RulePredictor()]
        ),
    }


def figures(trajectories) -> dict:
    from obsspec.speculation.totals import SpeculationTotals, pooled_rate

    records = [t.speculation for tr in trajectories for t in tr.turns if t.action == "command"]
    by_source: dict[str, int] = {}
    for record in records:
        if record is not None and record.matched:
            by_source[record.source] = by_source.get(record.source, 0) + 1
    totals = SpeculationTotals.of_turns(t for tr in trajectories for t in tr.turns)
    return {
        "episodes": len(trajectories),
        "command_turns": totals.command_turns,
        "attempted": totals.attempted,
        "matched_by_source": dict(sorted(by_source.items())),
        "state_hit_share": pooled_rate(by_source.get("state", 0), totals.attempted),
        "match_rate_attempted": pooled_rate(totals.matched, totals.attempted),
        "kept": totals.kept,
    }


async def measure(pool, builder, *, size: int, seconds_per_token: float) -> dict:
    """Every way of running the group, with every cascade; a fresh predictor each."""
    from obsspec.speculation.gate import GateMode, GateSettings
    from obsspec.speculation.runner import SpeculativeLoop
    from obsspec.speculation.settings import SpeculationSettings

    settings = SpeculationSettings(gate=GateSettings(mode=GateMode.always))
    results: dict = {"arm_order": {}}
    for index, mode in enumerate(("together", "one_after_another")):
        order = list(cascades().items())[:: 1 if index % 2 == 0 else -1]
        results["arm_order"][mode] = ",".join(name for name, _ in order)
        for name, make in order:
            print(f"-- {mode}: {name}", file=sys.stderr)
            loop = SpeculativeLoop(make(), settings=settings)
            run = {"size": size, "together": mode == "together"}
            group = await play_group(
                pool, builder, loop, first_salt=0, seconds_per_token=seconds_per_token, **run
            )
            later = await play_group(
                pool, builder, loop, first_salt=size, seconds_per_token=seconds_per_token, **run
            )
            results.setdefault(mode, {})[name] = {
                "group": figures(group),
                "next_group": figures(later),
            }
    for mode in ("together", "one_after_another"):  # each cascade in the usual order
        results[mode] = {name: results[mode][name] for name in cascades()}
    return results


async def main(args) -> dict:
    from transformers import AutoTokenizer

    from obsspec.agent.context import ChatContextBuilder
    from obsspec.config import GlobalConfig
    from obsspec.environments.gc import run_scope
    from obsspec.environments.pool import SandboxPool
    from obsspec.models.registry import resolve_model

    config = GlobalConfig()
    model = resolve_model(args.model or config.default_model, config.paths.models_dir)
    builder = ChatContextBuilder(AutoTokenizer.from_pretrained(model))
    with run_scope("bench-state-cache") as (client, run_id):
        async with SandboxPool(client, config.base_image, size=args.group, run_id=run_id) as pool:
            results = await measure(
                pool, builder, size=args.group, seconds_per_token=args.seconds_per_token
            )
    return {
        "group_size": args.group,
        "commands_per_episode": len(COMMANDS),
        "seconds_per_token": args.seconds_per_token,
        "gate": "always",
        **results,
    }


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="tokenizer source [default model]")
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--seconds-per-token", type=float, default=0.01)
    return parser.parse_args(argv)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(parse_args())), indent=2))
