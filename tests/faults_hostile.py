"""What happens when... a task author is hostile, or an agent looks for a reward it did not
earn: the rows of the fault table (tests/faults.py, docs/faults.md) for what the verifier,
task files, task image builds, rewards, `--overwrite`, disk and terminal output withstand.

Kept apart from tests/faults.py only to keep each file readable; the table is one.
"""

from __future__ import annotations

from tests.fault_row import Fault

HOSTILE_FAULTS: list[Fault] = [
    # --- the verifier and its rewards ---
    # --- task files and terminal output ---
    # --- task image builds ---
    # --- --overwrite ---
    # --- disk and memory limits ---
    Fault(
        "the agent writes past its sandbox's disk limit (`fallocate -l 10G /tmp/big`; the "
        "task's `storage`, 4096 MiB when it names none), or `obsspec env run -- 'fallocate ...'`",
        "collect: 0; env run: 1",
        "the episode ends at that command with finish reason `disk_limit`, reward 0, the "
        "verifier not run, the container removed at once (disk freed); env run: its output, "
        "then `error: the sandbox wrote 10240 MiB, past its disk limit of 50 MiB: it was "
        "stopped and removed` (without a storage quota, a watchdog: the disk can fill for up "
        "to about a second first, docs/tasks.md)",
        "the row's `finish_reason`, `error_type` DiskLimitExceeded, `error`; the run's "
        "`finish_reasons` count",
        "nothing to redo: a policy outcome, kept as data, not retried",
        (
            "tests/environments/test_disk_limit.py::"
            "test_a_command_past_the_disk_limit_ends_and_the_container_is_gone",
            "tests/environments/test_disk_limit.py::test_a_background_writer_is_stopped_between_commands",
            "tests/environments/test_disk_limit.py::test_a_long_writer_is_stopped_before_its_command_ends",
            "tests/environments/test_disk_limit.py::test_an_episode_past_the_disk_limit_ends_unrewarded",
            "tests/environments/test_disk_limit.py::test_env_run_past_the_disk_limit_is_stopped",
            "tests/environments/test_disk_limit.py::test_obsspec_env_run_past_the_disk_limit_is_an_error",
        ),
    ),
    Fault(
        'a task asks more than the run\'s sandbox ceiling (`memory = "512G"`, or cpus, '
        "storage past `[collect.sandbox] max_*`)",
        "0",
        "it runs with the ceiling (8192 MiB by default), and the run notes it once per task: "
        "`task greedy asks more than the run's sandbox ceiling and gets it: memory 524288 MiB "
        "-> 8192 MiB`; env validate: a warning in its report; env shell: a note",
        "the run's log (a note); `validate`'s `warnings`",
        "the same note again",
        (
            "tests/environments/test_ceiling.py::test_a_task_asking_512g_gets_the_ceiling_and_a_warning",
            "tests/environments/test_ceiling.py::test_each_limit_past_the_ceiling_is_lowered_and_named",
            "tests/environments/test_ceiling.py::test_env_validate_caps_and_reports_it",
        ),
    ),
    # --- smaller ones ---
]
