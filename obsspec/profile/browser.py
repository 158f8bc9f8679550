"""Open an HTML page in headless Chromium and say what rendered: the check that a profile's
report.html shows every plot in a real browser, not only that the file exists.

    result = render_in_browser(Path("OUT/report.html"), screenshot=Path("shot.png"))
    result == {"images_loaded": 5, "images_total": 5, "console_errors": [], "counted": True}

One Chromium run (`--dump-dom`, and `--screenshot` when asked) with a throwaway profile
directory. The image counts are the `data-images-loaded` / `data-images-total` attributes the
page's own script writes on <body> after the load event (obsspec.profile.html_report); a page
without that script reports `counted: False`, 0 loaded and its <img> tags as the total.

Console errors come from Chromium's stderr log (`--enable-logging=stderr --v=0`). The Debian
build (156) logs every console message as `INFO:CONSOLE:<line>] "<message>", source: ...`
whatever its level, so console.error cannot be told from console.log there; a line counts as
an error when it is logged at ERROR level, or its message is an uncaught exception, mentions
an error, or is a Content-Security-Policy violation (the report's CSP turns any external
resource into one). A console.error whose text says none of that is missed.

Chromium comes from `scripts/ensure-chromium.sh` (Debian's `chromium` package).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from obsspec.errors import ObsspecError

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--no-first-run",
    "--hide-scrollbars",
    "--virtual-time-budget=5000",
    "--enable-logging=stderr",
    "--v=0",
)
SCREENSHOT_WINDOW = "--window-size=1280,4000"
CONSOLE_LINE = re.compile(r":(?P<level>[A-Z]+):CONSOLE[^\]]*\]\s*(?P<message>.*)")
ERROR_MESSAGE = re.compile(r"uncaught|error|content security policy", re.IGNORECASE)


def find_chromium() -> str | None:
    """The path of a Chromium (or Chrome) binary on PATH, or None."""
    for name in CANDIDATES:
        if path := shutil.which(name):
            return path
    return None


def render_in_browser(html: Path, screenshot: Path | None = None, timeout_s: float = 60) -> dict:
    """Load `html` in headless Chromium; count its images and collect its console errors.

    With `screenshot`, a 1280x4000 PNG of the page is written there too.
    """
    binary = find_chromium()
    if binary is None:
        raise ObsspecError(
            "chromium is not installed; cannot render the report in a browser",
            hint="run scripts/ensure-chromium.sh (installs Debian's `chromium` package)",
        )
    html = Path(html).resolve()
    if not html.is_file():
        raise ObsspecError(f"{html}: no such HTML file to render")
    with tempfile.TemporaryDirectory(prefix="obsspec-chromium-") as profile:
        command = [binary, *FLAGS, f"--user-data-dir={profile}", "--dump-dom"]
        if screenshot is not None:
            screenshot = Path(screenshot).resolve()
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            command += [SCREENSHOT_WINDOW, f"--screenshot={screenshot}"]
        dom, log = _run([*command, html.as_uri()], timeout_s)
    loaded, total, counted = image_counts(dom)
    return {
        "images_loaded": loaded,
        "images_total": total,
        "console_errors": console_errors(log),
        "counted": counted,
    }


def image_counts(dom: str) -> tuple[int, int, bool]:
    """(loaded, total, counted) from the dumped DOM's <body> data attributes."""
    body = re.search(r"<body\b[^>]*>", dom)
    attributes = body.group(0) if body else ""
    loaded = re.search(r'\bdata-images-loaded="(\d+)"', attributes)
    total = re.search(r'\bdata-images-total="(\d+)"', attributes)
    if loaded and total:
        return int(loaded.group(1)), int(total.group(1)), True
    return 0, len(re.findall(r"<img\b", dom)), False


def console_errors(log: str) -> list[str]:
    """The console messages in Chromium's stderr log that are errors (see the module doc)."""
    errors = []
    for line in log.splitlines():
        match = CONSOLE_LINE.search(line)
        if match and (match["level"] == "ERROR" or ERROR_MESSAGE.search(match["message"])):
            errors.append(match["message"])
    return errors


def _run(command: list[str], timeout_s: float) -> tuple[str, str]:
    """(stdout, stderr) of Chromium. Its own session, so a timeout ends the browser's child
    processes too (Debian's launcher is a shell script that may not exec)."""
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise ObsspecError(
            f"chromium did not finish rendering within {timeout_s:g} s",
            hint="a page that never finishes loading, or a machine under heavy load",
        ) from e
    if process.returncode != 0:
        tail = "\n".join(err.splitlines()[-10:])
        raise ObsspecError(f"chromium exited with {process.returncode}:\n{tail}")
    return out, err
