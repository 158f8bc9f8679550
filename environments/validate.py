"""Checking tasks end to end: the reference solution must earn reward 1, doing nothing 0.

Each task gets its image, then two fresh sandboxes: one runs the reference solution as a
script, as the task's own harness would (environments.tasks.solution_run), and is verified;
the other is verified untouched. The two arms are independent: an error in one (say, a
verifier that writes no reward) still lets the other report. On a failure the report keeps
the tail of the solution's and the verifier's output, so that a verifier that could not run
is told apart from a wrong solution.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

from obsspec.environments.ceiling import SandboxCeiling, capped, within_machine
from obsspec.environments.errors import ImageBuildError, VerifierError
from obsspec.environments.sandbox import DockerSandbox, NetworkPolicy, with_network
from obsspec.environments.sandbox_protocol import Sandbox
from obsspec.environments.tasks.images import TaskImages
from obsspec.environments.tasks.model import Task
from obsspec.environments.tasks.solution_run import run_solution_script
from obsspec.environments.tasks.verifier import verify
from obsspec.errors import ObsspecError

SLOW_SOLUTION_S = 1.0
NO_NETWORK_HINT = (
    "the verifier ran without a network (--network none); if it installs tools when it runs "
    "(as Terminal-Bench's run-tests.sh does), try --network verify"
)
KIT_HINT = (
    "the verifier ran without a network, served by the verifier kit (verifier_kit: what it "
    "held and served); what it still lacked is named above; or try --network verify"
)
TAIL_LINES = 20
TAIL_CHARS = 2000


def output_tail(text: str, lines: int = TAIL_LINES, chars: int = TAIL_CHARS) -> str:
    """The last `lines` lines of text, and at most its last `chars` characters."""
    tail = "\n".join(text.rstrip("\n").splitlines()[-lines:])
    return tail if len(tail) <= chars else "..." + tail[-chars:]


@dataclass
class TaskValidation:
    task: str
    family: str
    solution_reward: float | None = None
    noop_reward: float | None = None
    solution_exit_code: int | None = None
    solution_seconds: float | None = None
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)  # solution failures, broken verifiers...
    solution_output: str = ""  # tails, kept only when something went wrong
    verifier_output: str = ""
    noop_verifier_output: str = ""
    solution_rewards: dict[str, float] = field(default_factory=dict)  # every key the verifier wrote
    warnings: list[str] = field(default_factory=list)  # what the task's loader ignored
    verifier_failed: bool = False  # it gave no usable reward in either arm
    verifier_kit: dict | None = None  # what the verifier kit held and served (None: not used)

    @property
    def ok(self) -> bool:
        return not self.errors and self.solution_reward == 1.0 and self.noop_reward == 0.0

    def problems(self) -> list[str]:
        found = list(self.errors)
        if self.solution_reward is not None and self.solution_reward != 1.0:
            found.append(f"reference solution got reward {self.solution_reward:g}, not 1")
        if self.noop_reward is not None and self.noop_reward != 0.0:
            found.append(f"doing nothing got reward {self.noop_reward:g}, not 0")
        return found

    def row(self) -> dict:
        """The JSON row of `env validate --json`."""
        row = {**asdict(self), "seconds": round(self.seconds, 2), "problems": self.problems()}
        del row["errors"], row["verifier_failed"]  # in problems
        return row


async def validate_task(
    task: Task,
    client,
    images: TaskImages,
    run_id: str,
    network: NetworkPolicy = NetworkPolicy.none,
) -> TaskValidation:
    report = TaskValidation(task.id, str(task.metadata.get("family", "")))
    report.warnings = list(task.format_warnings)
    ceiling = await asyncio.to_thread(within_machine, SandboxCeiling(), client)
    limits, lowered = capped(with_network(task.limits, network), ceiling)
    report.warnings += [f"capped by the sandbox ceiling: {', '.join(lowered)}"] if lowered else []
    task = task.model_copy(update={"limits": limits})
    start = time.monotonic()
    try:
        image = await images.ensure(task)
    except ImageBuildError as e:
        report.errors.append(e.with_log())  # the report is the place for the build log
    except ObsspecError as e:
        report.errors.append(str(e))
    else:
        await asyncio.gather(
            check_solution(task, client, image, run_id, report),
            check_untouched(task, client, image, run_id, report),
        )
    if report.verifier_failed and network is NetworkPolicy.none:
        report.errors.append(KIT_HINT if report.verifier_kit else NO_NETWORK_HINT)
    report.seconds = time.monotonic() - start
    return report


async def check_solution(task: Task, client, image: str, run_id: str, report: TaskValidation):
    """Run the solution script, then the verifier; record rewards, problems and tails."""
    try:
        async with DockerSandbox(client, image, task.limits, run_id=run_id) as sandbox:
            run = await run_solution_script(task, sandbox)
            report.solution_exit_code = run.result.exit_code
            report.solution_seconds = round(run.result.duration_s, 3)
            if not run.ok:
                report.errors.append(run.problem())
            verdict = await verdict_of(task, sandbox, expected=1.0)
    except ObsspecError as e:
        report.errors.append(f"solution run: {e}")
        return
    if not run.ok or verdict.reward != 1.0:  # a 0 after exit 0 needs explaining most of all
        report.solution_output = output_tail(run.result.stdout + run.result.stderr)
    report.solution_reward, report.verifier_output = verdict.reward, verdict.output
    report.solution_rewards, report.verifier_kit = verdict.rewards, verdict.kit
    if verdict.error:
        report.errors.append(f"solution run: {verdict.error}")
        report.verifier_failed = True


async def check_untouched(task: Task, client, image: str, run_id: str, report: TaskValidation):
    try:
        async with DockerSandbox(client, image, task.limits, run_id=run_id) as sandbox:
            verdict = await verdict_of(task, sandbox, expected=0.0)
    except ObsspecError as e:
        report.errors.append(f"no-op run: {e}")
        return
    report.noop_reward, report.noop_verifier_output = verdict.reward, verdict.output
    if verdict.error:
        report.errors.append(f"no-op run: {verdict.error}")
        report.verifier_failed = True


@dataclass(frozen=True)
class Verdict:
    reward: float | None
    output: str  # the tail of the verifier's output, kept only when the reward is unexpected
    error: str | None = None  # the verifier ran but gave no usable reward
    rewards: dict[str, float] = field(default_factory=dict)
    kit: dict | None = None  # what the verifier kit held and served, if it served


async def verdict_of(task: Task, sandbox: Sandbox, expected: float) -> Verdict:
    try:
        outcome = await verify(task, sandbox)  # what the solution left running is killed
    except VerifierError as e:  # e.g. a tool it needs is missing: its output says which
        return Verdict(None, output_tail(e.output), str(e), kit=e.kit)
    unexpected = outcome.reward != expected
    tail = output_tail(outcome.output) if unexpected else ""
    return Verdict(outcome.reward, tail, rewards=dict(outcome.rewards), kit=outcome.kit)


async def validate_tasks(
    tasks: list[Task],
    client,
    run_id: str,
    *,
    concurrency: int = 2,
    on_done: Callable[[TaskValidation], None] = lambda _: None,
    on_log: Callable[[str], None] = lambda _: None,
    image_map: Mapping[str, str] | None = None,
    network: NetworkPolicy = NetworkPolicy.none,
) -> list[TaskValidation]:
    images = TaskImages(
        client,
        image_map=image_map,
        max_parallel_builds=concurrency,
        on_log=on_log,
        network=network,  # builds too, under the sandbox ceiling
    )
    gate = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> TaskValidation:
        async with gate:
            report = await validate_task(task, client, images, run_id, network)
        on_done(report)
        return report

    return list(await asyncio.gather(*(one(t) for t in tasks)))


def share(count: int, reports: list) -> float | None:
    return round(count / len(reports), 4) if reports else None


def summarize(reports: list[TaskValidation]) -> dict:
    """Counts, then one row per task. A solution is one script now, so `solution_commands`
    counts solution scripts run and `slow_command_share` is the share of them that took at
    least SLOW_SOLUTION_S."""
    seconds = [r.solution_seconds for r in reports if r.solution_seconds is not None]
    families = sorted({r.family for r in reports if r.family})
    solution_pass = sum(r.solution_reward == 1.0 for r in reports)
    noop_fail = sum(r.noop_reward == 0.0 for r in reports)
    ok = sum(r.ok for r in reports)
    return {
        "tasks": len(reports),
        "solution_pass": solution_pass,
        "noop_fail": noop_fail,
        "ok": ok,
        # shares of the tasks, for CI gates (--fail-under solution_pass_rate=1)
        "solution_pass_rate": share(solution_pass, reports),
        "noop_fail_rate": share(noop_fail, reports),
        "ok_rate": share(ok, reports),
        "families": families,
        "solution_commands": len(seconds),
        "slow_command_share": round(sum(s >= SLOW_SOLUTION_S for s in seconds) / len(seconds), 3)
        if seconds
        else 0.0,
        "failures": [{"task": r.task, "problems": r.problems()} for r in reports if not r.ok],
        "rows": [r.row() for r in reports],
    }
