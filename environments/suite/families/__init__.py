"""Importing this package registers every family (each module uses @family)."""

from environments.suite.families import (  # noqa: F401
    data,
    files,
)
