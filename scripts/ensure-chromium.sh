#!/bin/bash
# Make sure a headless Chromium is installed, for the `browser` tests (the profile's HTML report
# rendered in a real browser: obsspec/profile/browser.py). Idempotent: nothing to do when
# `chromium` is on PATH; otherwise installs Debian's `chromium` package (as root, or via sudo),
# refreshing the package lists only when the first install attempt fails.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
    echo "chromium already installed: $(command -v chromium)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "chromium is missing and this is not a Debian-like system: install Chromium by hand." >&2
    exit 1
fi
as_root=()
if [ "$(id -u)" != 0 ]; then as_root=(sudo); fi
install() {
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends chromium >/dev/null
}
if install 2>/dev/null; then
    echo "installed chromium with apt-get"
else
    "${as_root[@]}" apt-get update -q >/dev/null
    install
    echo "installed chromium with apt-get (after apt-get update)"
fi
