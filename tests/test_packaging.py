"""One installed top-level package: the repository's cli/, environments/ and world_model/
folders install as obsspec.cli, obsspec.environments and obsspec.world_model."""

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[1]
INSTALLED_AS = {
    "obsspec": "obsspec",
    "cli": "obsspec.cli",
    "environments": "obsspec.environments",
    "world_model": "obsspec.world_model",
}
OLD = ("cli", "environments", "world_model")


def test_pyproject_lists_every_package_folder():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {
        ".".join((INSTALLED_AS[top], *d.relative_to(ROOT / top).parts))
        for top in INSTALLED_AS
        for d in [ROOT / top, *(ROOT / top).rglob("*")]
        if (d / "__init__.py").is_file()
    }
    assert set(setuptools["packages"]) == folders
    mapped = {name: folder for folder, name in INSTALLED_AS.items() if folder != "obsspec"}
    assert setuptools["package-dir"] == mapped


def test_no_module_imports_the_old_top_level_names():
    """Code importing `environments` would load a second copy of the module under another
    name (where the repository is on sys.path), or fail where obsspec is installed."""
    old = []
    for path in ROOT.rglob("*.py"):
        if {".venv", "fixtures", ".git"} & set(path.relative_to(ROOT).parts):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            old += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in OLD]
    assert old == []


def test_installed_obsspec_has_no_other_top_level_package(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = (
        "import importlib.util as u, obsspec.cli.app, obsspec.environments, obsspec.world_model;"
        f"print([n for n in {OLD!r} if u.find_spec(n) is not None])"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
