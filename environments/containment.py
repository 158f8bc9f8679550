"""What a command timeout leaves behind: nothing. Every process in the sandbox is killed.

Killing only the shell's descendants (the first design) misses what escaped the tree: a
double fork (`(sleep 1000 &)`), `setsid`, `nohup ... &`, and every fork bomb child whose
parent died. Those are reparented to PID 1 (docker-init) and kept running: later commands
then time out falsely, and their observations fill with `fork: retry: Resource temporarily
unavailable`. So on a timeout KILL_ALL, run in a second exec, freezes (SIGSTOP) and then
kills (SIGKILL) every process of the container except:

- PID 1 (docker-init) and the entrypoint it started with the container: without them the
  container stops. The entrypoint is init's oldest child, found by a scan before the first
  round; not by how soon after init it started (the first design spared children of init
  started within a second of it: under load the entrypoint itself started later than that,
  was killed, and the container stopped under the verifier that came next);
- processes whose parent is outside the container (parent pid 0): what `docker exec`
  started, i.e. the persistent shell, this killer, and any other shell of the driver.

and repeats until a round finds none (a fork bomb forks while a round runs). Each process is
frozen the moment the scan finds it, so it forks no more and stops taking the CPU quota the
killer shares with it (the exec runs in the container's cgroup: beside 60 spinning processes
a scan that froze nothing until its end took seconds); all are killed at the end of the
round, so no slot of the pids limit frees up while a round runs. The persistent shell is
frozen first (it starts nothing new) and resumed at the end, or killed when it is replaced.

It uses bash builtins only (a glob over /proc, `read`, `kill`, $EPOCHREALTIME): when a fork
bomb has used up the pids limit nothing can fork, but `docker exec` still starts a process
(joining a cgroup is not a fork; runc does fail now and then, and the caller retries), and
this one never needs another. It gives up after a time budget and says how many processes
were left; the caller then restarts the container, which ends every process for sure (files
are kept).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# $1: keep | kill (what happens to the shell), $2: the shell's pid, $3: budget in seconds.
# Prints "killed=N left=M". Builtins only: see the module docstring.
KILL_ALL = r"""
mode=$1 shell=$2
((shell > 1)) || shell=  # never `kill 0` (our own process group)
now() { t=${EPOCHREALTIME/[.,]/}; }
pstat() {  # state, ppid and start time (clock ticks) of pid $1; fails if it is gone
  { read -r line < "/proc/$1/stat"; } 2>/dev/null || return 1
  rest=${line##*) }; f=($rest); state=${f[0]} ppid=${f[1]} start=${f[19]}
}
now; end=$((t + $3 * 1000000))
if [[ -n $shell ]]; then  # first of all: the shell starts nothing more
  if [[ $mode == kill ]]; then kill -KILL "$shell"; else kill -STOP "$shell"; fi 2>/dev/null
fi
entry= entry_start=
for d in /proc/[0-9]*; do  # the entrypoint: init's oldest child (an orphan is younger)
  p=${d#/proc/}
  pstat "$p" && [[ $ppid == 1 && $state != [ZX] ]] || continue
  if [[ -z $entry ]] || ((start < entry_start || (start == entry_start && p < entry))); then
    entry=$p entry_start=$start
  fi
done
declare -A seen=()
left=0
while :; do
  victims=()
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [[ $p == 1 || $p == "$$" || $p == "$entry" || $p == "$shell" ]] && continue
    pstat "$p" || continue
    [[ $state == [ZX] || $ppid == 0 ]] && continue
    kill -STOP "$p" 2>/dev/null  # at once: frozen, it forks no more and takes no CPU from us
    victims+=("$p")
  done
  ((${#victims[@]})) || break
  kill -KILL "${victims[@]}" 2>/dev/null
  for p in "${victims[@]}"; do seen[$p]=1; done
  now
  if ((t > end)); then left=${#victims[@]}; break; fi  # still finding some: give up
done
[[ $mode == keep && -n $shell ]] && kill -CONT "$shell" 2>/dev/null
echo "killed=${#seen[@]} left=$left"
"""
_REPORT = re.compile(rb"killed=(\d+) left=(\d+)")


@dataclass(frozen=True)
class KillReport:
    killed: int  # processes killed
    left: int  # processes still alive when the budget ran out


def kill_all_command(shell_pid: int, *, keep_shell: bool, budget_s: int) -> list[str]:
    """The argv of a `docker exec` that kills every process but init, entrypoint and execs."""
    mode = "keep" if keep_shell else "kill"
    return ["bash", "-c", KILL_ALL, "obsspec-kill-all", mode, str(shell_pid), str(budget_s)]


def parse_report(output: bytes) -> KillReport | None:
    """The killer's report, or None when it did not finish (it printed nothing)."""
    match = _REPORT.search(output)
    if match is None:
        return None
    return KillReport(int(match.group(1)), int(match.group(2)))
