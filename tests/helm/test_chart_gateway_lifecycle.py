"""The gateway pods' start, stop and placement: the startup probe, the preStop delay that the
grace period must cover with the drain, topology spread and priority class; NOTES.txt's console
URL."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest
from helm_render import SCENARIOS, manifests, merged, one, render_files


def gateway_pod(values: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = one(manifests(values), "Deployment")["spec"]["template"]["spec"]
    return pod


def gateway(pod: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = next(c for c in pod["containers"] if c["name"] == "gateway")
    return container


def test_startup_probe_waits_on_readiness_generously() -> None:
    probe = gateway(gateway_pod({}))["startupProbe"]
    assert probe["httpGet"] == {"path": "/readyz", "port": "http", "scheme": "HTTP"}
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 300


def test_grace_period_covers_the_prestop_sleep_and_the_drain() -> None:
    pod = gateway_pod({})
    sleep = gateway(pod)["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep"
    drain_s = 20  # values.yaml's gateway.settings.shutdown_timeout_s
    assert pod["terminationGracePeriodSeconds"] > int(sleep[1]) + drain_s


@pytest.mark.parametrize("gateway_values", [
    {"terminationGracePeriodSeconds": 25},
    {"preStopSleepSeconds": 15},
    {"settings": {"shutdown_timeout_s": 27.5}},
])
def test_chart_refuses_a_grace_period_shorter_than_the_drain(
        gateway_values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmError, match=r"must exceed gateway\.preStopSleepSeconds"):
        render_files({"gateway": gateway_values})


def test_no_prestop_hook_when_its_sleep_is_zero() -> None:
    assert "lifecycle" not in gateway(gateway_pod({"gateway": {"preStopSleepSeconds": 0}}))


def test_gateway_pods_spread_over_hostnames_and_zones_without_blocking_scheduling() -> None:
    spread = gateway_pod({})["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in spread] == ["kubernetes.io/hostname",
                                                  "topology.kubernetes.io/zone"]
    for constraint in spread:
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"
        assert constraint["maxSkew"] == 1
        assert constraint["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
            "gateway")
    off = gateway_pod({"gateway": {"topologySpread": {"enabled": False}}})
    assert "topologySpreadConstraints" not in off


def test_priority_class_is_set_only_when_named() -> None:
    assert "priorityClassName" not in gateway_pod({})
    named = gateway_pod(SCENARIOS["narrowed-network"])
    assert named["priorityClassName"] == "streaming-critical"


def notes(values: dict[str, Any]) -> str:
    return render_files(values)["streamgate/templates/NOTES.txt"]


def test_notes_print_the_console_url_through_port_forward_or_ingress() -> None:
    assert "http://127.0.0.1:8080/console/" in notes({})
    assert "https://streamgate.example.com/console/" in notes(SCENARIOS["ingress"])
    node_port = notes({"service": {"type": "NodePort"}})
    assert "or the NodePort Service sg-streamgate on port 80" in node_port
    disabled = merged({"gateway": {"settings": {"console_enabled": False}}})
    assert "/console/" not in notes(disabled)
