"""No control sequence from a task's files or a verifier's output reaches the user's terminal
(issue 38, item 9): an OSC 52 clipboard write or a title change in an instruction, a task.toml
key, a solution's or a verifier's output is printed with its control characters shown as
escapes (`\\x1b]52;c;...\\x07`), by `env shell`, `env shell --verify` and `env validate`.
`--json` keeps the text as it was (JSON escapes it)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.table import Table
from rich.text import Text

from obsspec.cli.common import err, out

OBSSPEC = str(Path(sys.executable).with_name("obsspec"))
CLIPBOARD = "\x1b]52;c;ZWNobyBwd25lZA==\x07"  # OSC 52: "echo pwned" into the clipboard
TITLE = "\x1b]0;owned\x07"
C1_CSI = "\x9b31m"  # an 8-bit CSI, which some terminals act on
SHOWN = "\\x1b]52;c;ZWNobyBwd25lZA==\\x07"  # the clipboard write, as printed


def typed(text: str) -> str:
    """text as printf '%b' writes it: ESC and BEL as octal escapes."""
    return text.replace("\x1b", "\\033").replace("\x07", "\\007")


def raw_controls(text: str) -> list[str]:
    """The control characters a terminal would act on (all but newline and tab)."""
    return sorted({c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0})


@pytest.fixture(scope="module")
def hostile_task(tmp_path_factory, base_image) -> Path:
    root = tmp_path_factory.mktemp("tasks") / "escapes"
    files = {
        "task.toml": '[agent]\ntimeout_sec = 60\n"title\\u001b]0;from-key\\u0007" = 1\n',
        "instruction.md": f"Greet.{CLIPBOARD} and {TITLE} [bold red]RED[/] {C1_CSI}\n",
        "environment/Dockerfile": f"FROM {base_image}\nWORKDIR /root\n",
        "solution/solve.sh": f"printf '%b\\n' '{typed(TITLE)}solved'\nexit 1\n",
        "tests/test.sh": "#!/bin/bash\nmkdir -p /logs/verifier\n"
        f"printf '%b\\n' 'verifier says {typed(CLIPBOARD)} then {typed(TITLE)} "
        "[link=http://x]click[/link]'\n"
        "echo 0 > /logs/verifier/reward.txt\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [OBSSPEC, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def test_the_consoles_show_control_characters_as_escapes(capsys):
    """Whatever is printed through the CLI's consoles: a str, rich Text, a table."""
    out.print(f"plain {CLIPBOARD}", markup=False)
    out.print(Text.assemble(("task", "bold"), f": {TITLE}{C1_CSI}"))
    table = Table()
    table.add_column("task")
    table.add_row(Text(f"t{TITLE}"))
    out.print(table)
    err.print(f"line one\rline two {CLIPBOARD}", markup=False)
    captured = capsys.readouterr()
    assert raw_controls(captured.out + captured.err) == []
    assert f"plain {SHOWN}" in captured.out
    assert "task: \\x1b]0;owned\\x9b31m" in captured.out  # a Text made of it: no BEL left
    assert f"line one\nline two {SHOWN}" in captured.err


@pytest.mark.docker
def test_env_shell_prints_no_control_sequence_from_the_task(hostile_task, base_image):
    result = run(
        "env",
        "shell",
        str(hostile_task),
        "--solution",
        "--verify",
        stdin="printf '\\033]0;x\\007hi\\n'\n",
    )
    assert result.returncode == 0, result.stderr
    printed = result.stdout + result.stderr
    assert raw_controls(printed) == [], printed
    assert f"Greet.{SHOWN} and \\x1b]0;owned\\x07 [bold red]RED[/] \\x9b31m" in result.stderr
    assert f"verifier says {SHOWN} then \\x1b]0;owned\\x07 [link=http://x]click[/link]" in (
        result.stdout
    )
    assert "unknown key 'agent.title\\x1b]0;from-key\\x07'" in result.stderr  # the loader's warning


@pytest.mark.docker
def test_env_validate_prints_no_control_sequence_from_the_verifier(hostile_task, base_image):
    result = run("env", "validate", str(hostile_task))
    assert result.returncode == 1, result.stderr
    printed = result.stdout + result.stderr
    assert raw_controls(printed) == [], printed
    assert f"| verifier says {SHOWN} then \\x1b]0;owned\\x07" in result.stdout
    assert "| \\x1b]0;owned\\x07solved" in result.stdout  # the solution's output tail
    # --json keeps the text as it was; JSON's own escapes keep it off the terminal
    result = run("env", "validate", str(hostile_task), "--json")
    assert raw_controls(result.stdout) == []
    [row] = json.loads(result.stdout)["rows"]
    assert CLIPBOARD in row["verifier_output"] and TITLE in row["solution_output"]
