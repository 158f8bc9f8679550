"""When a reference solution must run as one script, and the action that runs it so.

Typed one command per turn into a persistent shell, some scripts would not do what
`bash solve.sh` does. Then the oracle's only action runs the whole script, as an agent would: it
writes the script to /tmp/<its file name> with a quoted heredoc and runs it with `bash` (see
whole_script_action). That happens, with the first cause as the reason, when the code (outside
single-quoted strings, comments and heredoc bodies) has:
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
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from obsspec.environments.tasks.bash_commands import Command
from obsspec.environments.tasks.text import env_prefix


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
