"""Tasks: one record (Task) whatever the on-disk format, their images, and their verifiers.

Formats: Harbor (Terminal-Bench 2.0 and our generated suite) and Terminal-Bench v1.
"""

from obsspec.environments.tasks.load import load_task, load_tasks
from obsspec.environments.tasks.model import Task

__all__ = ["Task", "load_task", "load_tasks"]
