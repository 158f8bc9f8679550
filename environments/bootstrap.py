"""An offline Debian root image: debootstrap from the machine's own Debian mirror + docker import.

Used when no container registry is reachable. The mirror is read from apt's sources on this
machine (never hard-coded), so the same code works behind any mirror or proxy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from obsspec.environments.build import local_image
from obsspec.environments.errors import ImageBuildError

APT_DIR = Path("/etc/apt")
BOOTSTRAP_REPO = "obsspec/bootstrap"


def debian_mirror(apt_dir: Path = APT_DIR) -> str:
    """The first main-archive Debian URI in apt's sources (one-line or deb822 format)."""
    for uri, suites in apt_sources(apt_dir):
        main_suite = any(not s.endswith(("-security", "-updates", "-backports")) for s in suites)
        if main_suite and "security" not in uri:
            return uri.rstrip("/")
    raise ImageBuildError(
        f"no Debian archive found in {apt_dir}/sources.list or {apt_dir}/sources.list.d",
        hint="configure an apt source for the Debian archive, or make a registry reachable",
    )


def apt_sources(apt_dir: Path) -> list[tuple[str, list[str]]]:
    """(uri, suites) of every `deb` entry, in apt's own order."""
    entries: list[tuple[str, list[str]]] = []
    files = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*"))]
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".sources":
            entries += parse_deb822(text)
        elif path.suffix == ".list" or path.name == "sources.list":
            entries += parse_one_line(text)
    return entries


def parse_one_line(text: str) -> list[tuple[str, list[str]]]:
    entries = []
    for line in text.splitlines():
        words = [w for w in line.split("#", 1)[0].split() if w]
        if len(words) >= 3 and words[0] == "deb":
            if words[1].startswith("["):  # options such as [signed-by=...]
                while words and not words[0].endswith("]"):
                    words.pop(0)
                words = ["deb", *words[1:]]
            if len(words) >= 3:
                entries.append((words[1], [words[2]]))
    return entries


def parse_deb822(text: str) -> list[tuple[str, list[str]]]:
    entries = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[0].isspace():
                continue
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.strip()
        if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
            suites = fields.get("suites", "").split()
            entries += [(uri, suites) for uri in fields.get("uris", "").split()]
    return entries


def bootstrap_tag(mirror: str, suite: str) -> str:
    key = hashlib.sha256(f"minbase|{suite}|{mirror}".encode()).hexdigest()[:12]
    return f"{BOOTSTRAP_REPO}:{suite}-{key}"


def bootstrap_image(client, suite: str, on_log: Callable[[str], None]) -> str:
    """A minbase Debian image made offline; cached by (mirror, suite). Returns its tag."""
    mirror = debian_mirror()
    tag = bootstrap_tag(mirror, suite)
    if local_image(client, tag) is not None:
        on_log(f"using cached bootstrap image {tag}")
        return tag
    check_can_debootstrap()
    workdir = Path(tempfile.mkdtemp(prefix="obsspec-debootstrap-"))
    try:
        rootfs = workdir / "rootfs"
        on_log(f"debootstrap --variant=minbase {suite} from the apt mirror (about a minute)")
        run_logged(["debootstrap", "--variant=minbase", suite, str(rootfs), mirror], on_log)
        archive = workdir / "rootfs.tar"
        on_log("packing the root file system")
        run_logged(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(archive), "."], on_log)
        on_log(f"docker import -> {tag}")
        repo, version = tag.split(":")
        client.api.import_image_from_file(str(archive), repository=repo, tag=version)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return tag


def check_can_debootstrap() -> None:
    if shutil.which("debootstrap") is None:
        raise ImageBuildError(
            "debootstrap is not installed, and no container registry is reachable",
            hint="install it (as root: apt-get install -y debootstrap; `make setup` does this)",
        )
    if os.geteuid() != 0:
        raise ImageBuildError(
            "debootstrap needs root to build the offline base image",
            hint="run `obsspec env build` as root once, or make a registry reachable",
        )


def run_logged(cmd: list[str], on_log: Callable[[str], None]) -> None:
    """Run a command, feeding its output lines to on_log; ImageBuildError with the tail."""
    tail: list[str] = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout or []:
        line = line.rstrip()
        tail = [*tail[-19:], line]
        on_log(line)
    if proc.wait() != 0:
        raise ImageBuildError(
            f"`{' '.join(cmd[:2])}` failed (exit {proc.returncode})", log_tail=tail
        )
