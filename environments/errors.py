"""Errors of the environments package (all under obsspec.errors.ObsspecError).

EnvironmentFailure          base of everything here; infrastructure, so retryable
├── DockerUnavailable       no Docker daemon answers (hint: how to start one)
├── ImageBuildError         an image build failed; carries the last lines of its log
│   └── MissingImageError   a base image is neither here nor pullable (not retryable)
└── SandboxError            a container could not be created, started or driven
    └── DiskLimitExceeded   the sandbox wrote past its disk limit and was stopped (not
                            retryable: an outcome of what ran in it, see disk_limit.py)
"""

from __future__ import annotations

from obsspec.errors import ObsspecError


class EnvironmentFailure(ObsspecError):
    retryable = True


class DockerUnavailable(EnvironmentFailure):
    pass


class ImageBuildError(EnvironmentFailure):
    """The message is one line; the last lines of the build log are `log_tail` (also the
    error's `details`, which the CLI shows with --debug)."""

    def __init__(self, message: str, *, log_tail: list[str] | None = None, hint: str | None = None):
        super().__init__(message, hint=hint, details=log_tail or [])

    @property
    def log_tail(self) -> list[str]:
        return self.details

    def with_log(self) -> str:
        """The message, then the log tail indented (for reports that keep the whole story)."""
        return "\n  ".join([str(self), *self.log_tail])


class MissingImageError(ImageBuildError):
    """A task's base image is not on this machine and cannot be pulled: retrying cannot
    help, an image map can (environments.tasks.image_map)."""

    retryable = False


class SandboxError(EnvironmentFailure):
    pass


class DiskLimitExceeded(SandboxError):
    """The sandbox's writable layer grew past its disk limit: the container was removed at
    once (freeing the disk). Retrying cannot help; the episode ends with `disk_limit`."""

    retryable = False


class VerifierError(EnvironmentFailure):
    """The verifier ran but produced no usable reward: a broken task, never a zero reward."""

    retryable = False

    def __init__(self, message: str, *, output: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.output = output  # the tail of what the verifier printed, when it ran
        self.kit: dict | None = None  # what the verifier kit held and served, if it served


class TaskFormatError(EnvironmentFailure):
    retryable = False

    def __init__(
        self, path, message: str, *, field: str | None = None, hint: str | None = None
    ) -> None:
        self.path = path
        self.field = field
        where = f"{path}: field '{field}'" if field else str(path)
        super().__init__(f"{where}: {message}", hint=hint)
