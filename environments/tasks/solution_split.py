"""A reference solution as the commands an agent would type: the oracle policy's turns.

    plan = plan_solution(script_text, source=path)
    plan.commands   # ["cd /app", "cat > main.py <<'EOF'\\n# a comment\\n...\\nEOF", ...]
    plan.reason     # "cut into 5 commands", or "whole script because: set -e at line 3"

THE CUT. Bash's own parser decides where a command ends, not newlines: lines are added to a
chunk until bash, reading the chunk without running it (noexec, as `bash -n` does), finds it
complete and valid with nothing on stderr. Anything on stderr means incomplete: an unfinished
heredoc is only a warning ("here-document at line N delimited by end-of-file") with status 0.
So a heredoc (its `#` lines kept), a loop, a function, an `if`/`case` block, a `{ }` group, a
line ending in `\\`, `&&` or `|`, and a multi-line string are one command each, exactly the
units bash itself runs one after another when it reads the script. Blank and comment-only lines
between commands are dropped; inside a command everything is kept. A command's text is its
lines as written, less the indentation before it and trailing blanks after it (which change
nothing, and which the action parser strips anyway). A script whose tail never parses is a
TaskFormatError naming the file. One bash process answers every question (each one a forked
noexec `eval`), and after an unfinished heredoc or quote the next question waits for the line
that could finish it, so a 200-line script takes a few tens of milliseconds.

WHOLE SCRIPT. Typed one command per turn into a persistent shell, some scripts would not do
what `bash solve.sh` does. Then the oracle's only action runs the whole script, as an agent
would: it writes the script to /tmp/<its file name> with a quoted heredoc and runs it with
`bash` (see whole_script_action). That happens, with the first cause as the reason, when the
code (outside single-quoted strings, comments and heredoc bodies) has:
- a shebang naming another interpreter than bash/sh/dash (the script is run with it), or a
  bash shebang with flags;
- `set` turning on errexit or nounset (`set -e`, `set -euo pipefail`, `set -o errexit`, ...):
  in a shell that outlives the script, the first failing command would end the shell;
- `trap` (an EXIT trap would fire when the shell ends, not when the script does), `exec`
  (replaces or redirects the shell itself), `exit` anywhere, `return` outside a function;
- the script's own arguments or path: `$1`..`$9`, `$@`, `$*`, `$#`, `shift` (outside a
  function definition, where they are the function's), `$0` or `BASH_SOURCE` anywhere. Inside
  the whole-script action `$0` is /tmp/<file name>, not the task's /solution/ path.
The rules are conservative: in a `( )` subshell `exit` would be harmless, but the whole script
is never wrong where a cut might be.

REFUSED (TaskFormatError naming the file): a solution that uses files the agent's sandbox does
not have, i.e. a path under /solution or /oracle (where harnesses upload solutions) or the name
of another file of a Harbor solution/ directory. The oracle plays an agent, and an agent only
has what the task's image has; run such tasks with `obsspec env validate`, which uploads them.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from environments.errors import TaskFormatError
from environments.tasks.text import env_prefix, read_task_text

SHELLS = {"bash", "sh", "dash"}  # harnesses run solve.sh with bash whatever its shebang says


@dataclass(frozen=True)
class Command:
    text: str
    line: int  # where it starts in the script, from 1


@dataclass(frozen=True)
class SolutionPlan:
    commands: list[str]  # the oracle's actions, in order
    whole_script_because: str | None  # None: cut at top-level commands

    @property
    def reason(self) -> str:
        if self.whole_script_because is None:
            return f"cut into {len(self.commands)} commands"
        return f"whole script because: {self.whole_script_because}"


def plan_solution(
    script: str,
    *,
    source: Path,
    siblings: Iterable[str] = (),
    run_dir: str = "/tmp",
    env: Mapping[str, str] | None = None,
) -> SolutionPlan:
    """How the oracle replays script (read from source): cut, or whole. siblings are the names
    of the other files shipped next to it (a Harbor solution/ directory); env is the task's
    [solution] env, which only a whole-script action can give the script (as its harness
    does) without an extra `export` turn in the expert data."""
    check_self_contained(script, source, siblings)
    env = env or {}
    interpreter = shebang(script)
    if interpreter is not None and interpreter[0] not in SHELLS:
        whole = whole_script_action(script, source.name, run_dir, interpreter=True, env=env)
        return SolutionPlan([whole], f"its shebang names {interpreter[0]}")
    commands = top_level_commands(script, source)
    if interpreter is not None and len(interpreter) > 1:
        reason: str | None = f"its shebang passes {' '.join(interpreter[1:])} to the shell"
    elif env:
        reason = f"the task sets [solution] env ({', '.join(env)})"
    else:
        reason = whole_script_reason(commands)
    if reason is None:
        return SolutionPlan([c.text for c in commands], None)
    return SolutionPlan([whole_script_action(script, source.name, run_dir, env=env)], reason)


def plan_solution_file(
    path: Path, *, folder: bool, env: Mapping[str, str] | None = None
) -> SolutionPlan:
    """plan_solution for a solution file; with folder, the files next to it ship with it."""
    script = read_task_text(path)
    siblings = []
    if folder:
        siblings = [
            str(p.relative_to(path.parent))
            for p in sorted(path.parent.rglob("*"))
            if p.is_file() and p != path
        ]
    return plan_solution(script, source=path, siblings=siblings, env=env)


# --- the cut ---------------------------------------------------------------------------------

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


def typed_commands(read_line: Callable[[bool], str | None]) -> Iterator[str]:
    """Commands as a terminal reads them from lines: one that is not finished (an open quote,
    heredoc, loop or block, a trailing `\\`, `&&` or `|`) takes the next lines too, as bash
    does at its `>` prompt; a finished one, or one bash can only reject (a syntax error),
    goes out as it is, and an unfinished one at the end too (bash -c reports it).
    read_line(continuation) gives the next line without its newline, or None at the end."""
    parser = _BashParser()
    try:
        chunk: list[str] = []
        while (line := read_line(bool(chunk))) is not None:
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


# --- when not to cut --------------------------------------------------------------------------


def shebang(script: str) -> list[str] | None:
    """The interpreter a `#!` line names and its arguments (`env` skipped), or None."""
    if not script.startswith("#!"):
        return None
    words = script.split("\n", 1)[0][2:].split()
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
    if not words:
        return None
    return [Path(words[0]).name, *words[1:]]


_COMMAND_POSITION = r"(?:^|[;&|({!]|\bthen|\belse|\bdo)[ \t]*"
_BUILTINS = re.compile(
    _COMMAND_POSITION + r"(set|trap|exec|exit|return|shift)\b([^;&|\n]*)", re.MULTILINE
)
_ERREXIT = re.compile(r"(?:^|\s)-[A-Za-z]*[eu]|-o\s+(?:errexit|nounset)\b")
_ARGUMENTS = re.compile(r"\$(?:[1-9@*#]|\{(?:[1-9][0-9]*|[@*#])[}:#%/^,\-=?+])")
_SCRIPT_PATH = re.compile(r"\$0|\$\{0\}|\bBASH_SOURCE\b")
_FUNCTION = re.compile(r"^(?:function\s+[^\s()]+|[^\s()=$\"']+\s*\(\s*\))")


def whole_script_reason(commands: list[Command]) -> str | None:
    """Why the commands must run as one script (the first cause found), or None."""
    for command in commands:
        code, expanded = shell_views(command.text)
        function = bool(_FUNCTION.match(command.text))
        for match in _BUILTINS.finditer(code):
            name, args = match.group(1), match.group(2)
            if name == "set" and not _ERREXIT.search(args):
                continue
            if name in ("return", "shift") and function:
                continue
            line = command.line + code.count("\n", 0, match.start(1))
            what = f"set{args}".strip() if name == "set" else name
            return f"{what} at line {line}"
        if _SCRIPT_PATH.search(expanded):
            return f"the script's own path ($0 or BASH_SOURCE) at line {command.line}"
        if not function and _ARGUMENTS.search(expanded):
            return f"the script's arguments ($1, $@, ...) at line {command.line}"
    return None


def shell_views(text: str) -> tuple[str, str]:
    """Two views of a command for the rules above, both without comments, single-quoted
    strings and quoted heredoc bodies: `code` (where command words are: double-quoted text
    and every heredoc body also dropped) and `expanded` (where `$` expands: double-quoted
    text and unquoted heredoc bodies kept). A lexer, not a parser: where it errs, it errs
    towards seeing too much, which only makes the whole script run."""
    code: list[str] = []
    expanded: list[str] = []
    heredocs: list[tuple[str, bool, bool]] = []  # delimiter, strip tabs, expands
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        line_code, line_expanded, opened = lex_line(line)
        code.append(line_code)
        expanded.append(line_expanded)
        heredocs.extend(opened)
        while heredocs:
            delimiter, tabs, expands = heredocs.pop(0)
            while index < len(lines):
                body = lines[index]
                index += 1
                if (body.lstrip("\t") if tabs else body) == delimiter:
                    break
                code.append("")
                expanded.append(body if expands else "")
    return "\n".join(code), "\n".join(expanded)


_HEREDOC = re.compile(r"<<(-?)[ \t]*(\\?)(?:'([^']*)'|\"([^\"]*)\"|([A-Za-z_][\w.-]*))")


def lex_line(line: str) -> tuple[str, str, list[tuple[str, bool, bool]]]:
    """One line's code and expanded views, and the heredocs it opens."""
    code, expanded, opened = [], [], []
    i, n = 0, len(line)
    while i < n:
        char = line[i]
        if char == "\\":
            code.append(line[i : i + 2])
            expanded.append(line[i : i + 2])
            i += 2
        elif char == "'" or line.startswith("$'", i):
            end = line.find("'", i + (2 if char == "$" else 1))
            i = n if end < 0 else end + 1
            code.append("''")
            expanded.append("''")
        elif char == '"':
            end = i + 1
            while end < n and line[end] != '"':
                end += 2 if line[end] == "\\" else 1
            expanded.append(line[i : end + 1])
            code.append('""')
            i = end + 1
        elif char == "#" and (i == 0 or line[i - 1] in " \t;&|()"):
            break
        elif line.startswith("<<", i) and not line.startswith("<<<", i):
            heredoc = _HEREDOC.match(line, i)
            if heredoc is None:
                code.append("<<")
                expanded.append("<<")
                i += 2
                continue
            tabs, escaped, single, double, bare = heredoc.groups()
            quoted = bool(escaped) or single is not None or double is not None
            opened.append(
                (next(d for d in (single, double, bare) if d is not None), bool(tabs), not quoted)
            )
            code.append(heredoc.group(0))
            expanded.append(heredoc.group(0))
            i = heredoc.end()
        else:
            code.append(char)
            expanded.append(char)
            i += 1
    return "".join(code), "".join(expanded), opened


def check_self_contained(script: str, source: Path, siblings: Iterable[str]) -> None:
    """Refuse a solution that needs files the agent's sandbox lacks (see the module doc)."""
    needs = [(r"(?<![\w.-])/(?:solution|oracle)(?:/|\b)", "where harnesses upload the solution")]
    needs += [
        (rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", "a file shipped next to the solution")
        for name in siblings
    ]
    for pattern, what in needs:
        found = re.search(pattern, script)
        if found:
            line = script.count("\n", 0, found.start()) + 1
            raise TaskFormatError(
                source,
                f"line {line} uses {found.group(0).rstrip('/')}, {what}; the oracle types "
                "commands into the task's own image, which lacks it (`obsspec env validate` "
                "runs such solutions)",
            )


def whole_script_action(
    script: str,
    name: str,
    run_dir: str,
    *,
    interpreter: bool = False,
    env: Mapping[str, str] | None = None,
) -> str:
    """One command that runs script as its harness would, in a child process.

    Why a file and not `bash <<'EOF'` or `bash -c '...'`: fed on stdin, the script's commands
    would read the rest of the script as their stdin (ffmpeg, ssh, `read` do), where a harness
    gives them none; `bash -c` needs every `'` escaped, unreadable in the data, and caps the
    script at 128 KiB. Written to a file and run with bash, its `exit`, `set -e` and traps end
    only that child; the file's `#!` line chooses the interpreter when it names another."""
    path = f"{run_dir.rstrip('/')}/{name}"
    delimiter = "OBSSPEC_SOLUTION"
    body_lines = script.split("\n")
    while delimiter in (line.strip() for line in body_lines):
        delimiter += "_"
    path = shlex.quote(path)
    prefix = env_prefix(env or {})
    run = f"chmod +x {path} && {prefix}{path}" if interpreter else f"{prefix}bash {path}"
    body = script[:-1] if script.endswith("\n") else script
    return f"cat > {path} <<'{delimiter}'\n{body}\n{delimiter}\n{run}"
