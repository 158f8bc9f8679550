"""`obsspec collect` while its own sandboxes are attacked: killed, frozen, their disk filled.

The contract this test holds collect to (the "What happens when..." table of docs/faults.md):

- the run finishes (no hang) and every container it made is removed;
- no (task, episode) is in the dataset twice; each one is either in the dataset or lost, and
  every lost one has a final record in failures.jsonl, as does every failed attempt;
- a sandbox killed while the agent or the verifier runs costs one attempt (retried; the row
  records `attempts`; never taken for a broken task), an episode whose sandbox is killed on
  every attempt is lost (exit 3, counted under `failures`), and rerunning the same command
  runs exactly the lost episodes;
- a shell stopped (SIGSTOP) and continued within the command timeout only delays the command;
- a full disk is the agent's problem, not the infrastructure's: the failing command says
  "No space left on device" and the episode is data, rewarded as the verifier says;
- a process the agent leaves running cannot set the reward: one task's oracle only starts a
  `nohup` loop that keeps writing reward 1 into /logs/verifier, and its episode gets 0 (the
  faults leave that task alone, so that its reward says only this).

The faults land on moments chosen to be certain (an episode's first command, `sleep 2`, or
its verifier's `sleep 1` is running), on containers chosen by a seeded random generator; the
test asserts that each fault was applied, so it cannot pass without them.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest

from tests.cli.test_cli import OBSSPEC
from tests.helpers import containers_labelled

GREETING = Path(__file__).parent.parent / "fixtures" / "tasks" / "harbor-greeting"
TASKS = [f"chaos-{i}" for i in range(8)]
PLANTER = TASKS[-1]  # its solution leaves a loop writing reward 1 behind, and nothing else
PLANT_REWARD = (
    "nohup bash -c 'while :; do mkdir -p /logs/verifier; "
    'echo "{\\"reward\\": 1.0}" > /logs/verifier/.r; '
    "mv -f /logs/verifier/.r /logs/verifier/reward.json; sleep 0.01; done' "
    ">/dev/null 2>&1 &\n"
)
FIRST_COMMAND = "sleep 2"  # the faults strike while it runs: the agent phase, for certain
VERIFYING = "sleep 1"  # the verifier's first command: the verifier phase, for certain
STOP_S = 3.0  # how long the shell stays stopped (well under the 60 s command timeout)
SHM_FILL_MB = 80  # more than the 64 MiB /dev/shm tmpfs holds (removed with the container)

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def tasks(tmp_path) -> Path:
    """Eight greeting tasks whose oracle first sleeps (twice: under CI's load a fault was seen
    landing after the first sleep had ended, and the disk filled after the draft was
    written), then drafts the greeting in /dev/shm (where a full disk shows) before copying
    it to where the verifier looks; their verifier sleeps first too."""
    for name in TASKS:
        shutil.copytree(GREETING, tmp_path / "tasks" / name)
        verifier = tmp_path / "tasks" / name / "tests" / "test.sh"
        verifier.write_text(verifier.read_text().replace("\nmkdir", f"\n{VERIFYING}\nmkdir", 1))
        (tmp_path / "tasks" / name / "solution" / "solve.sh").write_text(
            "#!/bin/bash\n"
            f"{FIRST_COMMAND}\n"
            f"{FIRST_COMMAND}\n"  # time for a fault seen late on a loaded machine to land
            'echo "Hello, $(cat /srv/user.txt)!" > /dev/shm/draft.txt\n'
            "cp /dev/shm/draft.txt /root/greeting.txt\n"
        )
    (tmp_path / "tasks" / PLANTER / "solution" / "solve.sh").write_text(
        f"#!/bin/bash\n{PLANT_REWARD}"
    )
    return tmp_path / "tasks"


@dataclass
class Fault:
    name: str
    kind: str  # kill, stop or fill
    during: str = FIRST_COMMAND  # strike while the sandbox runs this command
    again: str | None = None  # the task of this earlier fault again (its retry's sandbox)
    task: str = ""  # the task whose sandbox it hit (set when applied)
    container: str = ""


@dataclass
class Chaos:
    """The fault loop: a thread that applies the faults of `plan` to the run's own sandboxes
    (found by the collect process's pid label), each to a sandbox running the command the
    fault waits for, of a task no fault has touched (or of the task named by `again`), the
    sandbox picked at random among those; `applied` maps fault names to what they hit."""

    pid: int
    seed: int = 0
    plan: list[Fault] = field(default_factory=list)
    applied: dict[str, Fault] = field(default_factory=dict)
    runs: set[str] = field(default_factory=set)  # the obsspec.run labels seen
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        import docker

        self.client = docker.from_env()
        self.random = random.Random(self.seed)
        self.done = threading.Event()
        self.timers: list[threading.Timer] = []
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def __enter__(self) -> Chaos:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join(30)
        for timer in self.timers:  # a stopped shell is always continued
            timer.join(STOP_S + 10)
        self.client.close()

    def loop(self) -> None:
        while self.plan and not self.done.is_set():
            try:
                self.step()
            except Exception as e:  # a container gone between listing and use: try again
                self.errors.append(f"{type(e).__name__}: {e}")
            time.sleep(0.1)

    def step(self) -> None:
        import docker.errors

        mine = self.client.containers.list(filters={"label": f"obsspec.pid={self.pid}"})
        self.random.shuffle(mine)
        touched = {fault.task for fault in self.applied.values()}
        hit = {fault.container for fault in self.applied.values()}
        for container in mine:
            self.runs.add(container.labels["obsspec.run"])
            task = container.attrs["Config"]["Image"].split("/")[-1].split(":")[0]
            if container.id in hit or task == PLANTER:
                continue
            commands = {row[-1] for row in container.top()["Processes"] or []}
            for fault in self.plan:
                if fault.again is None:
                    fits = task not in touched
                else:
                    fits = fault.again in self.applied and task == self.applied[fault.again].task
                if not fits or fault.during not in commands:
                    continue
                with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                    if self.apply(fault, container):
                        fault.task, fault.container = task, container.id
                        self.applied[fault.name] = fault
                        self.plan.remove(fault)
                return  # one fault per look: the next one sees the containers as they are now

    def apply(self, fault: Fault, container) -> bool:
        if fault.kind == "kill":
            container.kill()
            return True
        if fault.kind == "stop":  # the persistent shell: the oldest bash the sandbox runs
            code, out = container.exec_run(["pgrep", "-o", "-x", "bash"])
            if code != 0:
                return False
            shell = out.decode().strip()
            code, _ = container.exec_run(["kill", "-STOP", shell])
            if code != 0:
                return False
            timer = threading.Timer(STOP_S, container.exec_run, (["kill", "-CONT", shell],))
            self.timers.append(timer)
            timer.start()
            return True
        # fill: /dev/shm is a 64 MiB tmpfs, so at most that much is written, in memory
        command = f"dd if=/dev/zero of=/dev/shm/fill bs=1M count={SHM_FILL_MB}; df /dev/shm"
        _, out = container.exec_run(["bash", "-c", command])
        return "100%" in out.decode()


def episodes(out: Path) -> pd.DataFrame:
    files = sorted((out / "data").glob("*.parquet"))
    if not files:
        return pd.DataFrame(columns=["task_id", "episode_index"])
    return pd.concat([pd.read_parquet(path) for path in files], ignore_index=True)


def failures(out: Path) -> list[dict]:
    path = out / "failures.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_collect_under_chaos_saves_each_episode_once_or_records_it_lost(
    tasks, tmp_path, base_image
):
    out = tmp_path / "run"
    config = tmp_path / "collect.toml"
    config.write_text("[collect]\nmax_attempts = 2\n")  # a sandbox killed twice: lost
    args = [OBSSPEC, "collect", "--tasks", str(tasks), "--out", str(out), "--policy", "oracle"]
    args += ["-c", "4", "--config", str(config), "--json"]
    expected = {(task, 0) for task in TASKS}

    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    plan = [
        Fault("doomed", "kill"),  # its retry is killed too: lost
        Fault("doomed again", "kill", again="doomed"),
        Fault("stopped", "stop"),
        Fault("filled", "fill"),
        Fault("killed once", "kill"),  # its retry saves it
        Fault("killed verifying", "kill", during=VERIFYING),  # retried, not a broken task
    ]
    with Chaos(proc.pid, seed=20, plan=plan) as chaos:
        deadline = time.monotonic() + 150
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        try:
            stdout, stderr = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"collect hung under chaos: {proc.communicate()[1][-3000:]}")
    assert not chaos.plan, f"faults never applied: {chaos.plan}; {chaos.errors}\n{stderr}"
    doomed, stopped, filled = (chaos.applied[name] for name in ("doomed", "stopped", "filled"))
    killed_once, killed_verifying = chaos.applied["killed once"], chaos.applied["killed verifying"]

    # The run ended, said what it lost, and left no container behind.
    assert proc.returncode == 3, stderr  # partly done: 7 of the 8 episodes are saved
    assert "1 of 8 episodes are not in the dataset (1 episode(s) failed (SandboxError: 1)" in stderr
    summary = json.loads(stdout)
    assert summary["failures"] == {"SandboxError": 1} and summary["missing"] == 1
    assert json.loads((out / "manifest.json").read_text())["status"] == "incomplete"
    assert chaos.runs and all(containers_labelled(f"obsspec.run={run}") == [] for run in chaos.runs)
    assert containers_labelled(f"obsspec.pid={proc.pid}") == []

    # Each episode at most once; rows and lost episodes together cover the run, nothing silent.
    rows = episodes(out)
    saved = list(zip(rows["task_id"], rows["episode_index"], strict=True))
    assert len(saved) == len(set(saved))
    records = failures(out)
    lost = {(r["task_id"], r["episode_index"]) for r in records if r["final"]}
    assert lost == {(doomed.task, 0)} and set(saved) == expected - lost
    failed_attempts = sorted((r["task_id"], r["attempt"], r["final"]) for r in records)
    assert failed_attempts == sorted(
        [
            (doomed.task, 1, False),
            (doomed.task, 2, True),
            (killed_once.task, 1, False),
            (killed_verifying.task, 1, False),
        ]
    )
    assert all(r["error_type"] == "SandboxError" and r["retryable"] for r in records)

    by_task = {row.task_id: row for row in rows.itertuples()}
    for killed in (killed_once, killed_verifying):
        assert by_task[killed.task].attempts == 2 and by_task[killed.task].reward == 1.0
    stopped_row = by_task[stopped.task]  # only delayed: its first command took the stop longer
    assert stopped_row.attempts == 1 and stopped_row.reward == 1.0
    assert stopped_row.turns[0]["exec_s"] >= STOP_S
    filled_row = by_task[filled.task]  # data, not a failure: the agent's command failed
    assert filled_row.attempts == 1 and filled_row.reward == 0.0
    assert any("No space left on device" in t["observation"] for t in filled_row.turns)
    assert by_task[PLANTER].reward == 0.0  # the loop it left did not outlive the agent phase
    untouched = set(TASKS) - {f.task for f in chaos.applied.values()} - {PLANTER}
    assert all(by_task[t].reward == 1.0 and by_task[t].attempts == 1 for t in untouched)

    # Rerunning the same command runs exactly the lost episode.
    rerun = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = rerun.communicate(timeout=150)
    assert rerun.returncode == 0, stderr
    summary = json.loads(stdout)
    assert summary["already_done"] == 7 and summary["episodes"] == 1 and summary["missing"] == 0
    rows = episodes(out)
    saved = list(zip(rows["task_id"], rows["episode_index"], strict=True))
    assert sorted(saved) == sorted(expected)
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"
    assert containers_labelled(f"obsspec.pid={rerun.pid}") == []
