"""Reference solutions cut into commands by bash's own parser, or kept whole where unsafe."""

from __future__ import annotations

import resource
import subprocess
import time
from pathlib import Path

import pytest

from obsspec.environments.errors import TaskFormatError
from obsspec.environments.tasks.solution_split import plan_solution, plan_solution_file

SOURCE = Path("task/solution/solve.sh")

# Written the way Terminal-Bench authors write solution.sh; each with its exact cut.
CUT_SCRIPTS = {
    "heredoc python with comments": (
        "#!/bin/bash\n"
        "# Write the solver\n"
        "mkdir -p app\n"
        "\n"
        "cat > app/solve.py <<'EOF'\n"
        "#!/usr/bin/env python3\n"
        "# Count the words (this comment stays)\n"
        "import sys\n"
        "\n"
        "def count(path):\n"
        "    return len(open(path).read().split())  # $1 is not shell here\n"
        "\n"
        "print(count('app/words.txt'))\n"
        "EOF\n"
        "echo 'one two three' > app/words.txt\n"
        "python3 app/solve.py > app/count.txt\n",
        [
            "mkdir -p app",
            "cat > app/solve.py <<'EOF'\n#!/usr/bin/env python3\n"
            "# Count the words (this comment stays)\nimport sys\n\ndef count(path):\n"
            "    return len(open(path).read().split())  # $1 is not shell here\n\n"
            "print(count('app/words.txt'))\nEOF",
            "echo 'one two three' > app/words.txt",
            "python3 app/solve.py > app/count.txt",
        ],
    ),
    "tab heredoc, loop, function, if, case": (
        "name=world\n"
        "cat > greeting.txt <<-EOF\n"
        "\thello $name\n"
        "\t# not a comment\n"
        "\tEOF\n"
        "for f in a b c; do\n"
        "  # one file per letter\n"
        '  echo "$f" > "$f.txt"\n'
        "done\n"
        "shout() {\n"
        '  echo "$1" | tr a-z A-Z\n'
        "  return 0\n"
        "}\n"
        "\n"
        "if [ -f a.txt ]; then\n"
        "  shout yes > if.txt\n"
        "else\n"
        "  shout no > if.txt\n"
        "fi\n"
        "case $name in\n"
        "  world) echo matched > case.txt ;;\n"
        "  *) echo other > case.txt ;;\n"
        "esac\n",
        [
            "name=world",
            "cat > greeting.txt <<-EOF\n\thello $name\n\t# not a comment\n\tEOF",
            'for f in a b c; do\n  # one file per letter\n  echo "$f" > "$f.txt"\ndone',
            'shout() {\n  echo "$1" | tr a-z A-Z\n  return 0\n}',
            "if [ -f a.txt ]; then\n  shout yes > if.txt\nelse\n  shout no > if.txt\nfi",
            "case $name in\n  world) echo matched > case.txt ;;\n"
            "  *) echo other > case.txt ;;\nesac",
        ],
    ),
    "continuations, pipes, substitutions, arrays, groups, strings": (
        "printf '%s\\n' b a c | \\\n"
        "  sort \\\n"
        "  > sorted.txt\n"
        "total=$(cat sorted.txt |\n"
        "  wc -l)\n"
        "files=(sorted.txt\n"
        "  other.txt)\n"
        'echo "${#files[@]} $total" > counts.txt &&\n'
        "  echo done >> counts.txt\n"
        "{ echo first; echo second; } > group.txt\n"
        "echo 'a multi-line\n"
        "# string, kept' > string.txt\n"
        "   ls >/dev/null   \n"
        "awk '{print $1}' sorted.txt > first.txt\n"
        'for f in *.txt; do wc -c "$f"; done > sizes.log\n',
        [
            "printf '%s\\n' b a c | \\\n  sort \\\n  > sorted.txt",
            "total=$(cat sorted.txt |\n  wc -l)",
            "files=(sorted.txt\n  other.txt)",
            'echo "${#files[@]} $total" > counts.txt &&\n  echo done >> counts.txt',
            "{ echo first; echo second; } > group.txt",
            "echo 'a multi-line\n# string, kept' > string.txt",
            "ls >/dev/null",
            "awk '{print $1}' sorted.txt > first.txt",
            'for f in *.txt; do wc -c "$f"; done > sizes.log',
        ],
    ),
    "set -o pipefail, cd, exported state, while loop, extglob": (
        "set -o pipefail\n"
        "shopt -s extglob\n"
        "mkdir -p work && cd work\n"
        "export GREETING=hi\n"
        "n=0\n"
        "while [ $n -lt 3 ]; do\n"
        "  n=$((n + 1))\n"
        "  echo $GREETING$n >> loop.txt\n"
        "done\n"
        "touch keep.txt drop.log\n"
        "rm -f !(keep.txt|loop.txt)\n",
        [
            "set -o pipefail",
            "shopt -s extglob",
            "mkdir -p work && cd work",
            "export GREETING=hi",
            "n=0",
            "while [ $n -lt 3 ]; do\n  n=$((n + 1))\n  echo $GREETING$n >> loop.txt\ndone",
            "touch keep.txt drop.log",
            "rm -f !(keep.txt|loop.txt)",
        ],
    ),
}


@pytest.mark.parametrize("name", list(CUT_SCRIPTS))
def test_cut_at_top_level_commands(name):
    script, expected = CUT_SCRIPTS[name]
    plan = plan_solution(script, source=SOURCE)
    assert plan.whole_script_because is None and plan.reason.startswith("cut into")
    assert plan.commands == expected


def run_bash(script: str, cwd: Path) -> tuple[str, dict[str, bytes]]:
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
    )
    files = {str(p.relative_to(cwd)): p.read_bytes() for p in cwd.rglob("*") if p.is_file()}
    return result.stdout + result.stderr + f"[exit {result.returncode}]", files


@pytest.mark.parametrize("name", list(CUT_SCRIPTS))
def test_the_pieces_do_what_the_script_does(name, tmp_path):
    """Property: the commands run one after another in one bash leave the same files and print
    the same output as the whole script run by bash."""
    script, _ = CUT_SCRIPTS[name]
    commands = plan_solution(script, source=SOURCE).commands
    (tmp_path / "whole").mkdir()
    (tmp_path / "pieces").mkdir()
    whole = run_bash(script, tmp_path / "whole")
    pieces = run_bash("\n".join(commands), tmp_path / "pieces")
    assert pieces == whole
    assert len(whole[1]) >= 2  # the scripts did something to compare


WHOLE_SCRIPTS = {
    "set -euo pipefail\ncd /app\nmake\n": "set -euo pipefail at line 1",
    "#!/bin/bash\n\nset -e\nmake\n": "set -e at line 3",
    "set -o errexit\nmake\n": "set -o errexit at line 1",
    "make\nif [ ! -f out ]; then\n  exit 1\nfi\n": "exit at line 3",
    "cd /app || exit 1\nmake\n": "exit at line 1",
    "trap 'rm -rf /tmp/build' EXIT\nmake\n": "trap at line 1",
    "exec > /tmp/log 2>&1\nmake\n": "exec at line 1",
    "return 0 2>/dev/null\n": "return at line 1",
    'DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\nls "$DIR"\n': "own path",
    'cd "$(dirname "$0")"\n': "own path",
    'out=${1:-/app/out}\necho hi > "$out"\n': "arguments",
    'for arg in "$@"; do echo "$arg"; done\n': "arguments",
    "cat > note.txt <<EOF\nrun with $1\nEOF\n": "arguments",  # an unquoted heredoc expands
    "#!/usr/bin/env python3\nprint('hi')\n": "shebang names python3",
    "#!/bin/bash -e\nmake\n": "shebang passes -e",
}


@pytest.mark.parametrize("script", list(WHOLE_SCRIPTS))
def test_unsafe_scripts_are_one_whole_script_action(script):
    plan = plan_solution(script, source=SOURCE)
    assert WHOLE_SCRIPTS[script] in plan.reason and plan.reason.startswith("whole script")
    body = script.removesuffix("\n")
    run = "chmod +x /tmp/solve.sh && /tmp/solve.sh" if "python" in script else "bash /tmp/solve.sh"
    assert plan.commands == [
        f"cat > /tmp/solve.sh <<'OBSSPEC_SOLUTION'\n{body}\nOBSSPEC_SOLUTION\n{run}"
    ]


@pytest.mark.parametrize(
    "script",
    [
        "cat > a.py <<'EOF'\ndef f():\n    return 1\nexit(0)\nEOF\n",  # Python, not shell
        "awk '{ print $1; exit }' f\n",  # single-quoted: awk's, not the shell's
        'f() {\n  [ -n "$1" ] || return 1\n  shift\n  echo "$@"\n}\nf a b\n',  # its own args
        'echo "please exit now" # then set -e\n',
        "set -x\nset +e\nset -o pipefail\n",
    ],
)
def test_look_alikes_are_still_cut(script):
    assert plan_solution(script, source=SOURCE).whole_script_because is None


def test_a_whole_script_ends_only_its_own_child(tmp_path):
    """Its exit and errexit end the child bash; the shell that typed it goes on."""
    script = "set -e\necho start\nfalse\necho never\n"
    action = plan_solution(script, source=SOURCE, run_dir=str(tmp_path)).commands[0]
    output, files = run_bash(action + "\necho shell=$?", tmp_path)
    assert output == "start\nshell=1\n[exit 0]" and files["solve.sh"].decode() == script


def test_the_delimiter_never_occurs_in_the_script():
    script = "cat > x <<'OBSSPEC_SOLUTION'\ntext\nOBSSPEC_SOLUTION\nexit 0\n"
    (action,) = plan_solution(script, source=SOURCE).commands
    assert action.startswith("cat > /tmp/solve.sh <<'OBSSPEC_SOLUTION_'\n")
    assert action.endswith("\nOBSSPEC_SOLUTION_\nbash /tmp/solve.sh")


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("echo 'never closed\necho more\n", "line 1 never ends"),
        ("ls\nif true; then\n  echo\n", "line 2 never ends"),
        ("ls\nfi\n", "line 2 never ends"),
        ("python3 /solution/helper.py\n", "line 1 uses /solution"),
        ("cp /oracle/data.csv .\n", "line 1 uses /oracle"),
        ("ls\npython3 helper.py --fast\n", "line 2 uses helper.py, a file shipped next to"),
    ],
)
def test_unusable_solutions_are_refused_naming_the_file(script, message):
    with pytest.raises(TaskFormatError) as raised:
        plan_solution(script, source=SOURCE, siblings=["helper.py"])
    assert str(raised.value).startswith(f"{SOURCE}: ") and message in str(raised.value)


def test_harbor_solution_folder_files_are_siblings(tmp_path):
    folder = tmp_path / "solution"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "input.csv").write_text("a,b\n")
    (folder / "solve.sh").write_text("cat data/input.csv\n")
    with pytest.raises(TaskFormatError, match=r"data/input\.csv"):
        plan_solution_file(folder / "solve.sh", folder=True)
    assert plan_solution_file(folder / "solve.sh", folder=False).commands == ["cat data/input.csv"]
    (folder / "solve.sh").write_bytes(b"echo \xff\n")
    with pytest.raises(TaskFormatError, match="UTF-8"):
        plan_solution_file(folder / "solve.sh", folder=False)


def test_two_hundred_lines_take_well_under_a_second():
    lines = []
    for i in range(40):  # 200 lines: commands, a loop, a heredoc, continuations
        lines += [f"echo {i} > f{i}.txt", f"for x in a b; do echo $x{i}; done"]
        lines += [f"cat > g{i}.py <<'EOF'", f"# comment {i}", "EOF"]
    script = "\n".join(lines)
    assert len(lines) == 200
    # CPU seconds (ours and the parser bash's, with its forks) measure the work and not the load:
    # on a busy machine (a parallel test run) the wall clock may pass a second while waiting
    # for a core. The wall clock still bounds waiting (a parser that hangs for an answer).
    start, cpu_start = time.perf_counter(), cpu_seconds()
    plan = plan_solution(script, source=SOURCE)
    elapsed, cpu = time.perf_counter() - start, cpu_seconds() - cpu_start
    assert len(plan.commands) == 120
    assert cpu < 1.0 and elapsed < 10.0, f"{cpu:.2f} s of CPU, {elapsed:.2f} s"


def cpu_seconds() -> float:
    """CPU time of this process and of its children that ended (the parser bash, once closed)."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return sum(usage.ru_utime + usage.ru_stime for usage in (own, children))


def test_solution_env_is_given_to_a_whole_script_run(tmp_path):
    script = 'echo "greeting=$GREETING"\necho done\n'
    env = {"GREETING": "hi there"}
    plan = plan_solution(script, source=SOURCE, env=env, run_dir=str(tmp_path))
    assert plan.reason == "whole script because: the task sets [solution] env (GREETING)"
    (action,) = plan.commands
    ran = subprocess.run(["bash", "-c", action], capture_output=True, text=True)
    assert ran.stdout == "greeting=hi there\ndone\n"


def test_typed_commands_read_as_a_terminal_does():
    from obsspec.environments.tasks.bash_commands import typed_commands

    typed = [
        "cat > f <<'EOF'",
        "# kept",
        "EOF",
        "",
        "for i in 1 2; do",
        "  echo $i",
        "done",
        "if then",
        'echo "open',
        'quote" \\',
        "  && echo next",
        "echo unfinished at the end; if true; then",
    ]
    continuations = []

    def read_line(continuation: bool):
        continuations.append(continuation)
        return typed.pop(0) if typed else None

    assert list(typed_commands(read_line)) == [
        "cat > f <<'EOF'\n# kept\nEOF",
        "for i in 1 2; do\n  echo $i\ndone",
        "if then",  # a syntax error goes out at once: bash -c reports it
        'echo "open\nquote" \\\n  && echo next',
        "echo unfinished at the end; if true; then",
    ]
    assert continuations[:4] == [False, True, True, False]
