"""file-organize: sort a camera-card dump into a dated library.

The task: camera cards were copied into /srv/import; file the photos by month and the videos
by year under /srv/photos and /srv/videos with lowercase extensions, keep one copy of each
duplicate, delete the junk. The check regenerates every expected file from its seed and wants
exactly those bytes in both trees, and nothing left in /srv/import.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable

from obsspec.environments.suite.families._common import _random_date, _spec_task
from obsspec.environments.suite.registry import GeneratedTask, family


def _unique_names(rng: random.Random, n: int, make: Callable[[random.Random], str]) -> list[str]:
    """n distinct names from make(rng), in the order drawn."""
    names: list[str] = []
    seen: set[str] = set()
    while len(names) < n:
        name = make(rng)
        if name not in seen:
            seen.add(name)
            names.append(name)
    return names


# Content of a media file depends on its stem only, so a duplicate has identical bytes.
ORGANIZE_SETUP = r"""import json, os, random
with open("spec.json") as f:
    SPEC = json.load(f)
for rel, key, size in SPEC["files"]:
    path = os.path.join("/srv/import", rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(random.Random(key).randbytes(size))
"""

ORGANIZE_CHECK = r"""
for root in ("/srv/photos", "/srv/videos"):
    expected = {rel: random.Random(key).randbytes(size)
                for rel, (key, size) in SPEC[root].items()}
    expect_tree(root, expected)
left = sorted(files_under("/srv/import")) if os.path.isdir("/srv/import") else []
if left:
    fail(f"/srv/import still holds files, e.g. {left[:3]}")
"""

CAMERA_BRANDS = ["CANON", "NIKON", "MSDCF", "OLYMP", "FUJI"]


def _media_stem(rng: random.Random, prefix: str) -> str:
    day = _random_date(rng, dt.date(2019, 1, 1), dt.date(2024, 12, 31))
    clock = f"{rng.randrange(24):02d}{rng.randrange(60):02d}{rng.randrange(60):02d}"
    return f"{prefix}_{day:%Y%m%d}_{clock}"


@family("file-organize")
def make_file_organize(rng: random.Random) -> GeneratedTask:
    """Camera cards dumped into /srv/import: file photos by month and videos by year, drop the
    duplicates and the junk. Slow part: a per-file shell loop over several hundred files."""
    photo_prefix = rng.choice(["IMG", "DSC", "PIC"])
    nested = rng.random() < 0.5  # photos in YYYY/MM or in YYYY/YYYY-MM
    folders = [
        f"card{c}/DCIM/{100 + k}{rng.choice(CAMERA_BRANDS)}"
        for c in range(1, rng.randint(2, 4) + 1)
        for k in range(rng.randint(1, 2))
    ]
    photos = _unique_names(rng, rng.randint(250, 300), lambda r: _media_stem(r, photo_prefix))
    videos = _unique_names(rng, rng.randint(200, 240), lambda r: _media_stem(r, "VID"))

    files: list[list] = []  # [path under /srv/import, content key, size]
    expected: dict[str, dict[str, list]] = {"/srv/photos": {}, "/srv/videos": {}}
    for stems, kind, exts, sizes in (
        (photos, "photos", [".JPG", ".jpg", ".jpeg", ".JPG"], (8_000, 60_000)),
        (videos, "videos", [".MP4", ".mp4"], (40_000, 160_000)),
    ):
        for stem in stems:
            size = rng.randint(*sizes)
            copies = 2 if rng.random() < 0.1 else 1  # imported from two cards
            for folder in rng.sample(folders, copies):
                files.append([f"{folder}/{stem}{rng.choice(exts)}", stem, size])
            year, month = stem[4:8], stem[8:10]
            if kind == "videos":
                rel = f"{year}/{stem}.mp4"
                if rng.random() < 0.7:  # camera thumbnail sidecar
                    files.append([f"{folder}/{stem}.THM", stem + ".thm", 3_000])
            else:
                rel = f"{year}/{f'{year}-{month}' if nested else month}/{stem}.jpg"
            expected[f"/srv/{kind}"][rel] = [stem, size]
    for folder in folders:
        for junk in (".DS_Store", "Thumbs.db"):
            if rng.random() < 0.5:
                files.append([f"{folder}/{junk}", folder + junk, rng.randint(200, 6_000)])
    files.sort()

    month_dir = "<YYYY>/<YYYY>-<MM>" if nested else "<YYYY>/<MM>"
    example = f"{photo_prefix}_20230412_101502"
    instruction = f"""\
Several camera memory cards were copied into `/srv/import` (folders `card*/DCIM/*`). Organise
them into a library:

- Every photo (extension `.jpg` or `.jpeg`, in any letter case) must end up in
  `/srv/photos/{month_dir}/`, where the year and month come from the date in the file name
  (`{example}.JPG` was taken on 2023-04-12, so it belongs in
  `/srv/photos/{"2023/2023-04" if nested else "2023/04"}/`). Name it after the original file
  with the extension normalised to lowercase `.jpg`: `{example}.jpg`.
- Every video (extension `.mp4`, any case, e.g. `VID_20230412_101502.MP4`) must end up in
  `/srv/videos/<YYYY>/`, named with a lowercase `.mp4` extension.
- Some files were imported twice (the same name on two cards, identical content): the library
  must hold exactly one copy of each.
- Everything else in the dump (`.THM` thumbnails, `.DS_Store`, `Thumbs.db`) is junk: delete
  it. When you are done, no files may be left under `/srv/import` (empty folders are fine).

`/srv/photos` and `/srv/videos` must contain nothing but the photos and videos.
"""
    photo_dir = "${b:4:4}/${b:4:4}-${b:8:2}" if nested else "${b:4:4}/${b:8:2}"
    solution = [
        "find /srv/import -type f | sed 's/.*\\.//' | sort | uniq -c",
        "find /srv/import -type f \\( -iname '*.thm' -o -name .DS_Store -o -name Thumbs.db \\)"
        " -delete",
        "find /srv/import -type f \\( -iname '*.jpg' -o -iname '*.jpeg' \\) | while read -r f;"
        f' do b=$(basename "$f"); d=/srv/photos/{photo_dir}; mkdir -p "$d";'
        ' mv "$f" "$d/${b%.*}.jpg"; done',
        "find /srv/import -type f -iname '*.mp4' | while read -r f; do b=$(basename \"$f\");"
        ' d=/srv/videos/${b:4:4}; mkdir -p "$d"; mv "$f" "$d/${b%.*}.mp4"; done',
        "find /srv/import -type f | wc -l; find /srv/photos /srv/videos -type f | wc -l",
    ]
    return _spec_task(
        instruction, solution, ORGANIZE_SETUP, ORGANIZE_CHECK, {"files": files}, expected
    )
