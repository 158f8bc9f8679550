"""What the agent's shell fixes so that the same commands print the same in every run.

A world model must predict each observation exactly; an output that differs between two runs
of the same commands is one no model can predict (`obsspec env determinism` measures how many
do). On by default for every task; a task turns it off with `[environment] deterministic =
false` in task.toml (SandboxLimits.deterministic). It applies to the agent's persistent shell
only; the verifier's fresh shell runs as the task wrote it. A variable the image's ENV or the
task's env sets keeps its value.

Fixed here:
- git's author and committer dates: a commit, a revert, a stash or a merge made from the same
  tree gets the same hash in every run (`git log` shows FIXED_DATE; so `git log --since=...`
  relative to today finds none of them). Identities come from the base image's system git
  config; a task's own config, or the agent's, still wins;
- Python's string hashing (PYTHONHASHSEED=0): a set of strings prints in one order;
- bash's $RANDOM in the persistent shell, seeded when each shell starts. Subshells and child
  shells seed their own (bash does, from the clock and the pid).
Fixed with or without it (environments/shell.py, sandbox.py): hostname, locale, time zone,
umask, no prompt, no colour, no pager.

Not fixed, and why:
- The wall clock (`date`, `ls -l` times). Faking it takes an LD_PRELOAD library such as
  libfaketime, and Debian's (0.9.10) breaks ordinary programs: with the monotonic clock faked,
  Python's timed waits (threading.Event.wait, queue.get, Lock.acquire with a timeout) never
  return; with it left real, time.sleep fails with EINVAL. A clock that moves only
  CLOCK_REALTIME breaks `find -mtime` and make against the image's own file times, and TLS
  certificates reject a date in the past. Measured on the built-in suite, no observation
  prints the clock but git's dates (fixed above) and the dates of the files a task's image
  build wrote (generated tasks fix those: environments/suite/generate.py).
- Process ids, `mktemp` names, $SRANDOM and durations (test timings): kernel-given.
"""

from __future__ import annotations

from collections.abc import Iterable

FIXED_DATE = "2024-01-01T00:00:00+00:00"
RANDOM_SEED = 1

DETERMINISTIC_ENV = {
    "GIT_AUTHOR_DATE": FIXED_DATE,
    "GIT_COMMITTER_DATE": FIXED_DATE,
    "PYTHONHASHSEED": "0",
}


def shell_environment(
    base: dict[str, str], deterministic: bool, configured: Iterable[str] = ()
) -> dict[str, str]:
    """The agent's shell environment: base (SHELL_ENV) and, when on, DETERMINISTIC_ENV but
    for the variables the container already sets (`configured`: the image's ENV and the
    task's env), which win: an exec's environment would override them."""
    if not deterministic:
        return dict(base)
    keep = set(configured)
    return {**base, **{k: v for k, v in DETERMINISTIC_ENV.items() if k not in keep}}


def configured_names(container_attrs: dict) -> list[str]:
    """Names of the variables a container starts with (its image's and its own), from
    `docker inspect`."""
    entries = (container_attrs.get("Config") or {}).get("Env") or []
    return [entry.split("=", 1)[0] for entry in entries]


def shell_startup(deterministic: bool) -> str:
    """Bash run once as each agent shell starts (before its first command)."""
    return f"RANDOM={RANDOM_SEED}; " if deterministic else ""
