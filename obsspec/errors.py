"""The base of every error obsspec raises on purpose.

    ObsspecError                    base; `retryable` says whether trying again may help,
    │                               `hint` says what the user can do about it, `details`
    │                               holds extra lines (a build log's tail) kept out of the
    │                               one-line message, `exit_code` is the CLI's exit code
    ├── Incomplete                  a command did part of what it was asked (exit code 3)
    ├── ConfigError                 a bad flag, config file or field (obsspec.config)
    ├── ModelError                  unknown model name, failed pull, bad model directory
    │   │                           (obsspec.models)
    │   └── ModelDownloadError      the package index did not deliver (retryable)
    ├── ClusterError                no Ray cluster at the address, or it lacks the GPUs asked
    ├── EngineError                 an inference engine failed to start or to answer
    │   │                           (obsspec.inference)
    │   └── ContextLengthError      the context no longer fits the model (not retryable:
    │                               the episode ends with that reason)
    ├── TrainingError               training cannot go on: a non-finite gradient or loss
    │                               (obsspec.train)
    ├── HubError                    a Hugging Face hub could not be used: offline, no
    │                               token, unreachable, or it refused (retryable; obsspec.hub)
    └── EnvironmentFailure          anything that touches a sandbox (environments.errors):
        ├── DockerUnavailable       no Docker daemon answers
        ├── ImageBuildError         an image could not be built (carries the log tail)
        └── SandboxError            a container could not be started or driven

Infrastructure failures are retryable; a bad name or a bad file is not. The CLI prints
`error: <message>` and, when there is one, `hint: <hint>`, and exits with `exit_code`; it
shows the details and a traceback only with `--debug`.
"""

from __future__ import annotations

from collections.abc import Sequence


class ObsspecError(Exception):
    """Base class: a failure obsspec anticipated and can explain in one line."""

    retryable: bool = False
    exit_code: int = 1

    def __init__(
        self, message: str, *, hint: str | None = None, details: Sequence[str] = ()
    ) -> None:
        super().__init__(message)
        self.hint = hint
        self.details = list(details)


class Incomplete(ObsspecError):
    """The command did part of what it was asked (e.g. collect: some episodes are missing);
    its output says what was done, and rerunning it may do the rest."""

    exit_code = 3


class ConfigError(ObsspecError):
    """A flag, config file or field is invalid; the message names which."""


class ModelError(ObsspecError):
    """A model name is unknown, a model could not be pulled, or a model directory is unusable."""


class ModelDownloadError(ModelError):
    """A model's files could not be downloaded; the network or the index may recover."""

    retryable = True


class ClusterError(ObsspecError):
    """The Ray cluster does not answer at the address given, or lacks what the run asks for;
    the same command fails again until the cluster or the settings change."""


class EngineError(ObsspecError):
    """An inference engine failed to start or to answer."""

    retryable = True


class ContextLengthError(EngineError):
    """The context no longer fits the engine: the episode ends; retrying cannot help."""

    retryable = False


class TrainingError(ObsspecError):
    """Training could not go on (a non-finite gradient or loss); the same settings fail again."""


class HubError(ObsspecError):
    """A Hugging Face hub could not be used (offline mode, no token, no connection, or it
    refused the request); the same command may work where the hub is reachable."""

    retryable = True
