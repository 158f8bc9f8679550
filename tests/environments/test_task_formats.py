"""task.toml and task.yaml as their authors write them: Harbor's current fields, sizes as
strings, keys obsspec does not know (a warning naming them), files that are not UTF-8."""

import logging
import shutil
from pathlib import Path

import pytest

from obsspec.environments.errors import TaskFormatError
from obsspec.environments.tasks import load_task
from obsspec.environments.tasks.load import load_tasks_report

FIXTURES = Path(__file__).parent.parent / "fixtures" / "tasks"

CURRENT_HARBOR = """\
version = "1.0"

[metadata]
author_name = "someone"
tags = ["files", "bash"]
anything = { nested = true }

[agent]
timeout_sec = 300.0

[verifier]
timeout_sec = 90.0
env = { CHECK_MODE = "strict", THRESHOLD = "0.9" }
reward_key = "correctness"

[solution]
env = { SOLVER_HINT = "fast" }

[environment]
build_timeout_sec = 1200.0
cpus = 2
memory = "4G"
storage = "10G"
allow_internet = true
env = { LANG = "C.UTF-8" }
"""


@pytest.fixture
def harbor(tmp_path) -> Path:
    return Path(shutil.copytree(FIXTURES / "harbor-greeting", tmp_path / "harbor-greeting"))


@pytest.fixture
def tbv1(tmp_path) -> Path:
    return Path(shutil.copytree(FIXTURES / "tbv1-wordcount", tmp_path / "tbv1-wordcount"))


def test_current_harbor_fields_reach_the_task(harbor, caplog):
    (harbor / "task.toml").write_text(CURRENT_HARBOR)
    with caplog.at_level(logging.WARNING):
        task = load_task(harbor)
    assert caplog.records == [] and task.format_warnings == []
    assert (task.agent_timeout_s, task.verifier_timeout_s, task.build_timeout_s) == (300, 90, 1200)
    assert task.limits.cpus == 2 and task.limits.memory_mb == 4096 and task.storage_mb == 10240
    assert task.limits.allow_internet and task.limits.env == {"LANG": "C.UTF-8"}
    assert task.verifier_env == {"CHECK_MODE": "strict", "THRESHOLD": "0.9"}
    assert task.solution_env == {"SOLVER_HINT": "fast"}
    assert task.reward_key == "correctness" and task.metadata["anything"] == {"nested": True}
    assert task.limits.deterministic  # on unless the task turns it off


def test_a_task_can_turn_the_deterministic_shell_off(harbor, caplog):
    (harbor / "task.toml").write_text("[environment]\ndeterministic = false\n")
    with caplog.at_level(logging.WARNING):
        task = load_task(harbor)
    assert not task.limits.deterministic and task.format_warnings == []


@pytest.mark.parametrize(
    ("environment", "memory_mb", "storage_mb"),
    [
        ("memory_mb = 1536\nstorage_mb = 2048", 1536, 2048),  # the older numeric spelling
        ('memory = "512M"', 512, None),
        ('memory = "1.5g"', 1536, None),
        ('memory = "2GiB"\nstorage = "1T"', 2048, 1024 * 1024),
        ('memory = "4G"\nmemory_mb = 1024', 4096, None),  # the string wins, as in Harbor
    ],
)
def test_sizes_as_strings_or_mib(harbor, environment, memory_mb, storage_mb):
    (harbor / "task.toml").write_text(f"[environment]\n{environment}\n")
    task = load_task(harbor)
    assert (task.limits.memory_mb, task.storage_mb) == (memory_mb, storage_mb)


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        ('[environment]\nmemory = "4 gigs"\n', "environment.memory"),
        ('[environment]\nmemory = "4096"\n', "environment.memory"),  # no unit: ambiguous
        ('[environment]\nstorage = "lots"\n', "environment.storage"),
        ('[verifier]\nenv = { "BAD-NAME" = "x" }\n', "verifier.env"),
        ('[solution]\nenv = { "1X" = "x" }\n', "solution.env"),
        ('[verifier]\nreward_aggregate = "max"\n', "verifier.reward_aggregate"),
        ('[verifier]\nreward_key = "a"\nreward_aggregate = "mean"\n', "verifier"),
        ('[environment]\ndeterministic = "sometimes"\n', "environment.deterministic"),
    ],
)
def test_bad_fields_name_file_and_field(harbor, toml, field):
    (harbor / "task.toml").write_text(toml)
    with pytest.raises(TaskFormatError) as info:
        load_task(harbor)
    assert str(harbor / "task.toml") in str(info.value) and f"field '{field}'" in str(info.value)


def test_unknown_and_unsupported_keys_are_warnings_naming_file_and_key(harbor, caplog):
    (harbor / "task.toml").write_text(
        'color = "blue"\nschema_version = "1.1"\nsource = "somewhere"\n'
        "[agent]\ntimeout_sec = 60\nretries = 2\n"
        "[environment]\ngpus = 1\nallowed_hosts = []\nwidgets = 3\n"
        '[verifier]\nuser = "tester"\n'
    )
    with caplog.at_level(logging.WARNING, logger="obsspec.environments.tasks.load"):
        task = load_task(harbor)
    toml = harbor / "task.toml"
    assert sorted(task.format_warnings) == sorted(
        [
            f"{toml}: unknown key 'color' (ignored)",
            f"{toml}: unknown key 'agent.retries' (ignored)",
            f"{toml}: unknown key 'environment.widgets' (ignored)",
            f"{toml}: 'environment.gpus' is not supported by obsspec (ignored)",
            f"{toml}: 'verifier.user' is not supported by obsspec (ignored)",
        ]
    )  # Harbor's informational keys and unset unsupported ones (allowed_hosts = []) are quiet
    assert sorted(r.getMessage() for r in caplog.records) == sorted(task.format_warnings)
    assert task.agent_timeout_s == 60  # the known keys still count


def test_tbv1_known_keys_are_quiet_and_others_warn(tbv1):
    assert load_task(tbv1).format_warnings == []
    yaml = tbv1 / "task.yaml"
    yaml.write_text(yaml.read_text() + "disable_asciinema: true\nflavour: mint\n")
    task = load_task(tbv1)
    assert task.format_warnings == [f"{yaml}: unknown key 'flavour' (ignored)"]
    assert task.metadata["difficulty"] == "easy"


def test_early_tbv1_descriptions_give_the_instruction(tbv1):
    (tbv1 / "task.yaml").write_text(
        "descriptions:\n  - key: base\n    description: Count the words.\n"
        "author_email: a@b.c\ndifficulty: easy\n"
    )
    assert load_task(tbv1).instruction == "Count the words."


@pytest.mark.parametrize(
    ("fixture", "name"),
    [("harbor", "instruction.md"), ("harbor", "task.toml"), ("tbv1", "task.yaml")],
)
def test_a_file_that_is_not_utf8_is_a_task_format_error_naming_it(request, fixture, name):
    root = request.getfixturevalue(fixture)
    path = root / name
    path.write_bytes(path.read_bytes() + "caf\xe9 cr\xe8me\n".encode("latin-1"))
    with pytest.raises(TaskFormatError, match="not UTF-8 text") as info:
        load_task(root)
    assert str(path) in str(info.value) and "0xe9" in str(info.value)


def test_load_tasks_report_skips_broken_tasks_and_names_them(tmp_path):
    for name in ["a-good", "b-latin1", "c-good"]:
        shutil.copytree(FIXTURES / "harbor-greeting", tmp_path / name)
    (tmp_path / "b-latin1" / "instruction.md").write_bytes("\xabbonjour\xbb".encode("latin-1"))
    shutil.copytree(FIXTURES / "tbv1-wordcount", tmp_path / "d-tb")
    (tmp_path / "d-tb" / "task.yaml").write_text("instruction: [unclosed\n")
    tasks, broken = load_tasks_report(str(tmp_path))
    assert [t.id for t in tasks] == ["a-good", "c-good"]
    assert [path.name for path, _ in broken] == ["b-latin1", "d-tb"]
    assert "instruction.md" in str(broken[0][1]) and "not valid YAML" in str(broken[1][1])
    with pytest.raises(TaskFormatError, match="no task directories"):
        load_tasks_report(str(tmp_path / "nothing"))
