"""The chart ships the repo's Grafana dashboards and alert rules unchanged (copies: Helm reads only
files inside the chart; `helm/sync-grafana.sh` refreshes them)."""

from __future__ import annotations

import json
from pathlib import Path

import helm_python as helm
import yaml
from helm_render import CHART_DIR, REPO, SCENARIOS, manifests, one

GRAFANA = REPO / "grafana"
SYNC_HINT = "run helm/sync-grafana.sh"
CONFIGMAP_LIMIT_BYTES = 1024 * 1024


def files(directory: Path, pattern: str) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.glob(pattern))}


def test_chart_dashboards_equal_grafana_dashboards() -> None:
    source = files(GRAFANA / "dashboards", "*.json")
    assert source, "grafana/dashboards/*.json is missing"
    assert files(CHART_DIR / "dashboards", "*.json") == source, SYNC_HINT


def test_chart_alert_rules_equal_grafana_alert_rules() -> None:
    source = files(GRAFANA / "alerts", "*.rules.yml")
    assert source, "grafana/alerts/*.rules.yml is missing"
    assert files(CHART_DIR / "alerts", "*.rules.yml") == source, SYNC_HINT


def test_dashboard_configmap_has_every_board_and_sidecar_label() -> None:
    configmap = one(manifests({}), "ConfigMap", "-dashboards")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["annotations"]["grafana_folder"] == "streamgate"
    source = files(GRAFANA / "dashboards", "*.json")
    assert set(configmap["data"]) == set(source)
    for name, text in configmap["data"].items():
        assert json.loads(text) == json.loads(source[name]), name
    assert len(json.dumps(configmap).encode()) < CONFIGMAP_LIMIT_BYTES


def test_dashboards_configmap_is_left_out_when_switched_off() -> None:
    assert not [o for o in manifests(SCENARIOS["no-dashboards"])
                if o["metadata"]["name"].endswith("-dashboards")]


def test_prometheus_rule_holds_the_alert_rule_groups() -> None:
    rule = one(manifests(SCENARIOS["prometheus-rule"]), "PrometheusRule")
    expected = []
    for path in sorted((GRAFANA / "alerts").glob("*.rules.yml")):
        expected.extend(yaml.safe_load(path.read_text())["groups"])
    assert rule["spec"]["groups"] == expected
    assert any("alert" in r for group in expected for r in group["rules"])


def test_packaged_chart_carries_dashboards_and_rules(tmp_path: Path) -> None:
    archive = helm.package(str(CHART_DIR), destination=str(tmp_path))
    with helm.Chart.load(archive) as chart:
        rendered = chart.render(SCENARIOS["prometheus-rule"], name="sg", namespace="streaming")
    objects = [doc for path, text in rendered.items() if path.endswith(".yaml")
               for doc in yaml.safe_load_all(text) if doc]
    assert (set(one(objects, "ConfigMap", "-dashboards")["data"])
            == set(files(GRAFANA / "dashboards", "*.json")))
    assert one(objects, "PrometheusRule")["spec"]["groups"]
