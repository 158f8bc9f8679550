"""A profile as one self-contained HTML page: the figures, the breakdowns and the plots.

    html_path = write_html(out_dir, report, plots)      # OUT/report.html

The page needs nothing but itself: the plots are embedded as base64 `data:` URIs, the CSS is
inline, and a Content-Security-Policy forbids every other source, so the file can be mailed,
attached to an issue or opened offline, and a stray external reference fails loudly (the
browser logs a CSP violation) instead of quietly depending on the network. Every text that
comes from the run (task ids, errors, config values, family names) goes through html.escape.

A tiny inline script counts, once the window has loaded, the images that decoded and writes
`data-images-loaded` and `data-images-total` on <body>, so a headless browser can check that
every plot rendered (obsspec.profile.browser).
"""

from __future__ import annotations

import base64
import json
from html import escape
from pathlib import Path

from obsspec.profile.levels import waves_first
from obsspec.profile.plots import PLOT_NAMES

REPORT_HTML = "report.html"

# key, label, format, how to read it
HEADLINE = (
    ("latency_reduction", "Latency reduction", "pct", "1 - sum(spec agent s) / sum(seq agent s)"),
    (
        "latency_reduction_median",
        "Latency reduction, median",
        "pct",
        "median of per-episode reductions",
    ),
    (
        "oracle_latency_reduction",
        "Oracle latency reduction",
        "pct",
        "the ceiling: a perfect, instant predictor",
    ),
    (
        "oracle_latency_reduction_median",
        "Oracle latency reduction, median",
        "pct",
        "median of per-episode reductions",
    ),
    (
        "oracle_fraction",
        "Share of the oracle's saving",
        "pct",
        "latency reduction / oracle latency reduction",
    ),
    (
        "match_rate_wm",
        "Match rate (world model)",
        "pct",
        "the world model's first guess exact / commands it answered (the paper's figure)",
    ),
    (
        "match_rate_wm_any",
        "Match rate (world model, any guess)",
        "pct",
        "any of the world model's guesses exact / commands it answered (breadth > 1)",
    ),
    (
        "match_rate_attempted",
        "Match rate (attempted)",
        "pct",
        "exact guesses (cache, rules or world model; any guess) / commands the gate let through",
    ),
    (
        "match_rate_used",
        "Match rate (used)",
        "pct",
        "exact guesses / guesses that arrived before the real output (the reference's figure)",
    ),
    ("exec_won_rate", "Execution won", "pct", "real output first / attempted"),
    (
        "predictor_speedup_p50",
        "Predictor speed-up (p50)",
        "times",
        "median of command seconds / prediction seconds, every source",
    ),
    (
        "wm_speedup_p50",
        "World model speed-up (p50)",
        "times",
        "the same over the world model's answers alone",
    ),
    (
        "tokens_wasted_fraction",
        "Tokens wasted",
        "pct",
        "discarded policy tokens / committed policy tokens",
    ),
    (
        "lossless_violations",
        "Lossless violations",
        "int",
        "kept replies whose context was not the real one; must be 0",
    ),
)

BREAKDOWN_COLUMNS = (
    ("command_turns", "command turns", "int"),
    ("attempted", "attempted", "int"),
    ("matched", "matched", "int"),
    ("match_rate_wm", "match rate (world model)", "pct"),
    ("match_rate_attempted", "match rate (attempted)", "pct"),
    ("match_rate_used", "match rate (used)", "pct"),
    ("exec_won", "execution won", "int"),
    ("mean_exec_s", "mean command time", "seconds"),
)
PHASE_COLUMNS = (
    ("episodes", "episodes", "int"),
    ("agent_s_mean", "agent time (mean)", "seconds"),
    ("sandbox_start_s_mean", "sandbox start (mean)", "seconds"),
    ("verifier_s_mean", "verifier (mean)", "seconds"),
)

CAPTIONS = {
    "latency_by_episode": (
        "Agent time per episode",
        "Each group is one episode (task#episode index) run in the three arms. Agent time is "
        "the turns only (sandbox start and verifier are in the phases table). A blue bar "
        "below the grey one is time speculation saved; the green bar is the floor a perfect "
        "predictor would reach.",
    ),
    "latency_cdf": (
        "Distribution of agent time",
        "For each arm, the fraction of episodes (y) that finished their turns within x "
        "seconds. A curve further left is faster; the gap between the blue and grey curves "
        "at a given height is the saving at that quantile.",
    ),
    "timeline": (
        "One episode, turn by turn",
        "The episode speculation shortened most, one lane per arm, in three rows: blue "
        "(top), the policy generating a reply; orange (middle), the command running; green "
        "hatched (bottom), the predictor guessing the command's output. Bars stacked one "
        "above the other ran at the same time; the black tick is where the episode's turns "
        "ended. An arm marked * has no recorded start times, so its phases are drawn back "
        "to back and any overlap is lost.",
    ),
    "match_by_family": (
        "Match rate by command family",
        "For the speculative arm, the share of predicted outputs that equalled the real "
        "output exactly, per command family (the program a command runs). Labels give "
        "matched/attempted; families the gate never let the predictor try are marked "
        "'not attempted'.",
    ),
    "savings": (
        "Time saved vs time possible",
        "Left: per episode, seconds the speculative arm saved over the sequential one (blue) "
        "next to what the oracle saved (green); a bar below zero is an episode speculation "
        "slowed down. Right: the same, pooled over all episodes, with the share of the "
        "sequential time.",
    ),
}

CAPTIONS["by_concurrency"] = (
    "By concurrency",
    "The same episodes played with N episodes at once in each arm (sharing the policy "
    "engine, as in an RL step). Left: the latency reduction and the oracle's ceiling per "
    "level; right: the fraction of the ceiling reached. Bars are bootstrap 95% intervals.",
)
LEVEL_COLUMNS = (
    ("episodes", "episodes", "int"),
    ("latency_reduction", "latency reduction", "pct"),
    ("latency_reduction_ci95", "95% interval", "interval"),
    ("oracle_latency_reduction", "oracle reduction", "pct"),
    ("oracle_latency_reduction_ci95", "95% interval", "interval"),
    ("oracle_fraction", "share of the oracle's", "pct"),
    ("oracle_fraction_ci95", "95% interval", "interval"),
    ("match_rate_attempted", "match rate (attempted)", "pct"),
    ("seq_agent_s_mean", "sequential s/episode", "seconds"),
    ("spec_agent_s_mean", "speculative s/episode", "seconds"),
    ("at_once", "at once (seq/spec/oracle)", "text"),
    ("waves_first", "waves seq/spec first", "text"),
    ("arms_dir", "datasets", "text"),
)

CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1200px; color: #222;
       padding: 0 1rem; line-height: 1.4; }
h1 { margin-bottom: 0.2rem; } h2 { margin-top: 2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.9rem; }
th, td { border: 1px solid #ddd; padding: 0.3rem 0.6rem; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f4f4f4; } .muted { color: #777; } .alert { color: #b00020; font-weight: 600; }
figure { margin: 1.5rem 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #444; font-size: 0.9rem; max-width: 60rem; }
pre { background: #f7f7f7; padding: 0.8rem; overflow-x: auto; font-size: 0.8rem; }
"""

SCRIPT = """
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var loaded = images.filter(function (img) { return img.complete && img.naturalWidth > 0; });
  document.body.dataset.imagesLoaded = String(loaded.length);
  document.body.dataset.imagesTotal = String(images.length);
});
"""

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"


def write_html(out_dir: Path, report: dict, plots: dict[str, Path]) -> Path:
    """out_dir/report.html, self-contained; returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / REPORT_HTML
    path.write_text(render_html(report, plots), encoding="utf-8")
    return path


def render_html(report: dict, plots: dict[str, Path]) -> str:
    body = "\n".join(
        [
            _summary(report),
            _section("Headline figures", _headline(report)),
            _levels(report),
            _section("By command family", _breakdown(report.get("by_family") or {}, "family")),
            _section("By prediction source", _breakdown(report.get("by_source") or {}, "source")),
            _section("Phases", _phases(report.get("phases") or {})),
            _lost(report.get("lost_episodes") or []),
            _section("Plots", _plots(plots)),
            _config(report.get("config")),
        ]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        "<title>obsspec profile</title>\n"
        f"<style>{CSS}</style>\n</head>\n<body>\n{body}\n<script>{SCRIPT}</script>\n"
        "</body></html>\n"
    )


def _summary(report: dict) -> str:
    lost = len(report.get("lost_episodes") or [])
    parts = [f"{report.get('episodes', 0)} episodes completed in all three arms"]
    if report.get("tasks") is not None:
        parts.append(f"{report['tasks']} tasks")
    parts.append(f"{lost} episodes lost")
    html = f'<h1>obsspec profile</h1>\n<p class="muted">{escape(", ".join(parts))}</p>'
    if report.get("lossless_violations"):
        html += (
            f'\n<p class="alert">{int(report["lossless_violations"])} lossless violation(s): '
            "a kept reply was generated on a context that was not the real one.</p>"
        )
    return html + _order_notes(report)


def _headline(report: dict) -> str:
    rows = []
    for key, label, kind, meaning in HEADLINE:
        ci = report.get(f"{key}_ci95")
        interval = f"[{_format(ci[0], kind)}, {_format(ci[1], kind)}]" if ci else ""
        cls = (
            ' class="num alert"'
            if key == "lossless_violations" and report.get(key)
            else ' class="num"'
        )
        rows.append(
            f"<tr><td>{escape(label)}</td><td{cls}>{escape(_format(report.get(key), kind))}</td>"
            f'<td class="num">{escape(interval)}</td><td class="muted">{escape(meaning)}</td></tr>'
        )
    header = "<tr><th>figure</th><th>value</th><th>95% interval</th><th>what it is</th></tr>"
    note = (
        '<p class="muted">Rates are pooled (ratios of sums). Intervals are bootstrap 95% '
        "percentile intervals over episodes (none with fewer than two episodes).</p>"
    )
    return f"<table>{header}{''.join(rows)}</table>{note}"


def _levels(report: dict) -> str:
    """The figures of each concurrency level; the headline above is the first level's."""
    levels = report.get("by_concurrency") or {}
    if not levels:
        return ""
    rows = {
        f"{n} at once": figures
        | {
            "seq_agent_s_mean": figures["phases"]["seq"]["agent_s_mean"],
            "spec_agent_s_mean": figures["phases"]["spec"]["agent_s_mean"],
            "at_once": "/".join(str(v) for v in (figures.get("episodes_at_once") or {}).values()),
            "waves_first": waves_first(figures.get("arm_orders")),
        }
        for n, figures in levels.items()
    }
    note = (
        f'<p class="muted">The headline figures above are those of {report.get("concurrency", 1)} '
        "episode(s) at once. Each level plays the same episodes, in waves of N episodes at "
        "once per arm; 'at once' is the most episodes an arm actually ran together. The "
        "sequential and speculative arms swap places from one wave to the next (the oracle, "
        "which replays the sequential arm, runs last).</p>"
    )
    return _section("By concurrency", _table("level", rows, LEVEL_COLUMNS) + note)


def _order_notes(report: dict) -> str:
    """An alert per level whose waves all ran seq and spec in one order."""
    levels = report.get("by_concurrency") or {str(report.get("concurrency", 1)): report}
    notes = [
        f"{n} at once: {f['arm_order_note']}" for n, f in levels.items() if f.get("arm_order_note")
    ]
    return "".join(f'\n<p class="alert">{escape(note)}</p>' for note in notes)


def _breakdown(groups: dict[str, dict], what: str) -> str:
    if not groups:
        return '<p class="muted">No command turns.</p>'
    return _table(what, groups, BREAKDOWN_COLUMNS)


def _phases(phases: dict[str, dict]) -> str:
    if not phases:
        return '<p class="muted">No phases recorded.</p>'
    return _table("arm", phases, PHASE_COLUMNS)


def _table(first: str, groups: dict[str, dict], columns) -> str:
    header = f"<tr><th>{escape(first)}</th>"
    header += "".join(f"<th>{escape(label)}</th>" for _, label, _ in columns) + "</tr>"
    rows = [
        f"<tr><td>{escape(str(name))}</td>"
        + "".join(
            f'<td class="num">{escape(_format(values.get(key), kind))}</td>'
            for key, _, kind in columns
        )
        + "</tr>"
        for name, values in groups.items()
    ]
    return f"<table>{header}{''.join(rows)}</table>"


def _lost(lost: list[dict]) -> str:
    if not lost:
        return ""
    keys = ("task_id", "episode_index", "arm", "error")
    header = "<tr>" + "".join(f"<th>{k}</th>" for k in keys) + "</tr>"
    rows = [
        "<tr>" + "".join(f"<td>{escape(str(item.get(k, '')))}</td>" for k in keys) + "</tr>"
        for item in lost
    ]
    intro = (
        '<p class="muted">Episodes an arm could not complete after its retries; they are left '
        "out of every arm's figures.</p>"
    )
    return _section(
        f"Lost episodes ({len(lost)})", f"{intro}<table>{header}{''.join(rows)}</table>"
    )


def _plots(plots: dict[str, Path]) -> str:
    figures = [_figure(name, path) for name, path in plots.items()]
    left_out = [CAPTIONS[name][0] for name in PLOT_NAMES if name in CAPTIONS and name not in plots]
    if left_out:
        figures.append(
            f'<p class="muted">Not drawn (nothing to plot): {escape(", ".join(left_out))}.</p>'
        )
    return "\n".join(figures)


def _figure(name: str, path: Path) -> str:
    title, caption = CAPTIONS.get(name, (name, ""))
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return (
        f'<figure id="plot-{escape(name)}"><h3>{escape(title)}</h3>'
        f'<img alt="{escape(title)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{escape(caption)}</figcaption></figure>"
    )


def _config(config: dict | None) -> str:
    if config is None:
        return ""
    text = json.dumps(config, indent=2, default=str)
    return (
        "<h2>Configuration</h2><details><summary>Profile config (as resolved)</summary>"
        f"<pre>{escape(text)}</pre></details>"
    )


def _section(title: str, content: str) -> str:
    return f"<h2>{escape(title)}</h2>\n{content}"


def _format(value, kind: str) -> str:
    if value is None:
        return "n/a"
    if kind == "pct":
        return f"{value:.1%}"
    if kind == "times":
        return f"{value:.2f}×"
    if kind == "seconds":
        return f"{value:.2f} s"
    if kind == "interval":
        return f"[{value[0]:.1%}, {value[1]:.1%}]"
    return str(int(value)) if isinstance(value, (int, float)) else str(value)
