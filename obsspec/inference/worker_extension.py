"""The class vLLM mixes into each of its worker processes (`worker_extension_cls`), and
obsspec's one moment inside such a process: vLLM imports this module while it builds the
worker, before the worker opens its message queues, so what must be set before those queues
exist is set here, at import (obsspec.inference.worker_spin). The engine's parent never needs
to import it: it names the class by WORKER_EXTENSION (obsspec.inference.weight_loading)."""

from __future__ import annotations

from obsspec.inference.weight_loading import WeightBucketReceiver
from obsspec.inference.worker_spin import apply_from_environment, worker_spin

apply_from_environment()


class ObsspecWorker(WeightBucketReceiver):
    """What obsspec adds to vLLM's workers: weights loaded from memory (the base class), and a
    way to ask a worker what its queue's idle spin is."""

    def obsspec_worker_spin_s(self) -> float:
        return worker_spin()
