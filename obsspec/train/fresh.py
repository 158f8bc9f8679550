"""Run a function in a freshly spawned process, relaying its progress and its result.

    result = call_in_fresh_process(evaluate, (config, models_dir), {"progress": on_progress})

Why: vLLM started in a process that has just trained a model (its torch threads and memory
in use) stalled on CPU, with no request finishing in ten minutes; in a fresh process the same
evaluation takes five. So evaluations after training run here.

The target is called as `target(*args, emit)`; `emit(kind, *payload)` calls
`handlers[kind](*payload)` in this process. Its return value is returned; an ObsspecError it
raises is raised here, anything else as an EngineError naming it.
"""

from __future__ import annotations

import multiprocessing
import queue
from collections.abc import Callable
from typing import Any

from obsspec.errors import EngineError, ObsspecError

_RESULT, _ERROR = "__result__", "__error__"


def call_in_fresh_process(
    target: Callable[..., Any], args: tuple, handlers: dict[str, Callable[..., None]]
) -> Any:
    context = multiprocessing.get_context("spawn")
    events = context.Queue()
    child = context.Process(target=_child, args=(target, args, events))
    child.start()
    try:
        while True:
            try:
                kind, *payload = events.get(timeout=1.0)
            except queue.Empty:
                if not child.is_alive():
                    raise EngineError(
                        f"the {target.__name__} process died (exit code {child.exitcode})"
                    ) from None
                continue
            if kind == _RESULT:
                return payload[0]
            if kind == _ERROR:
                raise payload[0]
            handlers[kind](*payload)
    finally:
        if child.is_alive():
            child.terminate()
        child.join()


def _child(target: Callable[..., Any], args: tuple, events) -> None:
    def emit(kind: str, *payload) -> None:
        events.put((kind, *payload))

    try:
        result = target(*args, emit)
    except ObsspecError as e:
        events.put((_ERROR, e))
    except Exception as e:  # anything else: reported to the parent, which raises it
        events.put((_ERROR, EngineError(f"{target.__name__} failed: {type(e).__name__}: {e}")))
    else:
        events.put((_RESULT, result))
