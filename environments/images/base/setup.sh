#!/bin/bash
# Runs once inside the base image build. Installs the toolset and pins the shell environment.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

apt-get update -q
apt-get install -y -q --no-install-recommends \
    bash coreutils findutils grep sed gawk procps python3 git make gcc libc6-dev \
    tar gzip diffutils less ca-certificates
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log

# Time zone and shell defaults every login and non-login bash picks up.
ln -sf /usr/share/zoneinfo/Etc/UTC /etc/localtime
echo "Etc/UTC" > /etc/timezone
cat > /etc/profile.d/obsspec.sh <<'PROFILE'
umask 022
export LANG=C.UTF-8 LC_ALL=C.UTF-8 TZ=UTC TERM=dumb NO_COLOR=1 PAGER=cat GIT_PAGER=cat
PROFILE
# No colour aliases, no prompt noise in the persistent shell.
sed -i '/alias .*--color/d' /root/.bashrc 2>/dev/null || true
git config --system init.defaultBranch main
git config --system advice.detachedHead false
git config --system user.name "obsspec"
git config --system user.email "agent@obsspec.invalid"
git config --system core.pager cat
