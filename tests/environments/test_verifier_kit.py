"""The verifier kit (environments.verifier_kit): what a verifier script fetches, read from its
text; the wheels a requirement set needs on each Python; when the kit applies; the verifier's
sequence with a kit, on the FakeSandbox. The kit on real Docker, offline, is
test_verifier_kit_docker.py and the corpus of test_real_tasks.py."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from obsspec.environments.errors import VerifierError
from obsspec.environments.fake_sandbox import FakeSandbox
from obsspec.environments.sandbox import NetworkPolicy
from obsspec.environments.tasks import load_task
from obsspec.environments.tasks.verifier import REWARD_DIR, verify
from obsspec.environments.verifier_kit.attach import kit_applies, with_verifier_kits
from obsspec.environments.verifier_kit.needs import needs_of_text, read_needs
from obsspec.environments.verifier_kit.plan import KitMode, KitPlan
from obsspec.environments.verifier_kit.prepare import unmet_dependencies
from obsspec.environments.verifier_kit.serve import KIT_ROOT, SERVED_LOG, kit_prefix
from obsspec.types import ExecResult

CORPUS = Path(__file__).parent.parent / "fixtures" / "real_tasks"

HARBOR_COMMON = """#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.7/install.sh | sh
source $HOME/.local/bin/env
uvx \\
  -p 3.13 \\
  -w pytest==8.4.1 \\
  --with pytest-json-ctrf==0.3.5 \\
  pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; fi  # a comment: uvx --with nope
"""


def test_harbor_common_shape_needs_uv_its_version_pytest_and_a_python():
    needs = needs_of_text(HARBOR_COMMON)
    assert needs.uv and needs.uv_version == "0.9.7"
    assert needs.requirements == ("pytest==8.4.1", "pytest-json-ctrf==0.3.5", "pytest")
    assert needs.python == "3.13" and needs.apt_packages == ("curl",)


def test_tbv1_shape_from_the_corpus():
    task = CORPUS / "rdf-team-graph"
    needs = read_needs(task / "run-tests.sh", task / "tests")
    assert needs.uv and needs.uv_version == "0.7.13"
    assert needs.requirements == ("pytest==8.4.1", "rdflib==7.1.4")


@pytest.mark.parametrize(
    ("script", "requirements"),
    [
        (
            "uvx --with 'a>=1,<2',b==2 --from black==24.1 black .",
            ("a>=1,<2", "b==2", "black==24.1"),
        ),
        ("uvx ruff@0.6.1 check", ("ruff==0.6.1",)),
        ("uv tool run -w pluggy pytest -x", ("pluggy", "pytest")),
        ("uv add pytest==8.4.1 --dev && uv run pytest", ("pytest==8.4.1",)),
        ("uv run --with requests==2.32.3 python t.py", ("requests==2.32.3",)),
        (
            "pip install -q --no-cache-dir numpy==2.1.0 'pandas[excel]'",
            ("numpy==2.1.0", "pandas[excel]"),
        ),
        ("python3 -m pip install --break-system-packages pytest", ("pytest",)),
        ("sudo -E pip3 install -U pytest==8.4.1 ./local-dir", ("pytest==8.4.1",)),
    ],
)
def test_the_packages_each_installer_names(script, requirements):
    assert needs_of_text(script).requirements == requirements


def test_nothing_to_serve_for_a_verifier_that_fetches_nothing():
    needs = needs_of_text("cd /app\npython3 -m pytest /tests/test_outputs.py -rA\n")
    assert not needs.served and needs.requirements == ()


def test_a_requirements_file_is_read_from_tests_and_another_is_unread(tmp_path):
    (tmp_path / "requirements.txt").write_text("# pins\npytest==8.4.1\n-r more.txt\n")
    (tmp_path / "more.txt").write_text("rdflib==7.1.4  # graphs\n")
    script = "pip install -r $TEST_DIR/requirements.txt\npip install -r /etc/reqs.txt\n"
    needs = needs_of_text(script, tmp_path)
    assert needs.requirements == ("pytest==8.4.1", "rdflib==7.1.4")
    assert needs.unread == ("/etc/reqs.txt",)


def test_a_requirements_file_outside_tests_is_never_read(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "secret.txt").write_text("leaked==1\n")
    needs = needs_of_text("pip install -r /tests/../secret.txt", tmp_path / "tests")
    assert needs.requirements == () and needs.unread == ("/tests/../secret.txt",)


def wheel(folder: Path, name: str, version: str, *requires: str) -> None:
    """A wheel whose METADATA declares `requires` (Requires-Dist lines)."""
    lines = [f"Name: {name}", f"Version: {version}"] + [f"Requires-Dist: {r}" for r in requires]
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}-{version}.dist-info/METADATA", "\n".join(lines) + "\n")


def test_dependencies_are_closed_for_the_target_python_not_this_one(tmp_path):
    """pip evaluates markers for the Python it runs on: the kit adds what an older one needs."""
    requires = [
        'exceptiongroup>=1; python_version < "3.11"',
        "pluggy<2,>=1.5",
        'colorama; sys_platform == "win32"',
        'pyyaml; extra == "yaml"',
    ]
    wheel(tmp_path, "pytest", "8.4.1", *requires)
    wheel(tmp_path, "pluggy", "1.6.0")
    assert unmet_dependencies(tmp_path, "3.10") == ["exceptiongroup>=1"]
    assert unmet_dependencies(tmp_path, "3.12") == []
    wheel(tmp_path, "exceptiongroup", "1.3.0")
    assert unmet_dependencies(tmp_path, "3.10") == []


def test_a_dependency_whose_version_does_not_fit_is_unmet(tmp_path):
    wheel(tmp_path, "a", "1.0", "b>=2")
    wheel(tmp_path, "b", "1.5")
    assert unmet_dependencies(tmp_path, "3.11") == ["b>=2"]


@pytest.mark.parametrize(
    ("mode", "network", "applies"),
    [
        (KitMode.auto, NetworkPolicy.none, True),
        (KitMode.auto, NetworkPolicy.verify, False),  # the verifier fetches for itself
        (KitMode.auto, NetworkPolicy.all, False),
        (KitMode.on, NetworkPolicy.verify, True),
        (KitMode.off, NetworkPolicy.none, False),
    ],
)
def test_when_the_kit_applies(mode, network, applies):
    assert kit_applies(mode, network) is applies


async def test_no_kit_is_prepared_where_it_does_not_apply(tmp_path):
    task = load_task(CORPUS / "word-census")
    for mode, network in [(KitMode.off, NetworkPolicy.none), (KitMode.auto, NetworkPolicy.verify)]:
        [same] = await with_verifier_kits([task], mode, network, tmp_path)
        assert same.verifier_kit is None
    assert not (tmp_path / "verifier-kit").exists()  # nothing fetched


def plan(staged: Path, **fields) -> KitPlan:
    return KitPlan(needs={}, uv_version="0.7.13", uv_dir=staged, staged=staged, **fields)


def test_the_prefix_puts_the_kit_first_and_uv_offline():
    prefix = kit_prefix(plan(Path("/k")))
    assert prefix.startswith(f'export PATH={KIT_ROOT}/bin:"$PATH" ')
    settings = ["UV_OFFLINE=1", f"UV_FIND_LINKS={KIT_ROOT}/wheels", "UV_PYTHON_DOWNLOADS=never"]
    for setting in [*settings, "PIP_NO_INDEX=1", "OBSSPEC_KIT_OFFLINE=1"]:
        assert setting in prefix
    assert "OBSSPEC_KIT_OFFLINE" not in kit_prefix(plan(Path("/k"), offline=False))
    assert 'place-uv.sh "$HOME/.local/bin"' in prefix


def kit_sandbox(output: str, reward: bytes, served: bytes) -> FakeSandbox:
    return FakeSandbox(
        lambda command, index: ExecResult(output, "", 0, 0.0),
        files={f"{REWARD_DIR}/reward.txt": reward, SERVED_LOG: served},
    )


async def test_the_kit_lands_after_the_tests_and_before_the_verifier(tmp_path):
    task = load_task(CORPUS / "word-census").model_copy(update={"verifier_kit": plan(tmp_path)})
    served = b"curl https://astral.sh/uv/0.7.13/install.sh: uv's installer, from the kit\n"
    sandbox = kit_sandbox("===== 3 passed in 0.1s =====\n", b"1", served)
    outcome = await verify(task, sandbox)
    assert KIT_ROOT in sandbox.removed  # a kit the agent planted is gone before ours lands
    assert sandbox.uploads == [(task.tests_dir, "/"), (tmp_path, "/")]
    assert sandbox.fresh_commands[0].startswith(f'export PATH={KIT_ROOT}/bin:"$PATH"')
    assert sandbox.fresh_commands[0].endswith("bash /tests/test.sh 2>&1")
    assert outcome.reward == 1.0
    assert outcome.kit["served"] == [served.decode().strip()] and outcome.kit["uv"] == "0.7.13"
    assert outcome.output.endswith(f"served: {served.decode().strip()}]")


async def test_a_package_the_kit_lacks_is_a_verifier_error_naming_it_not_a_0(tmp_path):
    task = load_task(CORPUS / "word-census").model_copy(update={"verifier_kit": plan(tmp_path)})
    missing = (
        "  × No solution found when resolving tool dependencies:\n"
        "  ╰─▶ Because pytest-json-ctrf was not found in the provided package locations and "
        "you require pytest-json-ctrf==0.3.5, we can conclude that your requirements are "
        "unsatisfiable.\n"
    )
    with pytest.raises(VerifierError, match="pytest-json-ctrf") as info:
        await verify(task, kit_sandbox(missing, b"0", b"uvx --with pytest-json-ctrf==0.3.5\n"))
    assert "verifier kit" in str(info.value) and info.value.kit["served"]


async def test_a_kit_staged_on_another_machine_is_an_error_naming_it(tmp_path):
    gone = tmp_path / "elsewhere"
    task = load_task(CORPUS / "word-census").model_copy(update={"verifier_kit": plan(gone)})
    with pytest.raises(VerifierError, match="not on this machine"):
        await verify(task, kit_sandbox("", b"1", b""))
