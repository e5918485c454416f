"""Render and check the Helm chart offline: helm-python-sdk (Helm's Go SDK through ctypes, no helm
binary, no cluster) renders and lints; kubernetes-validate checks each manifest against the
Kubernetes OpenAPI schemas."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "helm" / "streamgate"
RELEASE = "sg"
NAMESPACE = "streaming"
KUBE_VERSION = "1.30.0"

# Prometheus Operator kinds: kubernetes-validate ships only the core API schemas, so these are
# checked structurally by check_custom_resource.
CUSTOM_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"),
                ("monitoring.coreos.com/v1", "PrometheusRule")}

# Each optional toggle of the chart, as the values that switch it on (the default is the empty
# override).
SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "ingress": {"ingress": {"enabled": True, "tls": [{"hosts": ["streamgate.example.com"],
                                                       "secretName": "streamgate-tls"}]}},
    "hpa": {"gateway": {"hpa": {"enabled": True}}},
    "service-monitor": {"metrics": {"serviceMonitor": {"enabled": True,
                                                       "labels": {"release": "prom"}}}},
    "prometheus-rule": {"metrics": {"prometheusRule": {"enabled": True}}},
    "no-dashboards": {"metrics": {"dashboards": {"enabled": False}}},
    "external-redis": {"redis": {"enabled": False},
                       "externalRedis": {"nodes": ["redis-a.db:6379", "redis-b.db:6379"]}},
    "external-etcd": {"etcd": {"enabled": False},
                      "externalEtcd": {"endpoints": ["etcd-0.coord:2379", "etcd-1.coord:2379"]}},
    "existing-secret": {"auth": {"existingSecret": "my-streamgate-secrets"}},
    "created-secret": {"auth": {"config": ("[[api_keys]]\nprincipal = \"ops\"\nsha256 = \""
                                           + "a" * 64 + "\"\n"),
                                "jwtSecret": "x" * 32, "redisPassword": "hunter2-hunter2",
                                "files": {"jwks.json": "{\"keys\": []}"}}},
    "required-anti-affinity": {"gateway": {"antiAffinity": "required"},
                               "redis": {"antiAffinity": "required"},
                               "etcd": {"antiAffinity": "required"}},
    "tls-listener": {"gateway": {"settings": {"tls_cert_path": "/tls/tls.crt",
                                              "tls_key_path": "/tls/tls.key"},
                                 "extraVolumes": [{"name": "tls",
                                                   "secret": {"secretName": "gw-tls"}}],
                                 "extraVolumeMounts": [{"name": "tls", "mountPath": "/tls",
                                                        "readOnly": True}]},
                     "metrics": {"serviceMonitor": {"enabled": True}}},
    "archive-path": {"archive": {"enabled": True, "url": "/archive",
                                 "persistence": {"storageClass": "nfs", "size": "1Ti"}}},
    "archive-s3": {"archive": {"enabled": True, "url": "s3://sg-archive/prod",
                               "s3": {"endpoint": "minio.storage:9000", "region": "eu-1",
                                      "scheme": "http", "accessKey": "AKIDEXAMPLE",
                                      "secretKey": "wJalrXUtnFEMI/K7MDENG"}}},
    "declared-topics": {"topics": [{"name": "orders", "partitions": 6, "retention_ms": 60000},
                                   {"name": "accounts", "partitions": 3, "compact": True},
                                   {"name": "old", "state": "absent"}],
                        "topicsJob": {"apiKeySecret": {"name": "streamgate-ops"}}},
    "narrowed-network": {"networkPolicy": {
        "ingressFrom": [{"namespaceSelector": {"matchLabels": {"name": "ingress-nginx"}}}],
        "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
        "extraEgress": [{"ports": [{"port": 4318, "protocol": "TCP"}]}]},
        "gateway": {"priorityClassName": "streaming-critical"}},
    "no-network-policy": {"networkPolicy": {"enabled": False}},
}


def merged(*overrides: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge override dicts (later wins), as several --values files would."""
    result: dict[str, Any] = {}
    for override in overrides:
        _merge_into(result, copy.deepcopy(override))
    return result


def _merge_into(target: dict[str, Any], source: dict[str, Any]) -> None:
    for key, value in source.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge_into(target[key], value)
        else:
            target[key] = value


def lint(values: dict[str, Any], chart: Path = CHART_DIR) -> dict[str, Any]:
    """`helm lint --strict` of the chart directory (or a packaged chart) with these values."""
    return helm.lint(str(chart), values, strict=True, namespace=NAMESPACE,
                     kube_version=f"v{KUBE_VERSION}")


def render_files(values: dict[str, Any], revision: int = 1,
                 chart_path: Path = CHART_DIR) -> dict[str, str]:
    """Template path -> rendered text (`helm template`), NOTES.txt included; revision 1 is the
    install, a later one an upgrade."""
    with helm.Chart.load(str(chart_path)) as chart:
        return chart.render(values, name=RELEASE, namespace=NAMESPACE, revision=revision,
                            is_install=revision == 1, is_upgrade=revision > 1)


def manifests(values: dict[str, Any], revision: int = 1,
              chart: Path = CHART_DIR) -> list[dict[str, Any]]:
    """Every Kubernetes object the chart (a directory or package) renders with these values at
    this revision."""
    found: list[dict[str, Any]] = []
    for path, text in render_files(values, revision, chart).items():
        if path.endswith(".yaml"):
            found.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return found


def one(objects: list[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    """The single object of `kind` whose name ends with `name_suffix`."""
    matches = [obj for obj in objects if obj["kind"] == kind
               and obj["metadata"]["name"].endswith(name_suffix)]
    assert len(matches) == 1, (f"expected one {kind} *{name_suffix}, got "
                               f"{[m['metadata']['name'] for m in matches]}")
    return matches[0]


def kinds(objects: list[dict[str, Any]]) -> set[str]:
    """The kinds present."""
    return {obj["kind"] for obj in objects}


def validate(obj: dict[str, Any]) -> None:
    """Strict schema validation (unknown fields are errors); custom resources are checked
    structurally."""
    if (obj["apiVersion"], obj["kind"]) in CUSTOM_KINDS:
        check_custom_resource(obj)
        return
    kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def check_custom_resource(obj: dict[str, Any]) -> None:
    """The fields the Prometheus Operator requires of a ServiceMonitor / PrometheusRule, with their
    types."""
    assert set(obj) <= {"apiVersion", "kind", "metadata", "spec"}, sorted(obj)
    assert isinstance(obj["metadata"]["name"], str)
    spec = obj["spec"]
    if obj["kind"] == "ServiceMonitor":
        assert set(spec) <= {"selector", "namespaceSelector", "endpoints", "jobLabel"}, sorted(spec)
        assert spec["selector"]["matchLabels"], "a ServiceMonitor must select the gateway Service"
        for endpoint in spec["endpoints"]:
            assert set(endpoint) <= {"port", "path", "scheme", "interval",
                                     "scrapeTimeout"}, sorted(endpoint)
            assert isinstance(endpoint["port"], str)
            assert endpoint.get("scheme", "http") in {"http", "https"}
        return
    assert set(spec) == {"groups"}
    for group in spec["groups"]:
        assert isinstance(group["name"], str)
        assert group["rules"]
        for rule in group["rules"]:
            assert isinstance(rule["expr"], str | int)
            assert ("alert" in rule) != ("record" in rule), rule
            assert set(rule) <= {"alert", "record", "expr", "for", "keep_firing_for", "labels",
                                 "annotations"}


def pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(workload name, pod spec) of every Deployment, StatefulSet, Job and bare (hook) Pod."""
    for obj in objects:
        if obj["kind"] in {"Deployment", "StatefulSet", "Job"}:
            yield obj["metadata"]["name"], obj["spec"]["template"]["spec"]
        elif obj["kind"] == "Pod":
            yield obj["metadata"]["name"], obj["spec"]
