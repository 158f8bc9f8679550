"""Importing this package registers every family (each module uses @family); FAMILIES is
the registry, complete once this package is imported."""

from obsspec.environments.suite.families import (  # noqa: F401
    archive_repack,
    bulk_data,
    csv_json,
    env_config,
    file_organize,
    find_cleanup,
    git_bisect,
    log_analysis,
    make_build,
    permissions_fix,
    text_logs,
    unittest_fix,
    workflow_ci,
)
from obsspec.environments.suite.registry import FAMILIES

__all__ = ["FAMILIES"]
