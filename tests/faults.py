"""What happens when... : every fault a user can meet, what they see, and the tests that prove it.

The table of the same name in docs/faults.md is generated from FAULTS (`python -m tests.faults`
prints it), and tests/test_readme_faults.py checks that the two agree row for row and that every
test named here exists. A new fault handled gets a row here, with its test, then in docs/faults.md.

Exit codes are those of the command the user ran (`obsspec collect` unless the row says
otherwise); "-" where the fault does not end the command.
"""

from __future__ import annotations

from tests.fault_row import Fault
from tests.faults_hostile import HOSTILE_FAULTS
from tests.faults_training import TRAINING_FAULTS

CHAOS = (
    "tests/rollout/test_chaos.py::"
    "test_collect_under_chaos_saves_each_episode_once_or_records_it_lost"
)
CONTAIN = "tests/environments/test_containment.py::"
EXITS = "tests/cli/test_exit_codes.py::"
ENV_RUN = "tests/cli/test_env_run.py::"
ONESHOT = "tests/environments/test_oneshot.py::"
SIGNALS = (
    "tests/cli/test_collect_cli.py::"
    "test_ctrl_c_or_sigterm_keeps_finished_episodes_and_leaves_no_containers"
)


CORE_FAULTS = [
    Fault(
        "a sandbox container is killed or removed (`docker rm -f`) while the agent or the "
        "verifier runs",
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
            "tests/environments/test_removed_container.py::"
            "test_a_command_after_the_container_was_removed_is_a_sandbox_error",
            "tests/environments/test_removed_container.py::"
            "test_reading_a_file_of_a_removed_container_is_a_sandbox_error",
        ),
    ),
    Fault(
        "every attempt of an episode fails (its sandbox killed or unable to start)",
        "3 (1 if no episode is saved)",
        "`error: 1 of 8 episodes are not in the dataset (1 episode(s) failed (SandboxError: 1)"
        "...)`; the summary counts it under `failures` and `missing`; no zero-reward row is "
        "written",
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
        "every process in the sandbox but the shell is killed (what the command started, "
        "double-forked or not, and earlier background jobs); the observation ends `[command "
        "timed out after N s and was killed]`; the same shell (cwd, variables) goes on",
        "the turn's `timed_out` (and `exit_code` null)",
        "-",
        (
            "tests/environments/test_sandbox.py::"
            "test_timeout_kills_the_command_and_the_shell_survives",
            CONTAIN + "test_a_timeout_kills_everything_the_command_started",
            CONTAIN + "test_processes_left_by_earlier_commands_go_with_a_timeout",
        ),
    ),
    Fault(
        "the shell itself hangs (a builtin loop)",
        "-",
        "timed out as above, and a new shell replaces it; if the killer cannot finish, the "
        "container restarts (its files kept)",
        "the result's `shell_restarted` (`sandbox_restarted`)",
        "-",
        (
            "tests/environments/test_sandbox.py::test_stuck_shell_builtin_loop_restarts_the_shell",
            CONTAIN + "test_a_stuck_shell_and_its_escaped_children_are_all_replaced",
            CONTAIN + "test_if_the_killer_cannot_finish_the_container_restarts",
        ),
    ),
    Fault(
        "a fork bomb",
        "-",
        "it stops at the sandbox's process limit (`pids`, 512); the host keeps working; at the "
        "command's timeout all of it is killed within seconds and the next command is clean",
        "the turn's `timed_out`",
        "-",
        (
            "tests/environments/test_sandbox.py::test_fork_bomb_is_contained_by_the_pids_limit",
            CONTAIN + "test_a_timeout_kills_everything_the_command_started",
        ),
    ),
    Fault(
        "a background job is killed (a timeout, the memory limit)",
        "-",
        "nothing in later observations: bash's job notices (`Killed`, with a PID no model "
        "could predict) are dropped",
        "-",
        "-",
        (
            CONTAIN + "test_no_job_notice_reaches_the_next_observation",
            "tests/environments/test_shell_script.py::test_job_notices_are_stripped_whole",
        ),
    ),
    Fault(
        "an episode reaches its deadline mid-command",
        "-",
        "the command and everything it started are killed before the episode ends",
        "the episode's end reason",
        "-",
        (CONTAIN + "test_an_episode_deadline_ends_the_command_and_all_it_started",),
    ),
    Fault(
        "a command floods its output",
        "-",
        "each stream is capped while it streams (its first and last 256 KiB kept); memory "
        "stays flat",
        "the result's `truncated`; the observation's truncation marker",
        "-",
        (
            "tests/environments/test_sandbox.py::test_huge_output_is_capped_while_streaming",
            ENV_RUN + "test_flood_costs_bounded_memory_and_time",
            ONESHOT + "test_flood_keeps_head_and_tail_of_each_stream",
        ),
    ),
    Fault(
        "`obsspec env run` runs past `--timeout`",
        "124",
        "the call returns at the timeout (plus container start and removal): `timed_out: true`,"
        " the output so far; the container is removed",
        "-",
        "-",
        (
            ENV_RUN + "test_timeout_exits_124_soon",
            ENV_RUN + "test_endless_output_stops_at_the_timeout",
            ONESHOT + "test_timeout_reports_124_and_keeps_output",
        ),
    ),
    Fault(
        "`obsspec env run` starts many processes, opens raw sockets, allocates too much",
        "the command's",
        "the same limits as every sandbox (`pids`, `memory_mb`, `cpus`; no NET_RAW or MKNOD; an "
        "init as PID 1)",
        "-",
        "-",
        (
            ONESHOT + "test_processes_stop_at_the_default_pids_limit",
            ONESHOT + "test_no_raw_sockets_no_device_nodes",
            ONESHOT + "test_memory_limit_applies",
            ONESHOT + "test_an_init_is_pid_1",
        ),
    ),
    Fault(
        "Ctrl-C",
        "130",
        "`interrupted: N episodes of this invocation are saved in OUT; rerun the same command "
        "to resume`; every container removed",
        "the finished episodes as a shard; manifest `interrupted`",
        "resumes",
        (SIGNALS, EXITS + "test_a_stopped_json_collect_prints_one_object"),
    ),
    Fault(
        "SIGTERM (a job scheduler, `timeout`)",
        "143",
        "as Ctrl-C (any command: cleaned up, exit 143)",
        "as Ctrl-C",
        "resumes",
        (SIGNALS, EXITS + "test_sigterm_stops_any_command_with_143_and_one_json_object"),
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
        "3 (1 if no episode is saved)",
        "the task is skipped with one line naming the image, the task and `--image-map`; the "
        "others run (`--strict`: the first one is fatal)",
        "a `task_skipped` line in `failures.jsonl`; the summary's `skipped_tasks` and `missing`",
        "skips it again until mapped",
        (
            "tests/rollout/test_collect_access.py::"
            "test_mapped_task_collects_with_the_verifier_network_and_unmapped_is_skipped",
            "tests/environments/test_image_map.py::"
            "test_registry_image_without_a_map_is_one_line_naming_image_task_and_flag",
            EXITS + "test_unloadable_and_unbuildable_tasks_count_the_same_and_exit_3",
        ),
    ),
    Fault(
        "a task is broken (it does not load, its image does not build)",
        "3 (1 if no episode is saved)",
        "the task is reported and skipped, the others run; every task broken: status `empty`; "
        "`--strict`: fatal, two lines (`error:`, a `hint:` naming `failures.jsonl`), exit 1",
        "a `task_skipped` line in `failures.jsonl` (a build's log tail); the summary's "
        "`skipped_tasks` and `missing`",
        "skips it again until fixed",
        (
            EXITS + "test_collect_of_only_broken_tasks_is_not_complete",
            EXITS + "test_strict_build_failure_is_two_lines_with_the_log_in_the_run_directory",
            "tests/rollout/test_collect.py::test_broken_task_is_skipped_and_others_run",
            "tests/rollout/test_plan.py::test_a_broken_task_is_reported_or_fatal_with_strict",
        ),
    ),
    Fault(
        "the verifier gives no usable reward (no reward file, a reward that is not a number)",
        "3 (1 if no episode is saved)",
        "not retried, never a zero-reward row: `error: N of M episodes are not in the dataset "
        "(N episode(s) failed (VerifierError: N)...)`",
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
        "nothing: OUT is left exactly as it was (one that did not exist still does not)",
        "refused again",
        (
            "tests/cli/test_collect_cli.py::test_json_summary_then_a_different_run_is_refused",
            "tests/rollout/test_rundir_refusal.py::"
            "test_a_refused_collect_leaves_the_directory_as_it_found_it",
        ),
    ),
    Fault(
        "OUT holds a run that saved nothing (every task broken, the engine did not start), and "
        "the corrected command has other settings",
        "-",
        "`replacing an empty run with different settings (...)` (rl: `it finished no step`)",
        "the new run's manifest",
        "-",
        (
            "tests/rollout/test_rundir_refusal.py::"
            "test_a_run_that_saved_no_episode_is_replaced_by_other_settings",
            "tests/rl/test_rl_start.py::"
            "test_a_run_that_finished_no_step_is_replaced_and_one_that_did_is_refused",
        ),
    ),
    Fault(
        "no Ray cluster answers at `--ray-address` (collect, rl)",
        "1",
        "within seconds: `error: no Ray cluster answers at ADDR (...)` and a hint (`ray start "
        "--head`, or drop the flag)",
        "nothing: OUT is left as it was",
        "refused again until a cluster answers",
        (
            "tests/rollout/test_rundir_refusal.py::"
            "test_no_cluster_at_the_ray_address_fails_before_anything_is_made",
            "tests/rl/test_rl_start.py::"
            "test_no_cluster_at_the_address_is_one_clear_line_and_out_stays_as_found",
            "tests/rollout/test_ray_join.py::"
            "test_init_ray_says_which_address_and_gives_sigterm_back",
        ),
    ),
    Fault(
        "rl asks for GPUs the cluster lacks",
        "1",
        "`error:` naming the GPUs asked for and found; the hint says how to run on CPUs",
        "nothing: OUT is left as it was",
        "refused again",
        ("tests/rl/test_rl_run.py::test_gpus_asked_for_but_absent_are_a_clear_error",),
    ),
    Fault(
        "rl's roles fit the cluster's totals but no node can hold a role (8 STRICT_PACK "
        "trainer GPUs on nodes of 4, a custom resource no node has)",
        "1",
        "after `placement_timeout_s` (at once when even the totals are short): `error: Ray "
        "could not place the policy trainer within 300 s (placement_timeout_s): ...` naming "
        "its bundles, strategy and every node's GPUs, CPUs and custom resources; no placement "
        "group is kept",
        "`rl-run.json` with status failed and no step done",
        "the failed start is replaced (no --overwrite); refused again until the cluster or "
        "`[rl.placement]` changes",
        (
            "tests/rl/test_placement.py::"
            "test_a_group_no_node_can_hold_is_a_cluster_error_naming_it_and_the_nodes",
        ),
    ),
    Fault(
        "a model's tokenizer does not load (a corrupt `tokenizer.json`)",
        "1",
        "`error:` naming the model directory; the hint: pull the model again",
        "nothing: checked before anything is made",
        "refused again",
        (EXITS + "test_a_corrupt_tokenizer_is_a_model_error_naming_the_directory",),
    ),
    Fault(
        "a flag is unknown or its value is refused",
        "2",
        "one line `error: ...` and `hint: obsspec CMD --help`",
        "-",
        "-",
        (EXITS + "test_a_usage_error_is_one_line_and_exit_code_2",),
    ),
    Fault(
        "any of the above under `--json`",
        "as above",
        "exactly one JSON object on stdout: `status`, `error`, `hint`, `exit_code` (collect's "
        "summary so far when it was stopped)",
        "-",
        "-",
        (
            EXITS + "test_json_error_before_the_run_is_one_object_with_a_hint",
            EXITS + "test_a_stopped_json_collect_prints_one_object",
        ),
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


FAULTS = CORE_FAULTS + HOSTILE_FAULTS + TRAINING_FAULTS

HEADER = (
    "| When... | Exit | What you see | Recorded in | Rerunning the command | Tested by |",
    "| --- | --- | --- | --- | --- | --- |",
)


def markdown_table(faults: list[Fault] | None = None) -> str:
    """The table of docs/faults.md: one row per fault, its tests by node id."""
    lines = list(HEADER)
    faults = FAULTS if faults is None else faults
    for f in faults:
        tests = "<br>".join(f"`{test}`" for test in f.tests)
        lines.append(f"| {f.when} | {f.exit} | {f.see} | {f.recorded} | {f.rerun} | {tests} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
