"""The verifier kit on the host: uv and the wheels verifiers pin, fetched once and cached.

    plan = prepare_kit(read_needs(task.verifier_script, task.tests_dir), cache_dir)

Layout, under `<cache>/verifier-kit/` (beside the models):

    uv/<version>/uv, uvx       from the `uv` wheel on the package index (this machine's
                               platform: the sandboxes run on its kernel)
    uv/newest                  the version an unpinned installer URL gets, fixed at first use
    wheels/*.whl               one flat wheelhouse
    sets/<key>.json            a requirement set -> the wheels it resolved to

Everything is fetched with this interpreter's pip, from the index its configuration names
(pip.conf, PIP_INDEX_URL: a mirror goes there). Wheels are fetched (`pip download
--only-binary=:all:`) once per Python in PYTHONS, so that the verifier's own Python
(Debian's 3.11, Ubuntu's 3.12, ...) finds every dependency its markers ask for: pip
evaluates a dependency's markers for the Python it runs on, not for `--python-version`, so
each set is closed over the wheels' Requires-Dist for that Python (pytest's
`exceptiongroup; python_version < "3.11"`). What cannot be fetched is a problem on the plan,
shown before the run: the verifier that needs it then fails with a VerifierError naming it.
Everything is written to a temporary directory first and renamed into place, so a killed
prepare leaves nothing half made; callers hold the node lock (environments.node_lock).
"""

from __future__ import annotations

import email.parser
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from obsspec.environments.verifier_kit.needs import KitNeeds
from obsspec.environments.verifier_kit.plan import KitPlan

KIT_DIR = "verifier-kit"
PYTHONS = ("3.9", "3.10", "3.11", "3.12", "3.13")
PIP_TIMEOUT_S = 600
MAX_CLOSURE_ROUNDS = 5
UV_WHEEL = re.compile(r"^uv-(?P<version>[^-]+)-")


def kit_root(cache_dir: Path) -> Path:
    return cache_dir / KIT_DIR


def prepare_kit(needs: KitNeeds, cache_dir: Path, *, offline: bool = True) -> KitPlan:
    """What the kit serves a verifier with these needs, fetched where not cached yet."""
    root = kit_root(cache_dir)
    problems: list[str] = []
    uv_version = uv_dir = None
    if needs.uv:
        try:
            uv_version = needs.uv_version or newest_uv(root)
            uv_dir = ensure_uv(root, uv_version)
        except KitFetchError as e:
            problems.append(str(e))
    wheels: tuple[Path, ...] = ()
    if needs.requirements:
        wheels, missing = ensure_wheels(root, needs.requirements)
        problems += missing
    notes = []
    if needs.python:
        notes.append(
            f"Python {needs.python} (uv -p): the kit does not download Pythons; the verifier "
            "runs only if the sandbox has it"
        )
    return KitPlan(
        needs=needs.as_dict(),
        uv_version=uv_version,
        uv_dir=uv_dir,
        wheels=wheels,
        offline=offline,
        problems=tuple(problems),
        notes=tuple(notes),
    )


class KitFetchError(Exception):
    pass


def pip_download(args: Sequence[str], dest: Path) -> None:
    """`pip download ARGS -d dest`; a failure is a KitFetchError with pip's last lines."""
    command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check"]
    command += ["--no-input", "--only-binary=:all:", "-d", str(dest), *args]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise KitFetchError(
            f"pip download {' '.join(args)}: no answer in {PIP_TIMEOUT_S} s"
        ) from None
    if done.returncode != 0:
        tail = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
        why = "; ".join(tail[-2:]) or done.stderr.strip()[-300:]
        raise KitFetchError(f"pip download {' '.join(args)}: {why}")


def newest_uv(root: Path) -> str:
    """The uv an unpinned installer URL gets: the newest on the index at first use, then
    the same one every time (uv/newest), so that runs stay comparable."""
    pinned = root / "uv" / "newest"
    if pinned.is_file():
        return pinned.read_text().strip()
    with tempfile.TemporaryDirectory(dir=ensure_dir(root)) as tmp:
        pip_download(["--no-deps", "uv"], Path(tmp))
        version = wheel_version(Path(tmp))
        write_atomic(pinned, version + "\n")
    return version


def wheel_version(folder: Path) -> str:
    for wheel in folder.glob("uv-*.whl"):
        match = UV_WHEEL.match(wheel.name)
        if match:
            return match["version"]
    raise KitFetchError(f"pip download uv saved no uv wheel in {folder}")


def ensure_uv(root: Path, version: str) -> Path:
    """uv/<version>/ with the uv and uvx binaries of uv's wheel for this platform."""
    folder = root / "uv" / version
    if (folder / "uv").is_file() and (folder / "uvx").is_file():
        return folder
    with tempfile.TemporaryDirectory(dir=ensure_dir(root)) as tmp:
        pip_download(["--no-deps", f"uv=={version}"], Path(tmp))
        wheels = list(Path(tmp).glob("uv-*.whl"))
        if not wheels:
            raise KitFetchError(f"pip download uv=={version} saved no wheel")
        staged = Path(tmp) / "bin"
        staged.mkdir()
        extract_binaries(wheels[0], staged, ("uv", "uvx"))
        folder.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
        staged.rename(folder)
    return folder


def extract_binaries(wheel: Path, dest: Path, names: Sequence[str]) -> None:
    """The wheel's scripts `names` (in its .data/scripts/), executable, into dest."""
    with zipfile.ZipFile(wheel) as archive:
        members = {Path(m).name: m for m in archive.namelist() if "/scripts/" in m}
        for name in names:
            if name not in members:
                raise KitFetchError(f"{wheel.name} has no {name} binary")
            target = dest / name
            with archive.open(members[name]) as source, open(target, "wb") as out:
                shutil.copyfileobj(source, out)
            target.chmod(0o755)


def ensure_wheels(root: Path, requirements: Sequence[str]) -> tuple[tuple[Path, ...], list[str]]:
    """The wheels of a requirement set for every Python in PYTHONS, and what is missing
    (a set no Python could resolve). Recorded under sets/ once fetched (a Python that could
    not resolve it is in the record's errors); a failure is not recorded, so that a later
    run tries again."""
    key = set_key(requirements)
    record_path = root / "sets" / f"{key}.json"
    wheel_dir = root / "wheels"
    if record_path.is_file():
        record = json.loads(record_path.read_text())
        wheels = tuple(wheel_dir / name for name in record["wheels"])
        if all(w.is_file() for w in wheels):
            return wheels, []
    names: set[str] = set()
    errors: list[str] = []
    with tempfile.TemporaryDirectory(dir=ensure_dir(root)) as tmp:
        for python in PYTHONS:
            staged = Path(tmp) / python
            try:
                fetch_for_python(requirements, python, staged)
            except KitFetchError as e:
                errors.append(f"Python {python}: {e}")
                continue
            for wheel in staged.glob("*.whl"):
                names.add(wheel.name)
                if not (wheel_dir / wheel.name).is_file():
                    ensure_dir(wheel_dir)
                    os.replace(wheel, wheel_dir / wheel.name)
    if not names:  # not recorded: the next run tries again (the index may answer then)
        return (), [f"{', '.join(requirements)}: {errors[-1]}"]
    write_atomic(
        record_path,
        json.dumps({"requirements": list(requirements), "wheels": sorted(names),
                    "errors": errors}, indent=1),
    )  # fmt: skip
    return tuple(wheel_dir / n for n in sorted(names)), []


def fetch_for_python(requirements: Sequence[str], python: str, staged: Path) -> None:
    """Every wheel `requirements` need under `python`, into staged."""
    pip_download(["--python-version", python, *requirements], staged)
    for _ in range(MAX_CLOSURE_ROUNDS):
        wanted = unmet_dependencies(staged, python)
        if not wanted:
            return
        pip_download(["--python-version", python, *wanted], staged)
    raise KitFetchError(f"the dependencies of {', '.join(requirements)} did not settle")


def unmet_dependencies(folder: Path, python: str) -> list[str]:
    """The dependencies the wheels in folder declare for `python` that no wheel there meets."""
    have = {}
    for wheel in folder.glob("*.whl"):
        name, version = wheel.name.split("-")[:2]
        have[canonicalize_name(name)] = version
    environment = {"python_version": python, "python_full_version": f"{python}.0", "extra": ""}
    wanted = set()
    for wheel in folder.glob("*.whl"):
        for line in requires_dist(wheel):
            requirement = Requirement(line)
            if requirement.marker and not requirement.marker.evaluate(environment):
                continue
            version = have.get(canonicalize_name(requirement.name))
            if version is None or not requirement.specifier.contains(version, prereleases=True):
                requirement.marker = None
                wanted.add(str(requirement))
    return sorted(wanted)


def requires_dist(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = email.parser.BytesParser().parsebytes(archive.read(metadata))
    return message.get_all("Requires-Dist") or []


def set_key(requirements: Sequence[str]) -> str:
    text = json.dumps([sorted(requirements), PYTHONS])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_atomic(path: Path, text: str) -> None:
    ensure_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
