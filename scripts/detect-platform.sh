#!/bin/bash
# Prints `gpu` when this machine has an NVIDIA GPU its driver answers for, else `cpu`: the
# inference extra `make setup` installs. nvidia-smi on PATH is one sign, not a requirement:
# a container may mount only the driver's devices and library (then /proc/driver/nvidia and
# /dev/nvidiaN are there, nvidia-smi is not). OBSSPEC_NVIDIA_SMI, _PROC and OBSSPEC_DEV_DIR point
# the checks elsewhere (tests).
smi=${OBSSPEC_NVIDIA_SMI:-nvidia-smi}
proc=${OBSSPEC_NVIDIA_PROC:-/proc/driver/nvidia}
dev=${OBSSPEC_DEV_DIR:-/dev}
if command -v "$smi" >/dev/null 2>&1 && "$smi" -L >/dev/null 2>&1; then
    echo gpu
elif compgen -G "$proc/gpus/*" >/dev/null || compgen -G "$dev/nvidia[0-9]*" >/dev/null; then
    echo gpu
else
    echo cpu
fi
