"""The profile's plots and HTML report from hand-made rows: valid PNGs, a self-contained page
that escapes what users wrote, edge cases that draw less instead of crashing, and (marker
`browser`) every plot rendering in headless Chromium."""

from __future__ import annotations

import time

import pytest

from obsspec.errors import ObsspecError
from obsspec.profile import browser
from obsspec.profile.browser import console_errors, render_in_browser
from obsspec.profile.figures import ArmEpisodes, profile_figures
from obsspec.profile.html_report import write_html
from obsspec.profile.plots import PLOT_NAMES, Span, turn_spans, write_plots
from tests.profile.test_figures import record, row, turn

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EVIL = "<script>alert(1)</script>"
MATHTEXT = r"grep-$\bogus$-task"  # not a formula: must not reach matplotlib's mathtext


def timed(command: str, gen_s: float, exec_s: float, predict_s: float = 0.0, **fields) -> dict:
    """A command turn; `fields` may carry the recorded *_start_s."""
    speculation = record(matched=True) if predict_s else None
    return turn(command, exec_s, predict_s, speculation) | {"gen_s": gen_s} | fields


def named(task_id: str, episode_index: int, agent_s: float, turns: list[dict], **done) -> dict:
    """A row with an id; `done` fields go on its final "done" turn."""
    episode = row(agent_s, turns) | {"task_id": task_id, "episode_index": episode_index}
    episode["turns"][-1] |= {"gen_s": 0.2, **done}
    return episode


def episodes() -> list[ArmEpisodes]:
    """Two episodes: the first with recorded start times (overlap) in the speculative arms,
    the second without; task ids a user wrote (HTML, and dollar signs for matplotlib)."""
    seq = [timed("make", 1.0, 2.0), timed("ls", 0.5, 0.1)]
    overlapped = [
        timed("make", 1.0, 2.0, 0.5, gen_start_s=0.0, exec_start_s=1.0, predict_start_s=1.0),
        timed("ls", 0.5, 0.1, 0.05, gen_start_s=1.6, exec_start_s=3.0, predict_start_s=3.0),
    ]
    return [
        ArmEpisodes(
            seq=named(EVIL, 0, 3.8, seq),
            spec=named(EVIL, 0, 3.3, overlapped, gen_start_s=3.1),
            oracle=named(EVIL, 0, 3.2, overlapped, gen_start_s=3.0),
        ),
        ArmEpisodes(
            seq=named(MATHTEXT, 1, 5.0, [timed("grep x f", 2.0, 2.5)]),
            spec=named(MATHTEXT, 1, 5.2, [timed("grep x f", 2.0, 2.5, 0.4)]),
            oracle=named(MATHTEXT, 1, 4.0, [timed("grep x f", 2.0, 2.5, 0.01)]),
        ),
    ]


def full_report(eps: list[ArmEpisodes]) -> dict:
    """The report as `obsspec profile` writes it (obsspec.profile.run)."""
    lost = [{"task_id": EVIL, "episode_index": 3, "arm": "spec", "error": f"SandboxError: {EVIL}"}]
    report = {**profile_figures(eps), "lost_episodes": lost, "tasks": 2}
    report["config"] = {"tasks": f"/tmp/{EVIL}", "seed": 0}
    return report


def test_plots_are_valid_pngs(tmp_path):
    eps = episodes()
    plots = write_plots(tmp_path, eps, full_report(eps))
    assert set(plots) == set(PLOT_NAMES)
    for path in plots.values():
        assert path.parent == tmp_path / "plots"
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000


def test_html_is_self_contained_and_escaped(tmp_path):
    eps = episodes()
    report = full_report(eps)
    plots = write_plots(tmp_path, eps, report)
    text = write_html(tmp_path, report, plots).read_text()
    assert 'src="http' not in text and 'href="http' not in text
    assert "<link" not in text and "@import" not in text
    assert text.count('src="data:image/png;base64,') == len(plots)
    assert EVIL not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    low, high = report["latency_reduction_ci95"]
    assert f"[{low:.1%}, {high:.1%}]" in text  # intervals as percentages
    assert f"{report['latency_reduction']:.1%}" in text


def test_timeline_uses_recorded_starts_and_reconstructs_missing_ones():
    eps = episodes()
    recorded, measured = turn_spans(eps[0].spec)
    assert measured
    assert Span(1, "generation", 1.6, 0.5) in recorded  # generated while `make` ran
    assert Span(0, "prediction", 1.0, 0.5) in recorded
    rebuilt, measured = turn_spans(eps[0].seq)
    assert not measured
    starts = [(s.phase, s.start) for s in rebuilt]
    assert starts == [
        ("generation", 0.0),
        ("execution", 1.0),
        ("generation", 3.0),
        ("execution", 3.5),
        ("generation", 3.6),  # the "done" reply
    ]
    predicted, _ = turn_spans(eps[1].spec)
    assert Span(0, "prediction", 2.0, 0.4) in predicted  # placed at its command's start


def test_nothing_to_draw_does_not_crash(tmp_path):
    report = {**profile_figures([]), "lost_episodes": [], "tasks": 0, "config": None}
    assert write_plots(tmp_path, [], report) == {}
    assert not (tmp_path / "plots").exists()
    text = write_html(tmp_path, report, {}).read_text()
    assert "n/a" in text and "<img" not in text

    done_only = named("t", 0, 1.0, [])
    no_turns = named("u", 0, 0.0, []) | {"turns": []}
    eps = [ArmEpisodes(done_only, done_only, done_only), ArmEpisodes(no_turns, no_turns, no_turns)]
    report = {**profile_figures(eps), "lost_episodes": [], "tasks": 2, "config": {}}
    assert report["by_family"] == {}
    plots = write_plots(tmp_path, eps, report)
    assert set(plots) == set(PLOT_NAMES) - {"match_by_family"}
    text = write_html(tmp_path, report, plots).read_text()
    assert "Not drawn (nothing to plot): Match rate by command family" in text


def test_console_errors_are_picked_from_chromium_log():
    log = "\n".join(
        [
            '[1:1:1203/0.1:INFO:CONSOLE:5] "plain log", source: file:///r.html (5)',
            '[1:1:1203/0.1:INFO:CONSOLE:6] "Uncaught ReferenceError: f is not defined", '
            "source: file:///r.html (6)",
            "[1:1:1203/0.1:ERROR:dbus/bus.cc:405] Failed to connect to the bus",
            "[1:1:1203/0.1:INFO:CONSOLE:7] \"Loading the image 'http://x/y.png' violates the "
            'following Content Security Policy directive", source: file:///r.html (7)',
        ]
    )
    errors = console_errors(log)
    assert len(errors) == 2
    assert errors[0].startswith('"Uncaught ReferenceError')
    assert "Content Security Policy" in errors[1]


@pytest.mark.browser
def test_every_plot_renders_in_chromium(tmp_path, chromium):
    eps = episodes()
    report = full_report(eps)
    plots = write_plots(tmp_path, eps, report)
    html = write_html(tmp_path, report, plots)
    started = time.monotonic()
    result = render_in_browser(html, screenshot=tmp_path / "shot.png", timeout_s=60)
    assert time.monotonic() - started < 60
    assert result["counted"]
    assert result["images_loaded"] == result["images_total"] == len(plots) == len(PLOT_NAMES)
    assert result["console_errors"] == []
    assert (tmp_path / "shot.png").read_bytes().startswith(PNG_MAGIC)


def test_missing_chromium_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(browser, "find_chromium", lambda: None)
    page = tmp_path / "page.html"
    page.write_text("<p>hi</p>")
    with pytest.raises(ObsspecError, match="chromium is not installed") as raised:
        render_in_browser(page)
    assert "ensure-chromium.sh" in raised.value.hint


@pytest.mark.browser
def test_an_external_image_is_caught(tmp_path, chromium):
    """The checks above can fail: a reference to the network is blocked by the page's CSP,
    logged as a console error, and its image does not count as loaded."""
    eps = episodes()
    report = full_report(eps)
    html = write_html(tmp_path, report, write_plots(tmp_path, eps, report))
    text = html.read_text().replace("</body>", '<img src="http://example.invalid/x.png"></body>')
    html.write_text(text)
    result = render_in_browser(html, timeout_s=60)
    assert result["images_total"] == len(PLOT_NAMES) + 1
    assert result["images_loaded"] == len(PLOT_NAMES)
    assert any("Content Security Policy" in error for error in result["console_errors"])
