"""Reading the committed dashboards and alert rules: every panel query and every metric name they
use."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
GRAFANA_DIR = ROOT / "grafana"
DASHBOARDS_DIR = GRAFANA_DIR / "dashboards"
RULES_FILE = GRAFANA_DIR / "alerts" / "streamgate.rules.yml"
METRIC_NAME = re.compile(r"\bstreamgate_\w+")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count", "_created")


@dataclass(frozen=True)
class PanelQuery:
    """One target of one panel."""

    dashboard: str
    panel: str
    ref_id: str
    expr: str


def dashboards() -> dict[str, dict[str, Any]]:
    """Every committed dashboard by file name."""
    return {path.name: json.loads(path.read_text())
            for path in sorted(DASHBOARDS_DIR.glob("*.json"))}


def panel_queries() -> Iterator[PanelQuery]:
    """Every target of every panel of every dashboard."""
    for name, board in dashboards().items():
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                yield PanelQuery(name, panel["title"], target["refId"], target["expr"])


def alert_rules() -> dict[str, dict[str, Any]]:
    """Alert name -> its rule as written."""
    rules = yaml.safe_load(RULES_FILE.read_text())
    return {rule["alert"]: rule for group in rules["groups"] for rule in group["rules"]}


def alert_expressions() -> dict[str, str]:
    """Alert name -> PromQL expression."""
    return {name: rule["expr"] for name, rule in alert_rules().items()}


def family_name(sample_name: str) -> str:
    """A metric family's name from a name used in PromQL (histogram and counter sample suffixes
    stripped)."""
    for suffix in HISTOGRAM_SUFFIXES:
        if sample_name.endswith(suffix):
            return sample_name[: -len(suffix)]
    return sample_name


def metric_names(expr: str) -> set[str]:
    """The streamgate metric names an expression reads."""
    return set(METRIC_NAME.findall(expr))
