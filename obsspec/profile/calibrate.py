"""The measured figures a regime simulation replays, read from a profile or a collect run.

    cal = calibrate(Path("runs/prof"))      # the --out of `obsspec profile`, or a collect RUN_DIR
    levels = calibrate_levels(Path("runs/prof"))      # {1: Calibration, 8: ...}: a profile's levels

    RUN_DIR/report.json + RUN_DIR/arms/{seq,spec,oracle}/data/*.parquet     a profile (preferred)
    RUN_DIR/data/*.parquet (+ manifest.json)                                 a collect run

A profile run at several concurrency levels (`--concurrency 1,8`) keeps its first level in
RUN_DIR/arms/<arm> (what `calibrate` reads) and each other level N in RUN_DIR/arms/c<N>/<arm>,
as its report.json's `by_concurrency[N].arms_dir` says; `calibrate_levels` reads each level
on its own (its reply seconds are those measured with N episodes sharing the engine).

From a profile, reply and command seconds come from the sequential arm (the times with no
speculation in the way) and the prediction figures from the speculative arm, over the
episodes (task_id, episode_index) both arms completed; the measured latency reductions are
recomputed from the same rows, so the validation compares like with like. From a collect run,
every row gives reply and command seconds; prediction figures exist only if it was collected
with speculation on, else they are None and a simulation must be told a hit rate.

Every command turn of the speculative arm counts once per command family
(`obsspec.speculation.gate.command_family`):

    attempt_rate   attempted / command turns                  what the gate let through
    hit_rate       matched / (attempted - exec_won)           a prediction that arrived (or
                                                              failed) and was exactly right:
                                                              the predictor's accuracy
    kept_rate      kept / (attempted - exec_won)              ... and a reply was begun on it
                                                              and kept (the gate's second look
                                                              may not branch on a late guess)
    predict_s      seconds of the predictions that arrived

The sweep uses hit_rate (gate always); the validation uses kept_rate, to reproduce the run.
Both leave out the attempts the command won, because the simulation decides arrival itself
from the prediction's and the command's seconds. Those predictions' seconds were never
measured (they were cancelled), so the prediction times are those of the predictions fast
enough to arrive: an optimistic sample. A family with no figures of its own uses the pooled
ones. The simulator takes them as arrays: obsspec.profile.workload.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field

from obsspec.config import StrictModel
from obsspec.errors import ConfigError
from obsspec.runs import DATA_DIR, read_json_object, read_rows, read_run_manifest, shard_paths
from obsspec.speculation.gate import command_family

FLAG = "--calibrate"
REPORT = "report.json"


class TimeStats(StrictModel):
    n: int = Field(description="Samples.")
    mean: float = Field(description="Mean seconds.")
    p50: float = Field(description="Median seconds.")
    p90: float = Field(description="90th percentile seconds.")

    @classmethod
    def of(cls, values: Sequence[float]) -> TimeStats | None:
        if not values:
            return None
        ordered = sorted(values)
        return cls(
            n=len(ordered),
            mean=round(statistics.fmean(ordered), 4),
            p50=round(_quantile(ordered, 0.5), 4),
            p90=round(_quantile(ordered, 0.9), 4),
        )


class EpisodeTimes(StrictModel):
    """One episode as the simulation replays it: turn by turn, what took how long."""

    task_id: str = Field(description="The task the episode played.")
    episode_index: int = Field(description="Which episode of the task.")
    gen_s: list[float] = Field(description="Seconds of each turn's reply.")
    exec_s: list[float] = Field(description="Seconds of each turn's command (0: no command).")
    family: list[str | None] = Field(description="Each turn's command family; None: no command.")
    agent_s: float = Field(default=0.0, description="The episode's measured latency.")
    kept: list[bool] | None = Field(
        default=None, description="Per turn, a reply begun on its guess was kept (spec arms)."
    )
    predict_s: list[float] | None = Field(
        default=None, description="Per turn, seconds of the prediction (spec arms)."
    )


class FamilyFigures(StrictModel):
    command_turns: int = Field(description="Command turns of the family in the speculative arm.")
    attempt_rate: float | None = Field(description="Attempted / command turns.")
    hit_rate: float | None = Field(description="Matched / (attempted - won by the command).")
    kept_rate: float | None = Field(
        description="Replies begun on a guess and kept / (attempted - won by the command): "
        "the hit rate after the gate's second look (it may not branch on a late hit)."
    )
    predict_s: list[float] = Field(description="Seconds of each prediction that arrived.")


class Measured(StrictModel):
    latency_reduction: float | None = Field(description="1 - sum(T_spec) / sum(T_seq).")
    oracle_latency_reduction: float | None = Field(description="1 - sum(T_oracle) / sum(T_seq).")
    oracle_fraction: float | None = Field(description="The first over the second.")
    latency_reduction_ci95: list[float] | None = Field(description="From report.json, if any.")
    oracle_latency_reduction_ci95: list[float] | None = Field(description="Likewise.")


class Calibration(StrictModel):
    source: Literal["profile", "collect"] = Field(
        description="What kind of directory it came from."
    )
    run_dir: str = Field(description="The directory given to --calibrate.")
    depth: int = Field(description="Speculation depth the run used (1 if none).")
    breadth: int = Field(description="Guesses per command the run used (1 if none).")
    gate: str = Field(description="The run's gate mode ('off': collected without speculation).")
    oracle_delay_s: float = Field(description="Seconds the profile's oracle took per prediction.")
    concurrency: int = Field(
        default=1, description="Episodes at once (sharing the engine) when it was measured."
    )
    episodes: list[EpisodeTimes] = Field(description="The episodes the simulation resamples.")
    gen_s: TimeStats = Field(description="Seconds per reply (every turn).")
    exec_s: TimeStats = Field(description="Seconds per command (command turns).")
    predict_s: TimeStats | None = Field(description="Seconds per arrived prediction.")
    tokens_per_s: float | None = Field(description="Reply tokens per second of generation.")
    attempt_rate: float | None = Field(description="Pooled attempted / command turns.")
    hit_rate: float | None = Field(description="Pooled hit rate per attempt, at `breadth`.")
    kept_rate: float | None = Field(description="Pooled kept rate per attempt (see families).")
    families: dict[str, FamilyFigures] = Field(description="The figures per command family.")
    measured: Measured | None = Field(description="The profile's own reductions (profile only).")
    replays: dict[str, list[EpisodeTimes]] = Field(
        default_factory=dict,
        description="The speculative arms' own episodes with their outcomes (spec, oracle), "
        "which the validation replays to check the timing model apart from the rates.",
    )
    contention: float | None = Field(
        default=None,
        description="Engine slowdown per extra request; one run at one load cannot show it, "
        "so it is None and the simulation takes it as a parameter.",
    )

    def summary(self) -> dict:
        """Everything but the episodes and the raw prediction samples: the part worth reading."""
        summary = self.model_dump(mode="json", exclude={"episodes", "families", "replays"})
        summary["episodes"] = len(self.episodes)
        summary["command_turns"] = sum(f is not None for e in self.episodes for f in e.family)
        summary["families"] = {
            name: {
                "command_turns": f.command_turns,
                "attempt_rate": f.attempt_rate,
                "hit_rate": f.hit_rate,
                "kept_rate": f.kept_rate,
                "predict_s_mean": _mean(f.predict_s),
            }
            for name, f in self.families.items()
        }
        return summary


def calibrate(run_dir: Path) -> Calibration:
    """The calibration of a profile directory or, failing that, of a collect run directory."""
    if not run_dir.is_dir():
        raise ConfigError(f"{FLAG} {run_dir}: no such directory")
    if (run_dir / "arms").is_dir():
        return _from_profile(run_dir)
    if (run_dir / DATA_DIR).is_dir() and shard_paths(run_dir / DATA_DIR):
        return _from_collect(run_dir)
    raise ConfigError(
        f"{FLAG} {run_dir}: neither a profile directory (report.json and "
        "arms/{seq,spec,oracle}/data/*.parquet, the --out of `obsspec profile`) nor a collect "
        f"run directory ({DATA_DIR}/*.parquet)"
    )


def calibrate_levels(run_dir: Path) -> dict[int, Calibration]:
    """Each concurrency level of a profile, calibrated on its own rows; {} for a collect run
    or a profile from before levels (its one level is `calibrate`'s)."""
    if not (run_dir / "arms").is_dir():
        return {}
    report = read_json_object(run_dir / REPORT, flag=FLAG)
    levels = report.get("by_concurrency") or {}
    if not isinstance(levels, dict):
        raise ConfigError(f"{FLAG} {run_dir}: report.json's by_concurrency is not a table")
    return {
        int(level): _from_profile(
            run_dir, run_dir / str(figures.get("arms_dir") or "arms"), figures, int(level)
        )
        for level, figures in levels.items()
    }


def _from_profile(
    run_dir: Path, arms: Path | None = None, figures: dict | None = None, concurrency: int = 1
) -> Calibration:
    """One level of a profile: its arms' rows under `arms` (default: the first level's) and
    its figures in report.json (default: the top level's)."""
    arms = arms or run_dir / "arms"
    seq = _keyed(read_rows(arms / "seq", flag=FLAG))
    spec = _keyed(read_rows(arms / "spec", flag=FLAG))
    oracle = _keyed(read_rows(arms / "oracle", flag=FLAG)) if (arms / "oracle").is_dir() else {}
    keys = sorted(seq.keys() & spec.keys())
    if not keys:
        raise ConfigError(
            f"{FLAG} {run_dir}: no episode (task_id, episode_index) is in both the seq and the "
            "spec arm; was the profile interrupted before its first episode?"
        )
    report = read_json_object(run_dir / REPORT, flag=FLAG)
    config = report.get("config") or {}
    if figures is None:
        figures = report
        concurrency = int(report.get("concurrency") or 1)
    seq_rows, spec_rows = [seq[k] for k in keys], [spec[k] for k in keys]
    oracle_rows = [oracle[k] for k in keys] if all(k in oracle for k in keys) else None
    arms = {"spec": spec_rows} | ({"oracle": oracle_rows} if oracle_rows else {})
    return _calibration(
        run_dir,
        "profile",
        seq_rows,
        arms,
        config.get("speculation") or {},
        oracle_delay_s=float(config.get("oracle_delay_s") or 0.0),
        measured=_measured(seq_rows, spec_rows, oracle_rows, figures),
        concurrency=concurrency,
    )


def _from_collect(run_dir: Path) -> Calibration:
    rows = read_rows(run_dir, flag=FLAG)
    manifest = read_run_manifest(run_dir, flag=FLAG)
    speculation = (manifest.get("config") or {}).get("speculation") or {}
    if not speculation.get("enabled"):
        speculation = {"gate": {"mode": "off"}}
    return _calibration(run_dir, "collect", rows, {"spec": rows}, speculation, 0.0, None)


def _calibration(
    run_dir: Path,
    source: Literal["profile", "collect"],
    timed: list[dict],
    arms: dict[str, list[dict]],
    speculation: dict,
    oracle_delay_s: float,
    measured: Measured | None,
    concurrency: int = 1,
) -> Calibration:
    """timed: the rows whose seconds are simulated; arms: the rows with speculation records
    ("spec", whose rates are calibrated, and "oracle"), each replayed in the validation."""
    episodes = [_episode_times(row) for row in timed]
    exec_s = [
        e for ep in episodes for e, f in zip(ep.exec_s, ep.family, strict=True) if f is not None
    ]
    if not exec_s:
        raise ConfigError(
            f"{FLAG} {run_dir}: its episodes ran no command, so there is no command time for "
            "speculation to overlap; calibrate on episodes that run commands"
        )
    families, pooled = _family_figures(arms["spec"])
    gen_s = [g for ep in episodes for g in ep.gen_s]
    tokens = sum(len(t.get("action_ids") or []) for row in timed for t in row["turns"])
    return Calibration(
        source=source,
        run_dir=str(run_dir),
        depth=int(speculation.get("depth") or 1),
        breadth=int(speculation.get("breadth") or 1),
        gate=str((speculation.get("gate") or {}).get("mode") or "auto"),
        oracle_delay_s=oracle_delay_s,
        concurrency=concurrency,
        episodes=episodes,
        gen_s=TimeStats.of(gen_s),
        exec_s=TimeStats.of(exec_s),
        predict_s=TimeStats.of(pooled.predict_s),
        tokens_per_s=round(tokens / sum(gen_s), 2) if sum(gen_s) > 0 else None,
        attempt_rate=pooled.attempt_rate,
        hit_rate=pooled.hit_rate,
        kept_rate=pooled.kept_rate,
        families=families,
        measured=measured,
        replays={
            arm: [_episode_times(row, outcomes=True) for row in rows]
            for arm, rows in arms.items()
            if families
        },
    )


def _episode_times(row: dict, *, outcomes: bool = False) -> EpisodeTimes:
    turns = row["turns"]
    return EpisodeTimes(
        task_id=row["task_id"],
        episode_index=row["episode_index"],
        gen_s=[float(t["gen_s"]) for t in turns],
        exec_s=[float(t["exec_s"]) if t["action"] == "command" else 0.0 for t in turns],
        family=[command_family(t["command"]) if t["action"] == "command" else None for t in turns],
        agent_s=float(row["agent_s"]),
        kept=[_kept(t.get("speculation")) for t in turns] if outcomes else None,
        predict_s=[float(t["predict_s"]) for t in turns] if outcomes else None,
    )


def _kept(record: dict | None) -> bool:
    """A reply begun on this turn's guess became the next turn (certain children aside)."""
    return bool(record and record["matched"] and record.get("tokens_committed"))


class _Counts:
    def __init__(self) -> None:
        self.turns = self.attempted = self.exec_won = self.matched = self.kept = 0
        self.predict_s: list[float] = []

    def add(self, turn: dict) -> None:
        record = turn.get("speculation")
        self.turns += 1
        if not record or not record["attempted"]:
            return
        self.attempted += 1
        self.exec_won += bool(record["exec_won"])
        self.matched += bool(record["matched"])
        self.kept += _kept(record)
        if record["predictions"] and not record["exec_won"] and turn["predict_s"] > 0:
            self.predict_s.append(float(turn["predict_s"]))

    def figures(self) -> FamilyFigures:
        compared = self.attempted - self.exec_won
        return FamilyFigures(
            command_turns=self.turns,
            attempt_rate=_ratio(self.attempted, self.turns),
            hit_rate=_ratio(self.matched, compared),
            kept_rate=_ratio(self.kept, compared),
            predict_s=self.predict_s,
        )


def _family_figures(rows: Iterable[dict]) -> tuple[dict[str, FamilyFigures], FamilyFigures]:
    """Per family and pooled; all None/empty when no turn has a speculation record."""
    turns = [t for row in rows for t in row["turns"] if t["action"] == "command"]
    if not any(t.get("speculation") for t in turns):
        return {}, _Counts().figures()
    groups: dict[str, _Counts] = defaultdict(_Counts)
    pooled = _Counts()
    for turn in turns:
        groups[command_family(turn["command"])].add(turn)
        pooled.add(turn)
    return {name: c.figures() for name, c in sorted(groups.items())}, pooled.figures()


def _measured(
    seq: list[dict], spec: list[dict], oracle: list[dict] | None, report: dict
) -> Measured:
    base = sum(r["agent_s"] for r in seq)
    lr = 1 - sum(r["agent_s"] for r in spec) / base if base > 0 else None
    olr = 1 - sum(r["agent_s"] for r in oracle) / base if base > 0 and oracle else None
    return Measured(
        latency_reduction=_round(lr),
        oracle_latency_reduction=_round(olr),
        oracle_fraction=_round(lr / olr) if lr is not None and olr else None,
        latency_reduction_ci95=report.get("latency_reduction_ci95"),
        oracle_latency_reduction_ci95=report.get("oracle_latency_reduction_ci95"),
    )


def _keyed(rows: list[dict]) -> dict[tuple[str, int], dict]:
    return {(row["task_id"], row["episode_index"]): row for row in rows}


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), without numpy."""
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
