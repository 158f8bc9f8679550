"""CI gates: a figure of a report held to a bound, so that a job can fail on it.

    gates = parse_gates(["latency_reduction=0.05"], ["tokens_wasted_fraction=0.5"], known)
    results = check_gates(report, gates)     # one GateResult per gate: --fail-under ones first
    failed = [r for r in results if not r.passed]

A gate names a figure by its key in the command's --json object; a dotted key reaches into
nested objects (`speculation.exec_won_rate`, `by_concurrency.8.latency_reduction`). `under`
gates fail when the figure is below the bound (rates that should stay high), `over` gates when
it is above (costs). A figure the run could not measure (null, as a rate over nothing is)
fails its gate: a gate that passes on a missing number would hide what it guards. A key the
command never reports is refused before the run, naming the keys it does report.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from obsspec.errors import ConfigError

Direction = Literal["under", "over"]
FLAGS: dict[Direction, str] = {"under": "--fail-under", "over": "--fail-over"}


@dataclass(frozen=True)
class Gate:
    key: str
    bound: float
    direction: Direction

    @property
    def wanted(self) -> str:
        return f"{self.key} {'>=' if self.direction == 'under' else '<='} {self.bound:g}"


@dataclass(frozen=True)
class GateResult:
    gate: Gate
    value: float | None
    passed: bool

    def line(self) -> str:
        """One line: what was wanted, what was measured."""
        measured = "not measured (null)" if self.value is None else f"{self.value:.4g}"
        verdict = "passed" if self.passed else "FAILED"
        return f"gate {verdict}: {self.gate.wanted}, measured {measured}"

    def as_dict(self) -> dict:
        return {
            "key": self.gate.key,
            "direction": self.gate.direction,
            "bound": self.gate.bound,
            "value": self.value,
            "passed": self.passed,
        }


def parse_gates(
    under: Iterable[str], over: Iterable[str], known: Iterable[str] | None = None
) -> list[Gate]:
    """`KEY=NUMBER` texts of --fail-under and --fail-over; `known`: the top-level keys the
    command reports (a gate on any other key is refused)."""
    gates = [parse_gate(text, "under") for text in under]
    gates += [parse_gate(text, "over") for text in over]
    if known is not None:
        for gate in gates:
            check_known(gate, sorted(known))
    return gates


def parse_gate(text: str, direction: Direction) -> Gate:
    flag = FLAGS[direction]
    key, sep, number = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"{flag} {text!r}: expected KEY=NUMBER, e.g. {flag} match_rate_wm=0.4")
    try:
        bound = float(number)
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: {number.strip()!r} is not a number") from None
    if not math.isfinite(bound):
        raise ConfigError(f"{flag} {text!r}: the bound must be a finite number")
    return Gate(key, bound, direction)


def check_known(gate: Gate, known: list[str]) -> None:
    head = gate.key.split(".")[0]
    if head in known:
        return
    close = difflib.get_close_matches(head, known, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise ConfigError(
        f"{FLAGS[gate.direction]} {gate.key}: this command reports no figure {head!r}{hint}; "
        f"it reports: {', '.join(known)}"
    )


def figure(report: Mapping, key: str) -> float | None:
    """The number at a dotted key; None when the report holds null there. A key that leads
    nowhere, or to something that is not a number, is a ConfigError naming it."""
    value: object = report
    for depth, part in enumerate(key.split(".")):
        if not isinstance(value, Mapping) or part not in value:
            where = ".".join(key.split(".")[:depth]) or "the report"
            choices = sorted(value) if isinstance(value, Mapping) else []
            raise ConfigError(
                f"gate {key}: {where} has no {part!r}"
                + (f"; it has: {', '.join(map(str, choices))}" if choices else "")
            )
        value = value[part]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"gate {key}: the report holds {value!r} there, not a number")
    return None if isinstance(value, float) and math.isnan(value) else float(value)


def check_gates(report: Mapping, gates: Iterable[Gate]) -> list[GateResult]:
    results = []
    for gate in gates:
        value = figure(report, gate.key)
        if value is None:
            passed = False
        elif gate.direction == "under":
            passed = value >= gate.bound
        else:
            passed = value <= gate.bound
        results.append(GateResult(gate, value, passed))
    return results
