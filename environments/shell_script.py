"""What the persistent shell runs, and how its messages are made those of `bash -c`.

The contract (tested against a fresh `bash` in tests/environments/test_shell_fidelity.py):
command k's observation is what `bash -c "$command_k"` would print, started in the state
commands 1..k-1 left behind (cwd, variables, functions, aliases, `set`/`shopt` options,
traps), with aliases expanded as in a terminal. Where bash itself would end the shell (`exit`,
`exec CMD`, an error under `set -e` or `set -u`), the result says so (`shell_restarted`) and
the next command finds a fresh shell in the same container. State is a terminal's: an EXIT
trap fires when the shell ends (as in a terminal), not after every command (as separate
bash -c runs would).

How. The shell is one bash reading its script from the exec stream. For each command the
driver sends one top-level line:

    trap '<handler, with the command in it>' RTMIN+7; kill -RTMIN+7 $$

and the signal runs the trap `handler`, which evals the command.
Why a trap and not `while read; do eval; done` (the obvious loop): inside a loop, a `continue`
or `break` the agent types would act on the loop itself (the shell hangs or quits), where
bash -c says "only meaningful in a `for', `while', or `until' loop" and goes on. Why not a
function: `declare` and `local` inside one would make the agent's variables local. A trap
handler runs at top level, outside any loop or function, and its eval'd text is numbered from
line 1 (the handler is one line), so "bash: line 2: foo: command not found" reads as from
bash -c. The command's stdin is /dev/null (EOF), as for a non-interactive agent.

What is normalised afterwards (`bash_c_stderr`), because eval reports it differently:
- syntax errors: "bash: eval: line N:" -> "bash: -c: line N:";
- errors inside functions defined by the command: "main: line N:" -> "environment: line N:";
- with `set -x` on, trace lines carry two more PS4 levels (the trap and the eval): removed.
Known differences, documented rather than hidden: a command under `set -e` whose final
status is non-zero though bash would exempt it (`! cmd`, `a && b`) ends the shell; with
`set -x` on, $? at the start of a command reads 0; `jobs` names every background job
`builtin kill -RTMIN+7 "$$" &` and $BASH_COMMAND reads the same (bash names jobs started in a
trap by the top-level command); `$_` at the start of a command is `RTMIN+7`; an ERR trap the
agent set fires once more when the command as a whole fails (and after a syntax error), and a
DEBUG trap also before our own lines; a user trap on RTMIN+7 breaks the shell. bash's report
of a job killed by a signal ("bash: line 1:   123 Killed   ...") is removed where bash -c
would print it (`strip_job_notices`; why in environments/shell.py).
"""

from __future__ import annotations

import re

SIGNAL = "RTMIN+7"  # unused by programs agents run; trapped only by this shell
INIT = (
    "set +o history; shopt -s expand_aliases; PS1=''; PS2=''; umask 022; "
    "printf '__OBSSPEC_READY_%s__' \"$$\"\n"
)
# With xtrace on, the command is prefixed (on its first line) with `set -x`, so our own lines
# are not traced; the unset tells the handler that the prefix ran (a syntax error on line 1
# stops the whole line).
XTRACE_PREFIX = "builtin unset -v __obsspec_s; set -x; "


def ansi_c_quote(text: str) -> str:
    """text as a bash $'...' word on one line (so the eval'd text is numbered from 1)."""
    out = []
    for ch in text:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


def handler(command: str, token: str, last_exit: int, xtrace: bool) -> str:
    """The trap handler for one command: one line, the command written into it as a $'...'
    word, so nothing of ours is a variable while the command runs (`set`, `declare -p` and
    `trap -p` show nothing of ours). The driver keeps the previous exit code and xtrace.
    `(exit N) && :` restores $? (`&& :`: `set -e` must not end the shell on it). The end
    marker carries the exit code, and an "x" when xtrace is on afterwards: the command left
    it on, or, when it was on before, the prefix that turns it back on never ran."""
    if xtrace:
        setup, text, after = "__obsspec_s=u; ", XTRACE_PREFIX + command, "@(*x*|*u)"
    else:
        setup, text, after = "", command, "*x*"
    restore = f"(exit {int(last_exit)}) && :; " if last_exit else ""  # a fork: only if needed
    return (
        f"builtin trap - {SIGNAL}; {setup}{restore}"
        f"builtin eval {ansi_c_quote(text)} </dev/null; "
        "{ __obsspec_s=$?:$-:${__obsspec_s+u}; builtin set +x; } 2>/dev/null; "
        f"if [[ ${{__obsspec_s#*:}} == {after} ]]; then __obsspec_s=${{__obsspec_s%%:*}}_x; "
        "else __obsspec_s=${__obsspec_s%%:*}_; fi; "
        f'builtin printf "__OBSSPEC_{token}_RC=%s__" "$__obsspec_s"; '
        f'builtin printf "__OBSSPEC_{token}_END__" >&2; builtin unset -v __obsspec_s'
    )


def record(command: str, token: str, last_exit: int, xtrace: bool) -> str:
    """What the driver sends for one command: one top-level line that sets the handler and
    signals the shell."""
    trap = handler(command, token, last_exit, xtrace).replace("'", "'\\''")
    return f"builtin trap '{trap}' {SIGNAL}; builtin kill -{SIGNAL} \"$$\"\n"


_UNBOUND = re.compile(r": unbound variable\n?$")


def ended_exit_code(code: int | None, stderr: str) -> int | None:
    """The exit code bash -c gives when the shell ended: an unbound variable under `set -u`
    ends bash -c with 127, where the shell's trap handler exits with 1."""
    if code == 1 and _UNBOUND.search(stderr):
        return 127
    return code


_EVAL_SYNTAX = re.compile(r"^bash: eval: line (\d+): ", re.MULTILINE)
_FUNCTION_SOURCE = re.compile(r"^main: line (\d+): ", re.MULTILINE)
TRACE_EXTRA_LEVELS = 2  # the trap handler and the eval each add one PS4 level


_PREFIX_ECHO = re.compile(r"^(bash: -c: line 1: `)" + re.escape(XTRACE_PREFIX), re.M)


def bash_c_stderr(stderr: str, *, xtrace: bool) -> str:
    """The command's stderr as `bash -c` would have written it."""
    stderr = _EVAL_SYNTAX.sub(r"bash: -c: line \1: ", stderr)
    stderr = _PREFIX_ECHO.sub(r"\1", stderr)  # a syntax error quotes line 1, with our prefix
    stderr = _FUNCTION_SOURCE.sub(r"environment: line \1: ", stderr)
    if xtrace:
        extra = re.escape("+" * TRACE_EXTRA_LEVELS)
        stderr = re.sub(rf"^{extra}(?=\+)", "", stderr, flags=re.MULTILINE)
    return stderr


# bash's report of a job that a signal ended: "bash: line 1:   123 Killed    <the job's text>"
# (the text is our trap line for most jobs, see above; a compound job's spans several lines).
_JOB_NOTICE = re.compile(r"bash: (?:line \d+: )? *\d+ [A-Z][^\n]*")
_OPENS_BLOCK = re.compile(r"(?:\bdo|\bthen|\belse|\bin|\{)$")  # the job text goes on below
_CLOSES_BLOCK = re.compile(r"(?:done|fi|esac|\})(?:\W|$)")


def strip_job_notices(stderr: str) -> str:
    """stderr without bash's reports of jobs killed by a signal (OOM, a timeout's kill,
    a segfault). Each names a PID, which nothing can predict, and, in this shell, often our
    trap line instead of the command; the exit code (128+N) still says what happened. A
    compound job's text is skipped to the line that closes it."""
    lines = stderr.splitlines(keepends=True)
    kept: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not _JOB_NOTICE.fullmatch(line.rstrip("\n")):
            kept.append(line)
            continue
        open_block = bool(_OPENS_BLOCK.search(line.rstrip()))
        while open_block and i < len(lines):  # the job's text, as bash prints a command
            body = lines[i]
            if body.startswith("    ") or re.match(r"(?:else|elif|then|do)\b", body):
                i += 1
            elif _CLOSES_BLOCK.match(body):
                i += 1
                open_block = bool(_OPENS_BLOCK.search(body.rstrip()))
            else:
                break
    return "".join(kept)
