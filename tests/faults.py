"""What happens when... : every fault a user can meet, what they see, and the tests that prove it.

The README's table of the same name is generated from FAULTS (`python -m tests.faults` prints
it), and tests/test_readme_faults.py checks that the two agree row for row and that every test
named here exists. A new fault handled gets a row here, with its test, then in the README.

Exit codes are those of the command the user ran (`obsspec collect` unless the row says
otherwise); "-" where the fault does not end the command.
"""

from __future__ import annotations

from dataclasses import dataclass

CHAOS = (
    "tests/rollout/test_chaos.py::"
    "test_collect_under_chaos_saves_each_episode_once_or_records_it_lost"
)
SIGNALS = (
    "tests/cli/test_collect_cli.py::"
    "test_ctrl_c_or_sigterm_keeps_finished_episodes_and_leaves_no_containers"
)


@dataclass(frozen=True)
class Fault:
    when: str  # the fault, as the user would name it
    exit: str  # the exit code of the command, or "-"
    see: str  # what the user sees: the line printed, the effect on the data
    recorded: str  # where it is recorded
    rerun: str  # what rerunning the same command does
    tests: tuple[str, ...]  # pytest node ids (a parametrized test by its function)


FAULTS = [
    Fault(
        "a sandbox container is killed (while the agent or the verifier runs)",
        "-",
        "`<task> #<i>: attempt 1 failed, SandboxError: the sandbox container is exited, not "
        "running (killed from outside?) (retrying)`; the episode runs again in a new sandbox "
        "(never taken for a broken task)",
        "a `failures.jsonl` line per failed attempt; the row's `attempts`",
        "nothing left to redo",
        (
            CHAOS,
            "tests/environments/test_sandbox.py::"
            "test_container_killed_from_outside_is_a_typed_error",
        ),
    ),
    Fault(
        "every attempt of an episode fails (its sandbox killed or unable to start)",
        "1",
        "`error: 1 episode(s) are not in the dataset (SandboxError: 1)`; the summary counts it "
        "under `failures` and `missing`; no zero-reward row is written",
        "`failures.jsonl` (the last attempt `final`); manifest `incomplete`",
        "runs exactly the lost episodes",
        (
            CHAOS,
            "tests/rollout/test_collect.py::"
            "test_infrastructure_failures_are_retried_recorded_and_left_for_a_rerun",
        ),
    ),
    Fault(
        "episode after episode fails (Docker or the engine is down)",
        "1",
        "`error: 8 episodes in a row failed on every attempt; stopping` (`collect.give_up_after`)",
        "`failures.jsonl`; manifest `failed`",
        "resumes once the cause is fixed",
        ("tests/rollout/test_collect.py::test_a_run_stops_when_episode_after_episode_fails",),
    ),
    Fault(
        "the sandbox's shell is stopped (SIGSTOP), then continued",
        "-",
        "nothing: the command takes longer, its output is the same",
        "the turn's `exec_s`",
        "-",
        (CHAOS,),
    ),
    Fault(
        "the sandbox's disk is full",
        "-",
        "the agent's command fails with `No space left on device` in its observation; the "
        "episode is data, rewarded as the verifier says",
        "the row",
        "-",
        (CHAOS,),
    ),
    Fault(
        "a command runs past its timeout",
        "-",
        "its processes are killed; the observation ends `[command timed out after N s and was "
        "killed]`; the same shell (cwd, variables) goes on",
        "the turn's `timed_out` (and `exit_code` null)",
        "-",
        (
            "tests/environments/test_sandbox.py::"
            "test_timeout_kills_the_command_and_the_shell_survives",
        ),
    ),
    Fault(
        "the shell itself hangs (a builtin loop)",
        "-",
        "timed out as above, and a new shell replaces it",
        "the result's `shell_restarted`",
        "-",
        ("tests/environments/test_sandbox.py::test_stuck_shell_builtin_loop_restarts_the_shell",),
    ),
    Fault(
        "a fork bomb",
        "-",
        "it stops at the sandbox's process limit (`pids`, 512); the host keeps working",
        "-",
        "-",
        ("tests/environments/test_sandbox.py::test_fork_bomb_is_contained_by_the_pids_limit",),
    ),
    Fault(
        "a command floods its output",
        "-",
        "each stream is capped while it streams (its first and last 256 KiB kept); memory "
        "stays flat",
        "the result's `truncated`; the observation's truncation marker",
        "-",
        ("tests/environments/test_sandbox.py::test_huge_output_is_capped_while_streaming",),
    ),
    Fault(
        "Ctrl-C",
        "130",
        "`interrupted: N episodes of this invocation are saved in OUT; rerun the same command "
        "to resume`; every container removed",
        "the finished episodes as a shard; manifest `interrupted`",
        "resumes",
        (SIGNALS,),
    ),
    Fault(
        "SIGTERM (a job scheduler, `timeout`)",
        "143",
        "as Ctrl-C",
        "as Ctrl-C",
        "resumes",
        (SIGNALS,),
    ),
    Fault(
        "`kill -9` of collect",
        "137",
        "nothing: the process is gone; every shard on disk is whole (a half-written one is a "
        "hidden temporary file, never read)",
        "the shards written before the kill",
        "resumes: each episode exactly once; the dead run's containers are removed",
        (
            "tests/cli/test_collect_cli.py::"
            "test_kill_9_at_any_moment_then_resume_gives_each_episode_once",
            "tests/rollout/test_dataset.py::"
            "test_a_writer_killed_mid_write_leaves_only_a_hidden_temp_file",
        ),
    ),
    Fault(
        "no Docker daemon answers",
        "1",
        "`error: no Docker daemon answers at unix://...` and a hint to start one; "
        "`obsspec doctor` shows docker FAIL",
        "manifest `failed`",
        "resumes once Docker runs",
        (
            "tests/cli/test_cli.py::test_doctor_without_docker_fails_with_a_hint",
            "tests/cli/test_collect_cli.py::test_collect_without_docker_is_one_line_then_resumes",
        ),
    ),
    Fault(
        "a task's image is missing (a FROM neither here nor pullable)",
        "0",
        "the task is skipped with one line naming the image, the task and `--image-map`; the "
        "others run (`--strict`: the first one is fatal)",
        "the summary's `skipped_tasks`; manifest",
        "skips it again until mapped",
        (
            "tests/rollout/test_collect_access.py::"
            "test_mapped_task_collects_with_the_verifier_network_and_unmapped_is_skipped",
            "tests/environments/test_image_map.py::"
            "test_registry_image_without_a_map_is_one_line_naming_image_task_and_flag",
        ),
    ),
    Fault(
        "a task is broken (it does not load)",
        "0",
        "the task is reported and skipped, the others run (`--strict`: fatal, exit 1)",
        "the summary's `skipped_tasks`; manifest",
        "skips it again until fixed",
        (
            "tests/rollout/test_collect.py::test_broken_task_is_skipped_and_others_run",
            "tests/rollout/test_plan.py::test_a_broken_task_is_reported_or_fatal_with_strict",
        ),
    ),
    Fault(
        "the verifier gives no usable reward (no reward file, a reward that is not a number)",
        "1",
        "not retried, never a zero-reward row: `error: N episode(s) are not in the dataset "
        "(VerifierError: N)`",
        "one `final` `failures.jsonl` line per episode, saying why",
        "tries them again, once each (fix the task first)",
        (
            "tests/rollout/test_collect_task_errors.py::"
            "test_a_broken_verifier_is_reported_not_retried",
            "tests/environments/test_tasks.py::test_missing_reward_file_is_an_error_not_a_zero",
        ),
    ),
    Fault(
        "OUT holds a different run",
        "1",
        "refused before anything starts, naming the first difference and `--overwrite`",
        "nothing changes",
        "refused again",
        ("tests/cli/test_collect_cli.py::test_json_summary_then_a_different_run_is_refused",),
    ),
    Fault(
        "OUT's disk is full",
        "1",
        "refused before anything starts: `--out OUT: cannot write there: No space left on "
        "device` (or less free than `collect.min_free_mb`)",
        "nothing changes",
        "refused again",
        (
            "tests/rollout/test_rundir.py::test_a_full_disk_is_refused",
            "tests/rollout/test_rundir.py::test_too_little_free_space_is_refused",
        ),
    ),
]

HEADER = (
    "| When... | Exit | What you see | Recorded in | Rerunning the command | Tested by |",
    "| --- | --- | --- | --- | --- | --- |",
)


def markdown_table(faults: list[Fault] = FAULTS) -> str:
    """The README's table: one row per fault, its tests by node id."""
    lines = list(HEADER)
    for f in faults:
        tests = "<br>".join(f"`{test}`" for test in f.tests)
        lines.append(f"| {f.when} | {f.exit} | {f.see} | {f.recorded} | {f.rerun} | {tests} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
