"""The harness's one table: figure, value, anchor, ratio, goal, status; printed, and written as JSON
and Markdown."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

PASS, FAIL, INFO, UNSUPPORTED, ERROR = "pass", "FAIL", "info", "not supported", "error"


@dataclass
class Row:
    """One figure. ``ratio`` is value/anchor when there is an anchor; ``status`` is decided by the
    goal check."""

    goal: str
    figure: str
    value: float | None
    unit: str
    anchor: float | None = None
    anchor_name: str = ""
    goal_text: str = ""
    status: str = INFO
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.anchor:
            return None
        return self.value / self.anchor


def at_least(row: Row, minimum: float, *, on_ratio: bool = False) -> Row:
    """Set pass/FAIL: the value (or the ratio) must be >= minimum."""
    measured = row.ratio if on_ratio else row.value
    row.status = PASS if measured is not None and measured >= minimum else FAIL
    return row


def below(row: Row, maximum: float, *, on_ratio: bool = False) -> Row:
    """Set pass/FAIL: the value (or the ratio) must be < maximum."""
    measured = row.ratio if on_ratio else row.value
    row.status = PASS if measured is not None and measured < maximum else FAIL
    return row


def _num(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.{digits}f}"


def _cells(row: Row) -> list[str]:
    anchor = f"{_num(row.anchor)} ({row.anchor_name})" if row.anchor is not None else "-"
    return [row.goal, row.figure, f"{_num(row.value)} {row.unit}".strip(), anchor, _num(row.ratio),
            row.goal_text, row.status]


HEADERS = ["goal", "figure", "value", "anchor", "ratio", "goal", "pass/fail"]


def render_text(rows: list[Row]) -> str:
    """A plain fixed-width table for the terminal."""
    table = [HEADERS, *(_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADERS))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
                     for line in table)


def render_markdown(rows: list[Row]) -> str:
    """The same table as Markdown (docs/performance.md); notes go under it."""
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + " --- |" * len(HEADERS)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in _cells(row)) + " |"
              for row in rows]
    notes = [f"- {row.goal} {row.figure}: {row.note}" for row in rows if row.note]
    return "\n".join(lines + (["", *notes] if notes else []))


def write_json(path: Path, rows: list[Row], context: dict[str, Any]) -> None:
    """rows (with ratio) and the run's context as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"context": context, "rows": [{**asdict(row), "ratio": row.ratio} for row in rows]}
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
