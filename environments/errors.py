"""Errors of the environments package (all under obsspec.errors.ObsspecError).

EnvironmentFailure          base of everything here; infrastructure, so retryable
├── DockerUnavailable       no Docker daemon answers (hint: how to start one)
├── ImageBuildError         an image build failed; carries the last lines of its log
│   └── MissingImageError   a base image is neither here nor pullable (not retryable)
└── SandboxError            a container could not be created, started or driven
"""

from __future__ import annotations

from obsspec.errors import ObsspecError


class EnvironmentFailure(ObsspecError):
    retryable = True


class DockerUnavailable(EnvironmentFailure):
    pass


class ImageBuildError(EnvironmentFailure):
    def __init__(self, message: str, *, log_tail: list[str] | None = None, hint: str | None = None):
        self.log_tail = log_tail or []
        if self.log_tail:
            message = message + "\n  " + "\n  ".join(self.log_tail)
        super().__init__(message, hint=hint)


class MissingImageError(ImageBuildError):
    """A task's base image is not on this machine and cannot be pulled: retrying cannot
    help, an image map can (environments.tasks.image_map)."""

    retryable = False


class SandboxError(EnvironmentFailure):
    pass


class VerifierError(EnvironmentFailure):
    """The verifier ran but produced no usable reward: a broken task, never a zero reward."""

    retryable = False

    def __init__(self, message: str, *, output: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.output = output  # the tail of what the verifier printed, when it ran


class TaskFormatError(EnvironmentFailure):
    retryable = False

    def __init__(self, path, message: str, *, field: str | None = None) -> None:
        self.path = path
        self.field = field
        where = f"{path}: field '{field}'" if field else str(path)
        super().__init__(f"{where}: {message}")
