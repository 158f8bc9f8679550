"""How an `obsspec` process ends: its exit code, a one-line error, and the --json outcome.

    0    everything asked for was done
    1    an error: nothing, or not everything, was done (a failed check, a broken input)
    2    a usage error: an unknown flag, a missing argument, a value the parser refuses
    3    partly done: `collect` has some of the episodes asked for (the others are named);
         or a CI gate failed: a figure outside its --fail-under / --fail-over bound (the
         command itself did all its work: its report is written and printed)
    130  Ctrl-C
    143  SIGTERM (a scheduler, `timeout`, `kill`); cleanup runs as for Ctrl-C

Every error, ours (ObsspecError) or the parser's, is one line `error: ...` on stderr, with
`hint: ...` below it when there is a fix to suggest; `--debug` shows the traceback instead.
Under `--json`, a command that ends without printing its object prints the outcome instead
(cli.common.JsonOutput), so that stdout always holds exactly one JSON object.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator

import typer
from rich.markup import escape

from obsspec.cli.common import err, json_stdout
from obsspec.errors import ObsspecError

try:  # typer >= 0.20 ships its own copy of click, whose exceptions are not click's
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover
    from click import exceptions as click_errors

OK, ERROR, USAGE, PARTIAL, CTRL_C, SIGTERM = 0, 1, 2, 3, 130, 143
GATE_FAILED = PARTIAL  # a result short of what was asked for, as a partial collect is
EPILOG = (
    "Exit codes: 0 everything asked for was done; 1 error; 2 usage error; 3 partly done "
    "(collect: some episodes are missing) or a --fail-under/--fail-over gate failed; "
    "130 Ctrl-C; 143 SIGTERM."
)


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that cleanup (containers, engines, shards)
    runs as for Ctrl-C."""


def run(app: Callable[..., object], *, debug: bool) -> int:
    """Run the typer app; every way it can end becomes an exit code (and, for an error, one
    line on stderr and the --json outcome)."""
    try:
        with sigterm_raises():
            code = app(standalone_mode=False)  # typer.Exit(n) comes back as n
        code = code if isinstance(code, int) else OK
    except click_errors.NoArgsIsHelpError:
        return USAGE  # the help is printed
    except click_errors.UsageError as e:
        command = e.ctx.command_path if e.ctx is not None else "obsspec"
        return fail(one_line(e.format_message()), f"{command} --help", USAGE)
    except click_errors.ClickException as e:
        return fail(one_line(e.format_message()), None, e.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        code = CTRL_C
    except Terminated:
        code = SIGTERM
    except ObsspecError as e:
        if debug:
            for line in e.details:
                err.print(line, markup=False, highlight=False)
            raise
        hint = e.hint
        if e.details:
            more = "--debug shows the last lines of the log"
            hint = f"{hint}; {more}" if hint else more
        return fail(str(e), hint, e.exit_code)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (OK if e.code is None else ERROR)
    except Exception as e:
        if debug:
            raise
        message = f"unexpected {type(e).__name__}: {one_line(str(e))}"
        return fail(message, "run again with --debug for the traceback", ERROR)
    if code in (CTRL_C, SIGTERM):
        stopped = "interrupted (Ctrl-C)" if code == CTRL_C else "stopped by SIGTERM"
        json_stdout.emit_outcome("interrupted", stopped, None, code)
    elif code != OK:
        json_stdout.emit_outcome("error", f"exit code {code}", None, code)
    return code


def fail(message: str, hint: str | None, code: int) -> int:
    """One line `error: ...` (and `hint: ...`) on stderr; under --json, the outcome too."""
    err.print(f"[bold red]error:[/bold red] {escape(message)}", markup=True, soft_wrap=True)
    if hint:
        err.print(f"[yellow]hint:[/yellow] {escape(hint)}", markup=True, soft_wrap=True)
    status = {USAGE: "usage_error", PARTIAL: "incomplete"}.get(code, "error")
    json_stdout.emit_outcome(status, message, hint, code)
    return code


def one_line(message: str) -> str:
    """A message as one line, its first letter lower-case as ours are ("No such option" ->
    "no such option")."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    text = " ".join(lines) or "(no message)"
    if text[:1].isupper() and text[1:2].islower():
        text = text[0].lower() + text[1:]
    return text


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises Terminated in this process (a second SIGTERM kills it at once); a
    child forked from it dies of SIGTERM as it would have. Commands that run an event loop
    may install their own handler for the loop's lifetime (collect, rl)."""
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:  # the parent asked for that
        yield
        return
    pid = os.getpid()

    def raise_terminated(signum: int, _frame) -> None:
        signal.signal(signum, signal.SIG_DFL)
        if os.getpid() != pid:
            os.kill(os.getpid(), signum)
            return
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
