"""Plain data shared by every layer: the result of a command and its canonical observation.

The observation is the single text the policy sees after an action and the world model must
predict. `render_observation` is the only function that builds it, so exact match between a
prediction and reality is string equality of two renderings (equal texts -> equal tokens).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_MAX_CHARS = 10_000
NO_OUTPUT = "(no output)"
TRUNCATION_MARKER = "\n[... output truncated ...]\n"

# CSI (colours, cursor movement), OSC (window titles, hyperlinks) and two-byte escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# C0 controls other than tab and newline (binary output) become U+FFFD.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# What a terminal acts on instead of showing: those, and the C1 controls (U+0080-U+009F;
# some terminals take U+009B as CSI and U+009D as OSC).
_TERMINAL_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class ExecResult:
    """What one command did in a sandbox. stdout/stderr are decoded (invalid UTF-8 replaced)
    and capped while streaming: when `truncated`, the middle of a stream was dropped and
    TRUNCATION_MARKER stands in its place (head and tail are kept, so rendering is the same
    as from the full output)."""

    stdout: str
    stderr: str
    exit_code: int | None  # None when the command timed out and was killed
    duration_s: float
    timed_out: bool = False
    truncated: bool = False
    shell_restarted: bool = False  # the persistent shell died (e.g. `exit`) and was restarted
    timeout_s: float | None = None  # the limit the command ran under
    killed_processes: int = 0  # processes the timeout killed (all in the sandbox but the shell)
    sandbox_restarted: bool = False  # not all could be killed: the container was restarted


def clean_text(text: str) -> str:
    """ANSI escapes removed, CRLF -> LF, other control characters made visible."""
    text = _ANSI.sub("", text).replace("\r\n", "\n")
    return _CONTROL.sub("\ufffd", text.replace("\r", "\n"))


def visible_controls(text: str) -> str:
    """text as it may reach a terminal: CR LF and a lone CR (which would let a later line
    overwrite an earlier one) become newlines, and every other control character is shown
    as its escape (ESC as \\x1b, BEL as \\x07). A clipboard write (OSC 52) or a title change
    in a task's text or a verifier's output is then printed as text the user can read,
    never run by the terminal. Shown, not removed: a task that sends escapes is odd, and the
    user should see that it did. (The canonical observation removes them instead, with
    clean_text: the agent and the world model want the text, not the escapes.) Idempotent."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _TERMINAL_CONTROL.sub(lambda found: f"\\x{ord(found[0]):02x}", text)


def truncate_middle(text: str, max_chars: int) -> str:
    """Keep the head and the tail (errors usually come last), cut the middle, deterministically."""
    if len(text) <= max_chars:
        return text
    head = max_chars // 2
    tail = max_chars - head
    return text[:head] + TRUNCATION_MARKER + text[-tail:]


SHELL_ENDED = "; the shell ended and a new one was started"


def status_line(result: ExecResult) -> str:
    """The last line of an observation. A restarted shell is named: the agent's cwd,
    variables and functions are gone, and the next observation depends on it."""
    ended = SHELL_ENDED if result.shell_restarted else ""
    if result.timed_out:
        limit = f" after {result.timeout_s:g} s" if result.timeout_s is not None else ""
        return f"[command timed out{limit} and was killed{ended}]"
    return f"[exit code: {result.exit_code}{ended}]"


def longest_observation_chars(max_chars: int) -> int:
    """The most characters render_observation can return under this cap: the cut body with
    its marker, a newline and the longest status line (a timeout's, with the widest number
    `:g` writes and the shell restarted)."""
    widest = ExecResult("", "", None, 0.0, timed_out=True, shell_restarted=True,
                        timeout_s=-1.23457e-300)  # fmt: skip
    return max_chars + len(TRUNCATION_MARKER) + 1 + len(status_line(widest))


def says_timed_out(observation: str) -> bool:
    """Whether a canonical observation (real or guessed) ends with the timed-out status line:
    the status line is always the last, so printed text cannot pass for it."""
    return observation.rpartition("\n")[2].startswith("[command timed out")


def render_observation(result: ExecResult, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """The canonical observation: stdout then stderr (trailing newlines removed), truncated
    in the middle past max_chars, "(no output)" when empty, then the exit-code line."""
    parts = [clean_text(s).rstrip("\n") for s in (result.stdout, result.stderr)]
    body = "\n".join(p for p in parts if p)
    body = truncate_middle(body, max_chars) if body else NO_OUTPUT
    return f"{body}\n{status_line(result)}"


def first_differing_line(a: str, b: str) -> tuple[int, str, str] | None:
    """(line number from 1, line of a, line of b) where two texts (observations, a prediction
    and its observation) first differ; a missing line is "". None when they are equal."""
    if a == b:
        return None
    lines_a, lines_b = a.split("\n"), b.split("\n")
    for number in range(max(len(lines_a), len(lines_b))):
        line_a = lines_a[number] if number < len(lines_a) else ""
        line_b = lines_b[number] if number < len(lines_b) else ""
        if line_a != line_b or number >= min(len(lines_a), len(lines_b)):
            return number + 1, line_a, line_b
    raise AssertionError("unequal texts with equal lines")  # split is lossless: unreachable
