"""A task's files are read only from inside its directory (issue 38, item 3): a link that
leads out of it (instruction.md -> ../secret.txt) is a TaskFormatError naming the task and the
file, and a run skips that task while the others load. Links that stay inside are fine."""

import os
import shutil
from pathlib import Path

import pytest

from obsspec.environments.build import tree_hash
from obsspec.environments.errors import TaskFormatError
from obsspec.environments.tasks import load_task
from obsspec.environments.tasks.load import load_tasks_report
from obsspec.environments.tasks.model import Task
from obsspec.environments.tasks.text import read_task_text
from obsspec.rollout.plan import load_task_set

FIXTURES = Path(__file__).parent.parent / "fixtures" / "tasks"
SECRET = "TOKEN=hf_not_for_the_dataset\n"


def task_copy(tmp_path: Path, fixture: str = "harbor-greeting", name: str = "evil") -> Path:
    """A copy of a fixture task under tmp_path/tasks, and a secret next to the tasks."""
    (tmp_path / "secret.txt").write_text(SECRET)
    return Path(shutil.copytree(FIXTURES / fixture, tmp_path / "tasks" / name))


def link(path: Path, target: str) -> Path:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


# (fixture, the file made a link, where it points): every file a loader or a run reads.
OUTSIDE = [
    ("harbor-greeting", "instruction.md", "../../secret.txt"),
    ("harbor-greeting", "task.toml", "../../secret.txt"),
    ("harbor-greeting", "tests/test.sh", "../../../secret.txt"),
    ("harbor-greeting", "tests/expected.txt", "/etc/hostname"),  # a file inside tests/
    ("harbor-greeting", "tests", "../.."),  # the tests/ directory itself
    ("harbor-greeting", "environment/data.txt", "../../../secret.txt"),  # build context
    ("harbor-greeting", "environment/Dockerfile", "../../../secret.txt"),
    ("harbor-greeting", "solution/solve.sh", "../../../secret.txt"),
    ("tbv1-wordcount", "task.yaml", "../../secret.txt"),
    ("tbv1-wordcount", "solution.sh", "../../secret.txt"),
    ("tbv1-wordcount", "tests/test_outputs.py", "../../../secret.txt"),
]


@pytest.mark.parametrize(("fixture", "name", "target"), OUTSIDE)
def test_a_link_out_of_the_task_is_refused_naming_the_task_and_the_file(
    tmp_path, fixture, name, target
):
    root = task_copy(tmp_path, fixture)
    link(root / name, target)
    with pytest.raises(TaskFormatError) as info:
        load_task(root)
    message = str(info.value)
    assert str(root / name) in message and "leads outside task evil" in message, message
    assert SECRET.strip() not in message


def test_links_that_stay_inside_the_task_are_fine(tmp_path):
    root = task_copy(tmp_path, name="linked")
    (root / "docs").mkdir()
    (root / "docs" / "instruction.md").write_text("Write the greeting.\n")
    link(root / "instruction.md", "docs/instruction.md")
    link(root / "tests" / "same.sh", "test.sh")
    link(root / "environment" / "docs", "../docs")
    task = load_task(root)
    assert task.instruction == "Write the greeting.\n"


def test_a_broken_run_skips_the_linked_task_and_loads_the_others(tmp_path):
    evil = task_copy(tmp_path)
    link(evil / "instruction.md", "../../secret.txt")
    shutil.copytree(FIXTURES / "harbor-greeting", tmp_path / "tasks" / "good")
    tasks, broken = load_tasks_report(str(tmp_path / "tasks"))
    assert [t.id for t in tasks] == ["good"]
    assert [path.name for path, _ in broken] == ["evil"]
    assert "instruction.md" in str(broken[0][1]) and "leads outside" in str(broken[0][1])
    # collect's loader (obsspec.rollout.plan) the same way
    tasks, skipped = load_task_set(str(tmp_path / "tasks"), strict=False)
    assert [t.id for t in tasks] == ["good"] and list(skipped) == [str(evil)]


def test_a_task_directory_linked_from_outside_its_directory_of_tasks_is_refused(tmp_path):
    """A downloaded directory of tasks must not pull in a task (say, a private one) from
    elsewhere on the machine; a link to a task beside it is fine."""
    elsewhere = Path(shutil.copytree(FIXTURES / "harbor-greeting", tmp_path / "private"))
    tasks_dir = tmp_path / "tasks"
    shutil.copytree(FIXTURES / "harbor-greeting", tasks_dir / "good")
    link(tasks_dir / "pulled-in", str(elsewhere))
    link(tasks_dir / "alias", "good")
    tasks, broken = load_tasks_report(str(tasks_dir))
    assert sorted(t.id for t in tasks) == ["alias", "good"]
    [(path, error)] = broken
    assert path.name == "pulled-in" and "leads outside" in str(error)


def test_a_loaded_task_whose_solution_became_a_link_out_is_refused_when_read(tmp_path):
    """The readers after the loader (the oracle's solution, the image's Dockerfile) check
    too: a Task is not always made by the loader."""
    root = task_copy(tmp_path)
    task: Task = load_task(root)
    link(root / "solution" / "solve.sh", "../../../secret.txt")
    with pytest.raises(TaskFormatError, match="leads outside task evil"):
        task.solution_commands()
    with pytest.raises(TaskFormatError, match="leads outside task evil"):
        read_task_text(root / "solution" / "solve.sh", root=root)


def test_tree_hash_never_reads_through_a_link_out_of_the_tree(tmp_path):
    """The hash of a build context covers what Docker is sent: a link as a link."""
    root = tmp_path / "context"
    root.mkdir()
    (root / "Dockerfile").write_text("FROM obsspec/base\n")
    (tmp_path / "secret.txt").write_text("one")
    os.symlink("../secret.txt", root / "data.txt")
    before = tree_hash(root)
    (tmp_path / "secret.txt").write_text("two")
    assert tree_hash(root) == before
