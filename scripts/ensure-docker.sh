#!/bin/bash
# Make sure a Docker daemon answers. As root on Debian, install docker.io (and debootstrap,
# which builds the base image offline) when missing, and start dockerd in the background.
set -euo pipefail

daemon_answers() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }

install_missing_packages() {
    local missing=()
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "installing ${missing[*]} from Debian's archive"
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            "${missing[@]}" >/dev/null
    fi
}

if daemon_answers; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then install_missing_packages; fi
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "No Docker daemon answers, and only root can start one here." >&2
    echo "Start it (e.g. 'sudo systemctl start docker' or 'sudo dockerd &'), make sure your user" >&2
    echo "may use it (the 'docker' group), then run make again." >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "No Docker daemon answers and this is not a Debian-like system: install Docker and start it." >&2
    exit 1
fi
# A machine image can carry /var/run/docker.pid from a daemon that no longer runs (seen in CI:
# "pid file found, ensure docker is not running"); dockerd refuses to start while the pid in it
# is alive, even when that process is not dockerd. Remove it unless it names a live dockerd.
clear_stale_pid_file() {
    local pidfile=/var/run/docker.pid pid
    [ -f "$pidfile" ] || return 0
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null || true)" = dockerd ]; then
        return 0
    fi
    echo "removing stale $pidfile (pid ${pid:-none} is not a running dockerd)"
    rm -f "$pidfile"
}

install_missing_packages
log=/var/log/obsspec-dockerd.log
if pgrep -x dockerd >/dev/null 2>&1; then
    echo "a dockerd is already running; waiting for it to answer"
else
    clear_stale_pid_file
    echo "starting dockerd in the background (log: $log)"
    # its own session: the daemon outlives the job (and process group) that started it
    setsid nohup dockerd >"$log" 2>&1 </dev/null &
fi
for _ in $(seq 1 60); do
    if daemon_answers; then
        echo "Docker daemon is up: $(docker info --format '{{.ServerVersion}}, {{.Driver}}')"
        exit 0
    fi
    sleep 1
done
echo "dockerd did not answer within 60 s; last lines of $log:" >&2
tail -n 20 "$log" >&2
exit 1
