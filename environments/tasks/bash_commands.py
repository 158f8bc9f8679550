"""Commands as bash's own parser delimits them: a script's top-level commands, and commands as
a terminal reads them line by line.

Bash's own parser decides where a command ends, not newlines: lines are added to a chunk until
bash, reading the chunk without running it (noexec, as `bash -n` does), finds it complete and
valid with nothing on stderr. Anything on stderr means incomplete: an unfinished heredoc is only
a warning ("here-document at line N delimited by end-of-file") with status 0. So a heredoc (its
`#` lines kept), a loop, a function, an `if`/`case` block, a `{ }` group, a line ending in `\\`,
`&&` or `|`, and a multi-line string are one command each, exactly the units bash itself runs
one after another when it reads the script. Blank and comment-only lines between commands are
dropped; inside a command everything is kept. A command's text is its lines as written, less the
indentation before it and trailing blanks after it (which change nothing, and which the action
parser strips anyway). A script whose tail never parses is a TaskFormatError naming the file.
One bash process answers every question (each one a forked noexec `eval`), and after an
unfinished heredoc or quote the next question waits for the line that could finish it, so a
200-line script takes a few tens of milliseconds.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from obsspec.environments.errors import TaskFormatError


@dataclass(frozen=True)
class Command:
    text: str
    line: int  # where it starts in the script, from 1


# One bash answers "does this chunk parse, complete?" for every chunk. A chunk arrives as its
# byte length, a newline and its bytes; the answer is the length of what parsing it wrote to
# stderr, a newline and that text (empty: complete and valid). `set -n` inside the forked
# subshell makes the eval read without executing (the noexec mode of `bash -n`), so nothing
# of the script ever runs here. extglob is on because a script may turn it on before using it.
_PARSER = r"""
shopt -s extglob
report_file=$(mktemp)
trap 'rm -f "$report_file"' EXIT
while IFS= read -r size; do
  IFS= read -r -N "$size" chunk
  (eval "set -n
$chunk") 2>"$report_file"
  IFS= read -r -d '' report <"$report_file"
  printf '%d\n%s' "${#report}" "$report"
done
"""


class _BashParser:
    def __init__(self) -> None:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
        self.process = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-c", _PARSER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            # Its own process group: a Ctrl-C at `env shell`'s prompt goes to the terminal's
            # group, and must not kill the parser the next command is read with.
            process_group=0,
        )

    def report(self, chunk: str) -> str:
        """What bash says on reading chunk: "" when it is one or more complete commands."""
        data = chunk.encode("utf-8", "surrogateescape")
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(b"%d\n%s" % (len(data), data))
        self.process.stdin.flush()
        size = int(self.process.stdout.readline())
        return self.process.stdout.read(size).decode("utf-8", "replace")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


_HEREDOC_OPEN = re.compile(r"here-document at line \d+ delimited by end-of-file \(wanted `(.*)'\)")
_QUOTE_OPEN = re.compile(r"unexpected EOF while looking for matching `(.)'")


def top_level_commands(script: str, source: Path) -> list[Command]:
    """The script's top-level complete commands, as bash's parser delimits them."""
    lines = script.split("\n")
    commands: list[Command] = []
    start: int | None = None  # index of the current chunk's first line
    could_end = any_line
    parser = _BashParser()
    try:
        for index, line in enumerate(lines):
            if start is None:
                if not line.strip() or line.lstrip().startswith("#"):
                    continue  # between commands
                start, could_end = index, any_line
            if continued(line) or not could_end(line):
                continue
            text = "\n".join(lines[start : index + 1])
            report = parser.report(text)
            if not report:
                commands.append(Command(clean(text), start + 1))
                start = None
            else:
                could_end = next_possible_end(report)
        if start is not None:
            report = parser.report("\n".join(lines[start:]))
            report = re.sub(r"^bash: eval: line \d+: ", "", report.strip())  # our eval's numbering
            raise TaskFormatError(
                source, f"the command at line {start + 1} never ends as bash reads it: {report}"
            )
    finally:
        parser.close()
    return commands


_UNFINISHED = re.compile(
    r"unexpected end of file|unexpected EOF while looking for|delimited by end-of-file"
)


class LineCancelled(Exception):
    """Raised by typed_commands' read_line when what was typed is dropped (Ctrl-C at a
    prompt): the unfinished command's lines go, as at bash's prompt."""


def typed_commands(read_line: Callable[[bool], str | None]) -> Iterator[str]:
    """Commands as a terminal reads them from lines: one that is not finished (an open quote,
    heredoc, loop or block, a trailing `\\`, `&&` or `|`) takes the next lines too, as bash
    does at its `>` prompt; a finished one, or one bash can only reject (a syntax error),
    goes out as it is, and an unfinished one at the end too (bash -c reports it).
    read_line(continuation) gives the next line without its newline, or None at the end; it
    raises LineCancelled to drop the lines of the command typed so far."""
    parser = _BashParser()
    try:
        chunk: list[str] = []
        while True:
            try:
                line = read_line(bool(chunk))
            except LineCancelled:
                chunk = []
                continue
            if line is None:
                break
            if not chunk and not line.strip():
                continue
            chunk.append(line)
            if continued(line) or _UNFINISHED.search(parser.report("\n".join(chunk))):
                continue
            yield "\n".join(chunk)
            chunk = []
        if chunk:
            yield "\n".join(chunk)
    finally:
        parser.close()


def continued(line: str) -> bool:
    """A line ending in an odd number of backslashes goes on (bash would take the chunk ending
    there as complete, the backslash escaping nothing)."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def next_possible_end(report: str) -> Callable[[str], bool]:
    """After bash says why a chunk is unfinished, which later lines could finish it: the
    heredoc's delimiter line, or a line holding the missing quote. Skipping the others keeps
    a long heredoc from being parsed again at every line."""
    heredoc = _HEREDOC_OPEN.search(report)
    if heredoc:
        delimiter = heredoc.group(1)
        return lambda line: line.lstrip("\t") == delimiter
    quote = _QUOTE_OPEN.search(report)
    if quote:
        char = quote.group(1)
        return lambda line: char in line
    return any_line


def any_line(_line: str) -> bool:
    return True


def clean(text: str) -> str:
    """The command as typed: without the indentation before it or blanks after it, unless a
    trailing blank is escaped (`\\ `)."""
    stripped = text.strip()
    if continued(stripped) and stripped != text.lstrip():
        return text.lstrip()
    return stripped
