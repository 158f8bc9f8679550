"""The documentation cannot rot silently: README.md stays short, every relative link in
README.md, ARCHITECTURE.md and docs/*.md names a file that exists, docs/configuration.md lists
the keys the config models really have, and the dependency direction ARCHITECTURE.md states
holds for every import in the code."""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) outside code: the target up to the closing parenthesis or a title.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)[^)]*\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def relative_links(page: Path) -> list[str]:
    text = INLINE_CODE.sub("", FENCE.sub("", page.read_text()))
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def test_readme_is_short():
    # About 300 lines of set-up and commands, plus what issue 24 asks be shown whole: the CI
    # workflow file (56 lines) and the embedding example.
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 366, f"README.md has {len(lines)} lines; move detail into docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_name_existing_files_without_anchors(page):
    links = relative_links(page)
    assert page.name != "README.md" or links, "README.md should link to docs/"
    for target in links:
        # An anchor breaks silently when a heading is reworded: link to the page instead.
        assert "#" not in target, f"{page.name}: link {target!r} has an anchor"
        assert (page.parent / target).exists(), f"{page.name}: link {target!r}: no such file"


def test_link_check_sees_links_and_skips_code():
    page = ROOT / "docs" / "configuration.md"
    assert "datasets.md" in relative_links(page)
    assert relative_links(ROOT / "README.md").count("docs/collect.md") >= 1


# --- docs/configuration.md against the config models ---------------------------------------


def config_tables() -> dict[str, set[str]]:
    """Every pipeline table and sub-table, with its leaf keys, from the pydantic models."""
    from obsspec.profile.config import ProfileConfig
    from obsspec.rl.config import RLConfig
    from obsspec.rollout.config import CollectConfig
    from obsspec.sft.config import SFTConfig
    from obsspec.world_model.config import TrainWMConfig

    tables: dict[str, set[str]] = {}

    def walk(model: type[BaseModel], name: str) -> None:
        tables[name] = set()
        for key, field in model.model_fields.items():
            nested = [
                a
                for a in (field.annotation, *typing.get_args(field.annotation))
                if isinstance(a, type) and issubclass(a, BaseModel)
            ]
            if nested:
                walk(nested[0], f"{name}.{key}")
            else:
                tables[name].add(key)

    for name, model in [
        ("collect", CollectConfig),
        ("train_wm", TrainWMConfig),
        ("sft", SFTConfig),
        ("profile", ProfileConfig),
        ("rl", RLConfig),
    ]:
        walk(model, name)
    return tables


def documented_tables() -> dict[str, set[str] | str]:
    """The rows of the key table: `[table]` -> its keys, or the table it says it is like."""
    rows: dict[str, set[str] | str] = {}
    for line in (ROOT / "docs" / "configuration.md").read_text().splitlines():
        match = re.match(r"^\| `\[([a-z_.]+)\]` \| (.*) \|$", line)
        if match:
            like = re.match(r"^as `\[([a-z_.]+)\]`", match.group(2))
            keys = set(re.findall(r"`([a-z_]+)`", match.group(2)))
            rows[match.group(1)] = like.group(1) if like else keys
    return rows


def test_configuration_page_lists_every_key_of_every_table():
    documented = documented_tables()
    for table, keys in config_tables().items():
        assert table in documented, f"docs/configuration.md lacks the table [{table}]"
        listed = documented[table]
        if isinstance(listed, str):
            listed = documented[listed]
        assert listed == keys, (
            f"docs/configuration.md [{table}]: missing {sorted(keys - listed)}, "
            f"not in the config {sorted(listed - keys)}"
        )
    assert set(documented) == set(config_tables()), "docs/configuration.md lists a stale table"


# --- the dependency direction of ARCHITECTURE.md --------------------------------------------

# Top to bottom; a module may import its own layer or any layer below it, never one above.
LAYERS = [
    (
        "obsspec.cli",
        "bench",
        "obsspec.api",
    ),  # obsspec.api: the facade for embedding, as high as the CLI
    ("obsspec.rl", "obsspec.profile", "obsspec.sft"),
    ("obsspec.rollout", "obsspec.doctor"),
    ("obsspec.world_model",),
    ("obsspec.runs", "obsspec.train"),
    ("obsspec.speculation",),
    ("obsspec.agent",),
    ("obsspec.inference", "obsspec.models"),
    ("obsspec.environments",),
    ("obsspec", "obsspec.config", "obsspec.errors", "obsspec.types", "obsspec.trajectory"),
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}
FOLDERS = ("obsspec", "environments", "world_model", "cli", "bench")
# The folders cli/, environments/ and world_model/ install as obsspec.cli, ... (pyproject.toml).
INSTALLED_AS = {"cli": "obsspec.cli", "environments": "obsspec.environments",
                "world_model": "obsspec.world_model"}  # fmt: skip


def unit(module: str) -> str:
    """The layer unit of a module: obsspec's subpackage or module, else its top package."""
    parts = module.split(".")
    if parts[0] == "obsspec" and len(parts) > 1 and f"obsspec.{parts[1]}" in RANK:
        return f"obsspec.{parts[1]}"
    return parts[0]


def imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from obsspec import runs` imports the module obsspec.runs.
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return [name for name in names if name.split(".")[0] in ("obsspec", "bench")]


def test_imports_follow_the_layers():
    upward = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            source = unit(".".join((INSTALLED_AS.get(folder, folder), *parts[1:])))
            assert source in RANK, f"{path}: a new package; place it in LAYERS and ARCHITECTURE.md"
            for name in imports(path):
                target = unit(name)
                if RANK[target] < RANK[source]:
                    upward.append(f"{path.relative_to(ROOT)} ({source}) imports {name}")
    assert upward == [], "imports against ARCHITECTURE.md's layers:\n" + "\n".join(upward)


def test_the_layer_check_sees_an_upward_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from obsspec.rl.driver import run_rl\nfrom obsspec import runs\n")
    assert [unit(n) for n in imports(module)] == ["obsspec.rl", "obsspec.runs"]
    assert RANK["obsspec.rl"] < RANK["obsspec.environments"]
