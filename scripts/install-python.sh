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

if [ ! -x "$venv/bin/python" ]; then
    python=$(pick_python)
    echo "creating $venv with $("$python" --version)"
    "$python" -m venv "$venv"
fi
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
