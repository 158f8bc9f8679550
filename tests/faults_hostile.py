"""What happens when... a task author is hostile, or an agent looks for a reward it did not
earn: the rows of the fault table (tests/faults.py, docs/faults.md) for what the verifier,
task files, task image builds, rewards, `--overwrite`, disk and terminal output withstand.

Kept apart from tests/faults.py only to keep each file readable; the table is one.
"""

from __future__ import annotations

from tests.fault_row import Fault

VERIFIER_HOSTILE = "tests/environments/test_verifier_hostile.py::"
KIT = "tests/environments/test_verifier_kit.py::"
KIT_DOCKER = "tests/environments/test_verifier_kit_docker.py::"
VERIFIER_ORDER = "tests/environments/test_verifier_order.py::"
TASK_LINKS = "tests/environments/test_task_links.py::"
TERMINAL = "tests/cli/test_terminal_output.py::"
SMALL = "tests/cli/test_small_faults.py::"

HOSTILE_FAULTS: list[Fault] = [
    # --- the verifier and its rewards ---
    Fault(
        "the agent (or its solution, or `env shell`'s typed commands) leaves a process running "
        "that keeps writing reward 1 into /logs/verifier (a `nohup` loop), or plants a "
        "conftest.py in /tests that passes every test",
        "-",
        "nothing: the reward is the verifier's own (0 here, before 1). Before the verifier "
        "starts every process of the agent phase is killed, its shell included, and /tests, "
        "/logs/verifier and the TB v1 runner directory are deleted (Sandbox.end_agent_phase)",
        "the episode's `reward`; `validate`'s `solution_reward`",
        "the same reward",
        (
            VERIFIER_HOSTILE
            + "test_a_leftover_process_that_writes_reward_1_does_not_set_the_reward",
            VERIFIER_HOSTILE + "test_a_conftest_planted_in_tests_is_not_merged_into_the_tests",
            VERIFIER_HOSTILE + "test_env_shell_verify_kills_what_the_typed_commands_left_running",
            VERIFIER_ORDER + "test_the_agent_phase_ends_before_the_upload_and_the_network_after_it",
            "tests/rollout/test_chaos.py::"
            "test_collect_under_chaos_saves_each_episode_once_or_records_it_lost",
        ),
    ),
    Fault(
        "under `--network verify`, a background job the agent left waits for eth0 to reach "
        "the network the verifier gets",
        "-",
        "nothing: the job is killed before the network is attached (only after the tests are "
        "uploaded, for the verifier alone); it never sees eth0",
        "-",
        "the same",
        (
            VERIFIER_HOSTILE + "test_under_verify_network_a_leftover_job_never_sees_eth0",
            VERIFIER_ORDER + "test_the_agent_phase_ends_before_the_upload_and_the_network_after_it",
        ),
    ),
    Fault(
        "a verifier writes a reward no float holds (a 400-digit integer, NaN, JSON nested "
        "100,000 deep) or a huge reward file (a 400 MB `reward.txt`)",
        "3 (1 if no episode is saved; `env validate`: 1)",
        "that episode alone fails, not the run (before: `unexpected OverflowError`, exit 1): "
        "`... /logs/verifier/reward.json: key 'reward' is an integer of 400 digits, not a "
        "finite number` or `... reward.txt is larger than 65536 bytes: not a reward file`; "
        "only 64 KiB of the file is read (before: 1.2 GB of memory); `env validate` keeps its "
        "other rows",
        "one `final` `failures.jsonl` line per episode (VerifierError, not retryable)",
        "tries them again, once each (fix the task first)",
        (
            VERIFIER_HOSTILE + "test_a_400_digit_reward_is_a_verifier_error_and_collect_goes_on",
            VERIFIER_HOSTILE + "test_validate_keeps_its_other_rows_when_a_reward_is_too_big",
            VERIFIER_HOSTILE + "test_a_400_mb_reward_file_is_a_verifier_error_read_only_in_part",
            VERIFIER_ORDER + "test_a_reward_file_over_the_cap_is_an_error_read_only_in_part",
            VERIFIER_ORDER + "test_a_reward_no_float_holds_is_a_verifier_error",
        ),
    ),
    Fault(
        "a verifier could not run its tests but wrote reward 0 (Harbor's template test.sh "
        "offline: `curl`/`uvx` missing, a host that did not resolve, pytest collected nothing)",
        "3 (1 if no episode is saved; `env validate`: 1)",
        "a VerifierError, not a 0: `task T: the verifier never ran its tests ('E: Unable to "
        "locate package curl'), so its reward 0 says nothing of the agent; it ran "
        "without a network (--network none): try --network verify`. Tests that ran and "
        "failed, or a reward of 1 despite such a line, are believed. `validate --json` keeps "
        "`solution_output` whenever the solution's reward is not 1",
        "one `final` `failures.jsonl` line per episode; `validate`'s problems and "
        "`verifier_output`",
        "tries them again, once each (with `--network verify` if the verifier needs it)",
        (
            VERIFIER_HOSTILE
            + "test_a_harbor_verifier_without_its_tools_is_an_error_naming_them_and_network",
            VERIFIER_HOSTILE + "test_a_verifier_that_ran_its_tests_and_saw_them_fail_still_gives_0",
            VERIFIER_HOSTILE
            + "test_validate_keeps_the_solution_output_when_a_solution_that_exits_0_gets_0",
            VERIFIER_ORDER
            + "test_a_harbor_verifier_without_its_tools_is_an_error_naming_the_first",
            VERIFIER_ORDER + "test_honest_rewards_stay_rewards",
            VERIFIER_ORDER + "test_each_sign_of_a_runner_that_never_started_is_named",
            VERIFIER_ORDER + "test_tbv1_without_a_pytest_summary_names_the_cause",
        ),
    ),
    Fault(
        "a verifier served by the verifier kit offline needs what the kit does not hold: a "
        "package pip could not fetch, a Python uv would download (`uvx -p 3.13`), an "
        "`apt-get install` of a package the image lacks, another download",
        "3 (1 if no episode is saved; `env validate`: 1)",
        "a VerifierError naming it, never a 0: `the verifier never ran its tests ('error: No "
        "interpreter found for Python 3.13 in managed installations or search path'), ...; "
        "the verifier kit served it and lacks that`; what could not be fetched is also a "
        "`note: verifier kit: task T: ...` line before the run, and `obsspec env kit TASKS` "
        "exits 1 naming it",
        "one `final` `failures.jsonl` line per episode; `validate`'s problems and its "
        "`verifier_kit` (what was held and served)",
        "tries them again, once each (with `--network verify` if the verifier needs it)",
        (
            KIT + "test_a_package_the_kit_lacks_is_a_verifier_error_naming_it_not_a_0",
            KIT_DOCKER + "test_a_kit_missing_a_wheel_gives_a_verifier_error_not_0",
            KIT_DOCKER + "test_env_kit_exits_1_naming_what_it_could_not_fetch",
            VERIFIER_ORDER + "test_each_sign_of_a_runner_that_never_started_is_named",
        ),
    ),
    # --- task files and terminal output ---
    Fault(
        "a task's file is a link out of the task (instruction.md -> ../secret.txt, a tests/ "
        "or build-context file, solve.sh, task.toml), or an entry of a directory of tasks "
        "links to a task elsewhere on the machine",
        "`collect`: 3 (1 if no episode is saved); `env validate`: 1; `env shell`: 1",
        "that task alone is skipped, the others run (before: the linked file was read: "
        "`env shell` printed it, `collect` tokenized it into the dataset): `<task>/"
        "instruction.md: leads outside task <task> (a link: instruction.md -> "
        "../secret.txt); a task's files are read only from inside its directory`; links "
        "that stay inside the task are fine",
        "`collect`: a `task_skipped` line in `failures.jsonl` (the link as written, never "
        "the file), the summary's `skipped_tasks`; `env validate`: the task's row",
        "the same, until the file is copied into the task",
        (
            TASK_LINKS + "test_a_link_out_of_the_task_is_refused_naming_the_task_and_the_file",
            TASK_LINKS + "test_a_broken_run_skips_the_linked_task_and_loads_the_others",
            TASK_LINKS
            + "test_a_task_directory_linked_from_outside_its_directory_of_tasks_is_refused",
            TASK_LINKS + "test_a_loaded_task_whose_solution_became_a_link_out_is_refused_when_read",
            TASK_LINKS + "test_tree_hash_never_reads_through_a_link_out_of_the_tree",
        ),
    ),
    Fault(
        "a task's instruction or task.toml, its solution's or verifier's output, or its image "
        "build log holds terminal escapes (an OSC 52 clipboard write, a title change, C1 "
        "controls) or rich markup (`[link=...]`)",
        "-",
        "they are printed as text: `Greet.\\x1b]52;c;ZWNo...\\x07` (before: the escapes "
        "reached the terminal from `env shell`, `env shell --verify` and `env validate`); "
        "markup is printed as typed; `--json` keeps the text, JSON-escaped",
        "-",
        "the same",
        (
            TERMINAL + "test_the_consoles_show_control_characters_as_escapes",
            TERMINAL + "test_env_shell_prints_no_control_sequence_from_the_task",
            TERMINAL + "test_env_validate_prints_no_control_sequence_from_the_verifier",
        ),
    ),
    # --- task image builds ---
    Fault(
        "a task's Dockerfile reaches for the network, forks without end or takes all memory "
        "(`RUN curl ...`, a fork bomb, a 400 MB allocation under `memory_mb = 128`)",
        "3 (1 if no episode is saved)",
        "the task is skipped: `image build failed: task <id> (<dir>): building <tag> failed: "
        "The command ... returned a non-zero code` (under `--network none`, when the log says "
        "a name did not resolve, the hint: `--network verify gives builds one`); the build "
        "had only loopback, the task's cpus, memory and pids (capped by the run's ceiling); "
        "the other tasks run",
        "a `task_skipped` line in `failures.jsonl`; the summary's `skipped_tasks`",
        "skips it again (a build that needs the network builds under `--network verify`)",
        (
            "tests/environments/test_build_limits.py::test_a_build_follows_the_runs_network",
            "tests/environments/test_build_limits.py::"
            "test_a_build_past_its_pids_or_memory_limit_fails",
        ),
    ),
    Fault(
        "a task's build never ends (`RUN sleep infinity`), or the user stops the run (Ctrl-C, "
        "SIGTERM) while a task image builds",
        "3 (1 if no episode is saved); 130 / 143 when stopped",
        "at `build_timeout_sec`: `building <tag> took over N s (build_timeout_sec) and was "
        "stopped`, the task skipped, the run goes on; on a signal the run ends in seconds "
        "(`interrupted: ...`), not at the end of the build step. Either way the build's "
        "connection is cut and its step container killed and removed",
        "a `task_skipped` line in `failures.jsonl`; manifest `interrupted` on a signal",
        "builds it again (and stops it again at its timeout)",
        (
            "tests/environments/test_build_limits.py::"
            "test_a_build_past_its_timeout_ends_then_and_leaves_no_container",
            "tests/environments/test_build_limits.py::"
            "test_cancelling_a_build_ends_it_at_once_and_leaves_no_container",
            "tests/cli/test_collect_build_cli.py::"
            "test_a_signal_during_a_task_image_build_ends_collect_in_seconds",
        ),
    ),
    # --- --overwrite ---
    Fault(
        "`--overwrite` given an --out that is not a run of the same command (a folder of "
        "notes, another command's run: a collect run to `train-wm`), or that is, holds or lies "
        "inside one of its inputs (`train-wm --data RUN --out RUN`, a profile holding its "
        "--tasks); any of train-wm, sft, collect, rl, profile, export",
        "1",
        "`error: --out OUT holds files that are no obsspec run (ideas.md), not an earlier "
        "`obsspec train-wm` run; --overwrite only replaces one of those, so nothing was "
        "deleted` (or `--out RUN is --data RUN: replacing it would delete what the command "
        "reads`), before anything is deleted or trained: --out is untouched",
        "nothing (each run names its command in OUT/.obsspec-run.json; older runs are known "
        "by their files)",
        "the same refusal; an earlier run of the same command is replaced",
        (
            "tests/cli/test_overwrite_cli.py::test_train_wm_overwrite_refuses_notes_and_its_own_data",
            "tests/cli/test_overwrite_cli.py::test_sft_overwrite_refuses_notes_and_a_collect_run",
            "tests/cli/test_overwrite_cli.py::test_collect_overwrite_refuses_notes",
            "tests/cli/test_overwrite_cli.py::test_rl_overwrite_refuses_notes_before_any_cluster",
            "tests/cli/test_overwrite_cli.py::test_profile_overwrite_refuses_a_profile_that_holds_its_tasks",
            "tests/cli/test_overwrite_cli.py::test_export_overwrite_refuses_a_file_that_is_no_export",
            "tests/cli/test_overwrite_cli.py::test_train_wm_overwrite_replaces_its_own_earlier_run",
            "tests/test_overwrite.py::test_train_overwrite_refuses_its_own_data_and_another_commands_run",
        ),
    ),
    Fault(
        "tasks are added, removed or edited under the same `--tasks` path, then the same "
        "`collect` (or `rl --resume`) is run on its --out",
        "1",
        "`error: --out RUN holds a different run (the tasks under --tasks changed since the "
        "run began: 1 added (greet-b); 1 removed (greet-a)); use another --out, or "
        "--overwrite ...`; the rows already collected are untouched",
        "the run's identity holds the task set's digest; manifest `tasks` (id -> hash)",
        "the same refusal until the tasks are restored, --overwrite or another --out",
        (
            "tests/cli/test_overwrite_cli.py::test_collect_resumed_over_other_tasks_is_refused_and_rows_stay",
            "tests/test_overwrite.py::"
            "test_collect_resumed_over_other_tasks_is_refused_and_says_what_changed",
            "tests/test_overwrite.py::test_rl_resumed_over_other_tasks_is_refused",
        ),
    ),
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
        "the row's `finish_reason`, `error_type` DiskLimitExceeded, `error`; `finish_reasons` "
        "in `collect --json`",
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
    Fault(
        "`obsspec profile simulate --calibrate FILE --json`: --calibrate is refused (a file, "
        "not a directory) before the --json after it is read",
        "2",
        "one JSON object on stdout: status usage_error, the error `invalid value for "
        "'--calibrate': ...` (before: nothing on stdout: `profile`'s own unset --json "
        "cancelled the command line's)",
        "-",
        "the same",
        (SMALL + "test_json_after_a_refused_option_of_a_subcommand_still_gives_one_object",),
    ),
    Fault(
        "Ctrl-C at `obsspec env shell`'s idle prompt (or at its `>` continuation prompt)",
        "- (Ctrl-D then leaves: 0; Ctrl-C while a command runs: 130)",
        "`^C`, `(Ctrl-D leaves the shell)` and a new prompt; the line or unfinished command "
        "typed so far is dropped, the sandbox stays (before: nothing visible; the next command "
        "was cancelled and the shell's command parser killed, so a second Ctrl-C exited)",
        "-",
        "-",
        (SMALL + "test_ctrl_c_at_the_shell_prompt_drops_the_line_and_says_how_to_leave",),
    ),
    Fault(
        "a --config file that is not UTF-8 (saved in Latin-1, a binary), or a --timeout of "
        "`env run|shell|determinism` no timer holds (`1e308`, `1e10`, `nan`)",
        "1 (the config); 2 (--timeout)",
        "`config file F is not UTF-8 text: byte 24 (line 2) is 0xe9`; `invalid value for "
        "'--timeout': 1e+308 is not in the range 0.1<=x<=604800 seconds` (before: "
        "`unexpected UnicodeDecodeError` / `unexpected OverflowError`, exit 1)",
        "-",
        "the same",
        (
            SMALL + "test_a_config_file_not_in_utf8_is_named_with_the_offending_byte",
            SMALL + "test_a_timeout_too_large_to_wait_is_a_usage_error_naming_the_range",
        ),
    ),
    Fault(
        "the model of collect, episode, sft or train-wm (--policy, --model, --base) has no "
        "chat template (a base model), or a model.safetensors of garbage bytes",
        "1",
        "`model directory D: its tokenizer has no chat template` (hint: use an instruct model "
        "or add chat_template.jinja) or `model weights D/model.safetensors do not load "
        "(Error while deserializing header: ...)`, before --out is made (before: `unexpected "
        "ValueError` / `unexpected SafetensorError` or vLLM's `cannot fit 'int' ...`, with "
        "--out left created); a vLLM engine names the file too",
        "-",
        "the same",
        (
            SMALL + "test_a_model_without_a_chat_template_is_refused_naming_it",
            SMALL + "test_training_from_a_model_without_a_chat_template_is_refused",
            SMALL + "test_garbage_weights_are_refused_naming_the_file_and_make_nothing",
            SMALL + "test_the_engine_names_garbage_weights_before_vllm_reads_them",
        ),
    ),
    Fault(
        "a malformed `--image-map` (`--image-map python`, `a=b=c`)",
        "2",
        "`invalid value for '--image-map': 'python' is not SRC=DST (e.g. "
        "python:3.13-slim=obsspec/base)` with the command's --help as hint (before: exit 1)",
        "-",
        "the same",
        (SMALL + "test_a_malformed_image_map_is_a_usage_error_naming_the_flag",),
    ),
    Fault(
        "`obsspec export DIR` of a directory that holds no run (empty, or the wrong one)",
        "1",
        "`RUN DIR: holds no run (no manifest.json or rl-run.json, no data/*.parquet)`, hint: "
        "give the --out of `obsspec collect` or `obsspec rl` (before: `RUN: its manifest does "
        "not name the policy whose tokenizer made its ids`)",
        "-",
        "the same",
        (SMALL + "test_export_of_a_directory_without_a_run_says_so",),
    ),
]
