"""The committed dashboards are what grafana/build.py builds, use $datasource everywhere and only
read metrics the gateway registers; the alert rules read only registered metrics too."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest
from grafana_queries import (
    DASHBOARDS_DIR,
    GRAFANA_DIR,
    alert_expressions,
    dashboards,
    family_name,
    metric_names,
    panel_queries,
)

from gateway.observe.metrics import GatewayMetrics

EXPECTED_FILES = {"streamgate-overview.json", "streamgate-topics.json", "streamgate-groups.json",
                  "streamgate-nodes.json"}


def _build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("grafana_build", GRAFANA_DIR / "build.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is created
    spec.loader.exec_module(module)
    return module


def registered_metric_names() -> set[str]:
    """Every name a PromQL query may use for the gateway's metrics (counters with _total, info with
    _info)."""
    metrics = GatewayMetrics.create()
    metrics.watch_redis_memory(dict)  # registered once the app has a store; no node needed here
    names = set()
    for family in metrics.registry.collect():
        suffix = {"counter": "_total", "info": "_info"}.get(family.type, "")
        names.add(family.name + suffix)
    return names


def test_committed_dashboards_are_what_the_generator_builds() -> None:
    build = _build_module()
    assert {spec.file for spec in build.DASHBOARDS} == EXPECTED_FILES
    for spec in build.DASHBOARDS:
        assert (DASHBOARDS_DIR / spec.file).read_text() == build.render(spec), \
            f"{spec.file} is stale: run python grafana/build.py"
    assert build.main(["--check"]) == 0


def test_every_panel_uses_the_datasource_variable() -> None:
    boards = dashboards()
    assert set(boards) == EXPECTED_FILES
    for name, board in boards.items():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource", name
        assert variables["datasource"]["query"] == "prometheus", name
        assert board["schemaVersion"] >= 41, name  # Grafana 12 models
        assert board["panels"], name
        for panel in board["panels"]:
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (
                name, panel["title"])
            assert panel["targets"], (name, panel["title"])
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}", (name, panel["title"])
        for variable in variables.values():
            if variable["type"] == "query":
                assert variable["datasource"]["uid"] == "${datasource}", (name, variable["name"])


def test_every_metric_panels_and_alerts_read_is_registered() -> None:
    registered = registered_metric_names()
    used: dict[str, str] = {}
    for query in panel_queries():
        for metric in metric_names(query.expr):
            used.setdefault(family_name(metric), f"{query.dashboard}: {query.panel}")
    for alert, expr in alert_expressions().items():
        for metric in metric_names(expr):
            used.setdefault(family_name(metric), f"alert {alert}")
    assert len(used) >= 20
    missing = {name: where for name, where in used.items() if name not in registered}
    assert not missing, ("dashboards or alerts read metrics the gateway does not "
                         f"register: {missing}")


def test_queries_do_not_hide_missing_data_behind_vector() -> None:
    offending = [f"{q.dashboard}: {q.panel}" for q in panel_queries()
                 if "orvector(" in q.expr.replace(" ", "")]
    assert not offending


@pytest.mark.parametrize(("sample", "family"), [
    ("streamgate_redis_latency_seconds_bucket", "streamgate_redis_latency_seconds"),
    ("streamgate_publish_requests_total", "streamgate_publish_requests_total"),
    ("streamgate_build_info", "streamgate_build_info"),
])
def test_family_name_strips_only_histogram_sample_suffixes(sample: str, family: str) -> None:
    assert family_name(sample) == family
