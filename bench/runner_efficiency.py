"""How much of the possible saving the speculative runner gets, and what it costs when wrong.

Prints one JSON object with three figures (goals in brackets):

    oracle_efficiency  [>= 0.9]   saving with an instant perfect predictor, over the ideal
                                  saving computed from the sequential run's own timings:
                                      achieved = sum(T_seq) - sum(T_oracle)
                                      ideal    = sum over command turns i that have a next
                                                 turn of min(G_{i+1}, E_i)
                                  (depth 1: the next reply overlaps the command; G = reply
                                  seconds, E = command seconds, both measured in the
                                  sequential episodes, REFERENCE.md "Latency arithmetic")
    miss_overhead      [<= 1.03]  sum(T) with an instant, always wrong predictor and
                                  gate=always, over sum(T_seq): every turn speculates, every
                                  guess is discarded and its reply aborted
    gate_no_harm       [<= 1.01]  sum(T) with gate=auto (the same wrong predictor) on a
                                  workload of fast commands, over sum(T_seq) on it

T is an episode's agent seconds (the turns only; the sandbox is started before). Usage:
python bench/runner_efficiency.py [--model NAME|PATH] [--rounds 3] [--reply-tokens 24]
[--fast-pairs 12] [--json]. Each figure comes with a bootstrap 95% interval over rounds
(pairs for gate_no_harm): on this machine one vLLM request of fixed length varies by about
10% from run to run, so single episodes cannot tell 1% apart.

The workload is controlled: the policy's replies are scripted (`sleep D; echo step-k`, then
done; the fast workload drops the sleep), each paced by a real generation of --reply-tokens
tokens on the real vLLM engine (same prompt, seed and priority: obsspec.inference.scripted
.PacedEngine), in real Docker sandboxes. So generation times, scheduling and aborts are real
while every arm sees the same episodes. Arms are interleaved round by round so machine noise
hits all alike: the slow rounds alternate seq, miss, oracle and miss, seq, oracle (seq and
miss swap places, ABBA over two rounds; the oracle replays the round's seq episode, so it
comes after it), then fast seq and fast auto in ABBA order; `arm_order` in the JSON lists
each round's order. Sums are pooled over rounds. Each sandbox starts before its episode's
timer, so no container starts during a timed episode.
Placement: obsspec's (obsspec.rollout.cores: on 2 cores the engine on core 0, the sandboxes
on core 1); --sandbox-cpuset overrides the sandboxes' cores. --pin-driver also pins this
process (event loop, tokenisation, Docker I/O) to the sandboxes' cores, a tuning no user gets:
report it beside the default.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

SLOW_SECONDS = [0.6, 1.2, 0.9, 1.5, 0.7, 1.1]  # per command of the slow workload
FAST_COMMANDS = 6
# The slow rounds' orders, taken in turn: neither seq nor miss always goes first, and the
# oracle, which replays the round's seq episode, is last in both.
SLOW_ORDERS = (("seq", "miss", "oracle"), ("miss", "seq", "oracle"))
FAST_ORDERS = (("fast_seq", "fast_auto"), ("fast_auto", "fast_seq"))


class WrongPredictor:
    """Instant and always wrong: the worst case for the cost of speculating."""

    async def predict(self, context, command: str, n: int = 1):
        from obsspec.speculation.predictor import Prediction

        return [Prediction(f"not what {command} prints\n[exit code: 0]", "wrong", 1.0)]

    def observe(self, context, command: str, observation: str) -> None:
        pass


def slow_workload() -> list[str]:
    return [f"sleep {s}; echo step-{i}" for i, s in enumerate(SLOW_SECONDS)]


def fast_workload() -> list[str]:
    return [f"echo step-{i}" for i in range(FAST_COMMANDS)]


async def play_episode(commands, seed, ctx, loop=None):
    """One episode of scripted commands; its trajectory with agent_s set."""
    from obsspec.agent.context import TokenContext
    from obsspec.agent.episode import play
    from obsspec.agent.oracle import oracle_policy
    from obsspec.agent.protocol import SYSTEM_PROMPTS, ActionFormat, task_prompt
    from obsspec.inference.scripted import PacedEngine
    from obsspec.trajectory import Trajectory

    fmt = ActionFormat.markdown
    engine = PacedEngine(
        ctx.engine, oracle_policy(ctx.builder, commands, fmt), min_tokens=ctx.reply_tokens
    )
    prompt = ctx.builder.prompt_ids(SYSTEM_PROMPTS[fmt], task_prompt("Run the steps."))
    trajectory = Trajectory("bench", "bench-hash", "paced", seed, prompt)
    context = TokenContext()
    context.extend(prompt, generated=False)
    sandbox = await ctx.pool.acquire()
    try:
        start = time.monotonic()
        await play(trajectory, context, sandbox, engine, ctx.builder, ctx.limits, loop)
        trajectory.agent_s = time.monotonic() - start
    finally:
        await ctx.pool.release(sandbox)
    if trajectory.error:
        raise RuntimeError(f"the benchmark episode failed: {trajectory.error}")
    return trajectory


def ideal_saving(trajectory) -> float:
    turns = trajectory.turns
    return sum(
        min(turns[i + 1].gen_s, turns[i].exec_s)
        for i in range(len(turns) - 1)
        if turns[i].action == "command"
    )


def oracle_efficiency(rounds) -> float:
    ideal = sum(ideal_saving(seq) for seq, _, _ in rounds)
    return sum(seq.agent_s - oracle.agent_s for seq, oracle, _ in rounds) / ideal


def miss_overhead(rounds) -> float:
    return sum(miss.agent_s for _, _, miss in rounds) / sum(seq.agent_s for seq, _, _ in rounds)


def gate_no_harm(pairs) -> float:
    return sum(auto.agent_s for _, auto in pairs) / sum(seq.agent_s for seq, _ in pairs)


async def slow_round(r: int, ctx, arms: dict, always) -> tuple[str, ...]:
    """Round r of the slow arms, in its order (SLOW_ORDERS); returns the order."""
    from obsspec.speculation.runner import SpeculativeLoop
    from obsspec.world_model.oracle import OraclePredictor

    played = {}
    for name in SLOW_ORDERS[r % 2]:
        if name == "seq":
            loop = None
        elif name == "oracle":
            oracle = OraclePredictor.from_rows([played["seq"].to_dict()])
            loop = SpeculativeLoop(oracle, settings=always)
        else:
            loop = SpeculativeLoop(WrongPredictor(), settings=always)
        played[name] = await play_episode(slow_workload(), r, ctx, loop)
        arms[name].add(played[name])
    return SLOW_ORDERS[r % 2]


class Arm:
    def __init__(self, name: str) -> None:
        self.name = name
        self.trajectories = []

    def add(self, trajectory) -> None:
        self.trajectories.append(trajectory)
        turns = trajectory.turns
        print(
            f"{self.name:10s} {trajectory.agent_s:6.2f} s  "
            f"gen {sum(t.gen_s for t in turns):5.2f}  exec {sum(t.exec_s for t in turns):5.2f}",
            file=sys.stderr,
        )

    @property
    def seconds(self) -> float:
        return sum(t.agent_s for t in self.trajectories)

    def summary(self) -> dict:
        from obsspec.speculation.totals import SpeculationTotals

        turns = [turn for t in self.trajectories for turn in t.turns]
        totals = SpeculationTotals.of_turns(turns)
        return {
            "episodes": len(self.trajectories),
            "agent_s": round(self.seconds, 3),
            "gen_s": round(sum(t.gen_s for t in turns), 3),
            "exec_s": round(sum(t.exec_s for t in turns), 3),
            "speculation": totals.summary() if totals.attempted or totals.gated else None,
        }


class Context:
    """What every episode shares: the engine, the builder, the sandbox pool, the limits."""

    def __init__(self, engine, builder, pool, limits, reply_tokens: int) -> None:
        self.engine, self.builder, self.pool = engine, builder, pool
        self.limits, self.reply_tokens = limits, reply_tokens


async def main(args) -> dict:
    from transformers import AutoTokenizer

    from obsspec.agent.context import ChatContextBuilder
    from obsspec.agent.episode import EpisodeLimits
    from obsspec.config import GlobalConfig
    from obsspec.environments.gc import run_scope
    from obsspec.environments.pool import SandboxPool
    from obsspec.environments.sandbox import SandboxLimits
    from obsspec.inference.vllm_local import EngineSettings, LocalVLLMEngine, parse_cores
    from obsspec.models.registry import resolve_model
    from obsspec.profile.figures import bootstrap
    from obsspec.speculation.gate import GateMode, GateSettings
    from obsspec.speculation.runner import SpeculativeLoop
    from obsspec.speculation.settings import SpeculationSettings

    config = GlobalConfig()
    model = resolve_model(args.model, config.paths.models_dir)
    builder = ChatContextBuilder(AutoTokenizer.from_pretrained(model))
    limits = EpisodeLimits(max_turns=len(SLOW_SECONDS) + 1, max_tokens=64, temperature=0.0)
    always = SpeculationSettings(gate=GateSettings(mode=GateMode.always))
    auto = SpeculationSettings(gate=GateSettings(mode=GateMode.auto))
    arms = {name: Arm(name) for name in ("seq", "oracle", "miss", "fast_seq", "fast_auto")}
    auto_loop = SpeculativeLoop(WrongPredictor(), settings=auto)  # learns across rounds
    orders: dict[str, list[str]] = {"slow_rounds": [], "fast_pairs": []}
    with run_scope("bench-runner") as (client, run_id):
        plan = args.placement
        sandbox_limits = SandboxLimits(cpuset=plan.sandboxes)
        settings = EngineSettings(
            model=model, max_model_len=4096, kv_cache_gb=1.0, cpu_cores=plan.policy
        )
        async with (
            LocalVLLMEngine(settings) as engine,
            # size 0: each episode's sandbox starts before its timer, and no container starts
            # in the background while another episode is timed
            SandboxPool(client, config.base_image, sandbox_limits, size=0, run_id=run_id) as pool,
        ):
            if args.pin_driver and plan.sandboxes:  # a tuning: this process joins the sandboxes
                os.sched_setaffinity(0, parse_cores(plan.sandboxes))
            ctx = Context(engine, builder, pool, limits, args.reply_tokens)
            await play_episode(fast_workload(), 0, ctx)  # warm-up, untimed
            for r in range(args.rounds):
                print(f"-- slow round {r + 1}/{args.rounds}", file=sys.stderr)
                orders["slow_rounds"].append(",".join(await slow_round(r, ctx, arms, always)))
            for k in range(args.fast_pairs):  # ABBA: neither arm always goes first
                print(f"-- fast pair {k + 1}/{args.fast_pairs}", file=sys.stderr)
                order = FAST_ORDERS[k % 2]
                orders["fast_pairs"].append(",".join(order))
                for name in order:
                    loop = auto_loop if name == "fast_auto" else None
                    arms[name].add(await play_episode(fast_workload(), 100 + k, ctx, loop))
    slow = list(
        zip(
            arms["seq"].trajectories,
            arms["oracle"].trajectories,
            arms["miss"].trajectories,
            strict=True,
        )
    )
    fast = list(zip(arms["fast_seq"].trajectories, arms["fast_auto"].trajectories, strict=True))
    figures = {
        "oracle_efficiency": (oracle_efficiency, slow, 3),
        "miss_overhead": (miss_overhead, slow, 4),
        "gate_no_harm": (gate_no_harm, fast, 4),
    }
    results = {key: round(stat(units), digits) for key, (stat, units, digits) in figures.items()}
    intervals = {  # over rounds (pairs for gate_no_harm); None from a single one
        f"{key}_ci95": [round(x, digits) for x in bootstrap(stat, units) or []] or None
        for key, (stat, units, digits) in figures.items()
    }
    ideal = sum(ideal_saving(seq) for seq, _, _ in slow)
    achieved = arms["seq"].seconds - arms["oracle"].seconds
    figures = results
    goals = {"oracle_efficiency": (">=", 0.9), "miss_overhead": ("<=", 1.03)}
    goals["gate_no_harm"] = ("<=", 1.01)
    met = {
        key: figures[key] >= bound if op == ">=" else figures[key] <= bound
        for key, (op, bound) in goals.items()
    }
    return {
        **figures,
        "goals_met": met,
        **intervals,
        "ideal_saving_s": round(ideal, 3),
        "achieved_saving_s": round(achieved, 3),
        "arms": {name: arm.summary() for name, arm in arms.items()},
        "arm_order": orders,
        "model": str(model),
        "reply_tokens": args.reply_tokens,
        "rounds": args.rounds,
        "fast_pairs": args.fast_pairs,
        "slow_command_seconds": SLOW_SECONDS,
        "cores": os.cpu_count(),
        "placement": args.placement.as_dict(),
        "driver_pinned": args.pin_driver,
    }


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")  # vLLM would log to stdout
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--rounds", type=int, default=3, help="Rounds of the slow arms.")
    parser.add_argument("--fast-pairs", type=int, default=12, help="Fast seq/auto pairs.")
    parser.add_argument("--reply-tokens", type=int, default=24, help="Tokens per paced reply.")
    parser.add_argument("--sandbox-cpuset", default=None, help="[default: obsspec's placement]")
    parser.add_argument("--pin-driver", action="store_true", help="Pin this process too.")
    parser.add_argument("--json", action="store_true", help="JSON only (the default output)")
    args = parser.parse_args()
    from obsspec.rollout.cores import machine_plan

    args.placement = machine_plan(world_model=False, fixed={"sandboxes": args.sandbox_cpuset})
    print(json.dumps(asyncio.run(main(args)), indent=2))
