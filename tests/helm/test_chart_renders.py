"""The chart lints and renders valid Kubernetes objects for the default values and every optional
toggle."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest
from helm_render import (
    CHART_DIR,
    NAMESPACE,
    SCENARIOS,
    kinds,
    lint,
    manifests,
    merged,
    one,
    pod_specs,
    render_files,
    validate,
)

ALWAYS = {"ConfigMap", "Deployment", "Service", "ServiceAccount", "PodDisruptionBudget"}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_chart_lints_without_errors_or_warnings(scenario: str) -> None:
    report = lint(SCENARIOS[scenario])
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [], report
    assert problems == [], report


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_rendered_manifests_are_valid_kubernetes_objects(scenario: str) -> None:
    objects = manifests(SCENARIOS[scenario])
    assert kinds(objects) >= ALWAYS
    for obj in objects:
        validate(obj)
        assert obj["metadata"].get("namespace") in (None, NAMESPACE)


def test_default_install_runs_gateway_redis_and_etcd_only() -> None:
    found = kinds(manifests({}))
    assert {"StatefulSet", "Job", "Secret"} <= found
    assert not found & {"Ingress", "HorizontalPodAutoscaler", "ServiceMonitor", "PrometheusRule"}


def test_each_toggle_adds_its_object() -> None:
    expected = {"ingress": "Ingress", "hpa": "HorizontalPodAutoscaler",
                "service-monitor": "ServiceMonitor", "prometheus-rule": "PrometheusRule"}
    for scenario, kind in expected.items():
        assert kind in kinds(manifests(SCENARIOS[scenario])), scenario


def test_containers_run_non_root_read_only_without_capabilities() -> None:
    objects = manifests(merged(SCENARIOS["defaults"]))
    upgrade_hooks = [(name, pod) for name, pod in pod_specs(manifests({}, revision=2))
                     if name.endswith("-members")]
    workloads = list(pod_specs(objects)) + upgrade_hooks
    # gateway, redis, redis cluster-create Job, etcd, the `helm test` Pod, the etcd members hook
    assert len(workloads) == 6
    for name, pod in workloads:
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert pod["automountServiceAccountToken"] is False, name
        for container in pod["containers"] + pod.get("initContainers", []):
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, (name, container["name"])
            assert context["allowPrivilegeEscalation"] is False, (name, container["name"])
            assert context["capabilities"] == {"drop": ["ALL"]}, (name, container["name"])
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}, (
                name, container["name"])


def gateway_container(values: dict[str, Any]) -> dict[str, Any]:
    pod = one(manifests(values), "Deployment")["spec"]["template"]["spec"]
    container: dict[str, Any] = next(c for c in pod["containers"] if c["name"] == "gateway")
    return container


def test_gateway_runs_serve_with_healthz_and_readyz_probes() -> None:
    container = gateway_container({})
    assert [*container["command"], *container["args"]] == ["streamgate", "serve", "--host",
                                                           "0.0.0.0", "--port", "8080"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http",
                                                     "scheme": "HTTP"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http",
                                                      "scheme": "HTTP"}
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]["memory"]


def test_gateway_probes_and_scrapes_use_https_with_tls() -> None:
    values = SCENARIOS["tls-listener"]
    container = gateway_container(values)
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert {"name": "tls", "mountPath": "/tls", "readOnly": True} in container["volumeMounts"]
    monitor = one(manifests(values), "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["scheme"] == "https"


def test_gateway_node_id_is_pod_name_and_secrets_from_secret() -> None:
    env = {item["name"]: item for item in gateway_container({})["env"]}
    assert env["STREAMGATE_NODE_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    for name, key in (("STREAMGATE_JWT_SECRET", "jwt-secret"),
                      ("STREAMGATE_REDIS_PASSWORD", "redis-password"),
                      ("STREAMGATE_RECEIPT_SECRET", "receipt-secret")):
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"], ref["optional"]) == ("sg-streamgate", key, True)


def anti_affinity(values: dict[str, Any], kind: str, suffix: str) -> dict[str, Any]:
    pod = one(manifests(values), kind, suffix)["spec"]["template"]["spec"]
    affinity: dict[str, Any] = pod.get("affinity", {}).get("podAntiAffinity", {})
    return affinity


@pytest.mark.parametrize(("kind", "suffix", "component"),
                         [("Deployment", "", "gateway"), ("StatefulSet", "-redis", "redis"),
                          ("StatefulSet", "-etcd", "etcd")])
def test_pod_spread_preferred_by_default_required_on_request(
        kind: str, suffix: str, component: str) -> None:
    preferred = anti_affinity({}, kind, suffix)[
        "preferredDuringSchedulingIgnoredDuringExecution"][0]
    term = preferred["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == component
    required = anti_affinity(SCENARIOS["required-anti-affinity"], kind, suffix)
    assert list(required) == ["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti_affinity({component: {"antiAffinity": "none"}}, kind, suffix) == {}


def test_pod_disruption_budgets_select_their_own_pods() -> None:
    objects = manifests({})
    workloads = {obj["metadata"]["name"]: obj for obj in objects
                 if obj["kind"] in {"Deployment", "StatefulSet"}}
    budgets = [obj for obj in objects if obj["kind"] == "PodDisruptionBudget"]
    assert {b["metadata"]["name"] for b in budgets} == set(workloads)
    for budget in budgets:
        workload = workloads[budget["metadata"]["name"]]
        assert budget["spec"]["selector"] == workload["spec"]["selector"]
    assert one(objects, "PodDisruptionBudget", "sg-streamgate")["spec"]["minAvailable"] == 1


def test_hpa_scales_gateway_and_takes_over_replica_count() -> None:
    objects = manifests(SCENARIOS["hpa"])
    hpa = one(objects, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": "sg-streamgate"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 10)
    assert "replicas" not in one(objects, "Deployment")["spec"]
    assert one(manifests({}), "Deployment")["spec"]["replicas"] == 2


def test_ingress_keeps_websockets_open_and_unbuffered() -> None:
    ingress = one(manifests(SCENARIOS["ingress"]), "Ingress")
    annotations = ingress["metadata"]["annotations"]
    assert int(annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 3600
    assert int(annotations["nginx.ingress.kubernetes.io/proxy-send-timeout"]) >= 3600
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert annotations["nginx.ingress.kubernetes.io/proxy-request-buffering"] == "off"
    body_limit_mib = int(
        annotations["nginx.ingress.kubernetes.io/proxy-body-size"].removesuffix("m"))
    assert body_limit_mib * 1024 * 1024 > 16 * 1024 * 1024  # above the default max_batch_bytes
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "sg-streamgate", "port": {"name": "http"}}
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"][0]["secretName"] == "streamgate-tls"


def test_service_monitor_scrapes_the_gateway_service() -> None:
    objects = manifests(SCENARIOS["service-monitor"])
    monitor = one(objects, "ServiceMonitor")
    service = one(objects, "Service", "sg-streamgate")
    assert monitor["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["metadata"]["labels"]["release"] == "prom"


def test_schema_rejects_a_string_replica_count_and_unknown_keys() -> None:
    with helm.Chart.load(str(CHART_DIR)) as chart:
        chart.validate_schema({})
        bad_values: list[dict[str, Any]] = [
            {"gateway": {"replicas": "three"}}, {"gateway": {"replicaz": 3}}, {"unknown": True},
            {"redis": {"appendfsync": "sometimes"}}, {"etcd": {"replicas": 0}},
            {"gateway": {"settings": {"max_value_bytes": "1MiB"}}},
            {"gateway": {"settings": {"auth_mode": "optional"}}},
            {"externalRedis": {"nodes": ["no-port"]}},
        ]
        for bad in bad_values:
            with pytest.raises(helm.HelmValuesError):
                chart.validate_schema(bad)


def test_rendering_refuses_bad_values_before_any_manifest() -> None:
    with pytest.raises(helm.HelmValuesError, match="replicas"):
        render_files({"gateway": {"replicas": "3"}})


def test_redis_or_etcd_off_without_endpoints_fails_with_hint() -> None:
    with pytest.raises(helm.HelmError, match=r"externalRedis\.nodes"):
        render_files({"redis": {"enabled": False}})
    with pytest.raises(helm.HelmError, match=r"externalEtcd\.endpoints"):
        render_files({"etcd": {"enabled": False}})


def test_shutdown_timeout_past_grace_period_is_refused() -> None:
    with pytest.raises(helm.HelmError, match="terminationGracePeriodSeconds"):
        render_files({"gateway": {"terminationGracePeriodSeconds": 20,
                                  "settings": {"shutdown_timeout_s": 25}}})
    render_files({"gateway": {"terminationGracePeriodSeconds": 60,
                              "settings": {"shutdown_timeout_s": 45}}})


def test_notes_explain_port_forward_publish_and_grafana() -> None:
    notes = render_files({})["streamgate/templates/NOTES.txt"]
    assert "kubectl -n streaming port-forward svc/sg-streamgate 8080:80" in notes
    assert "/v1/topics/orders/messages" in notes
    assert "curl" in notes
    assert "grafana_dashboard" in notes
    ingress_notes = render_files(SCENARIOS["ingress"])["streamgate/templates/NOTES.txt"]
    assert "https://streamgate.example.com" in ingress_notes
