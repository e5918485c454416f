"""Each gateway pod announces http(s)://<its pod IP>:<port>: the downward API's pod IP in the
Deployment's env, the scheme following the listener's TLS; gateway.extraEnv may announce another."""

from __future__ import annotations

from typing import Any

from helm_render import SCENARIOS, manifests, one

from gateway.settings import GatewaySettings


def gateway_env(values: dict[str, Any]) -> list[dict[str, Any]]:
    pod = one(manifests(values), "Deployment")["spec"]["template"]["spec"]
    [container] = [c for c in pod["containers"] if c["name"] == "gateway"]
    env: list[dict[str, Any]] = container["env"]
    return env


def advertised(values: dict[str, Any], pod_ip: str) -> str:
    """The URL a pod with ``pod_ip`` announces, as the kubelet expands the rendered env."""
    env = gateway_env(values)
    names = [entry["name"] for entry in env]
    # $(VAR) expands only variables defined earlier in the list
    assert names.index("POD_IP") < names.index("STREAMGATE_ADVERTISE_URL")
    assert env[names.index("POD_IP")]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    template: str = env[names.index("STREAMGATE_ADVERTISE_URL")]["value"]
    return template.replace("$(POD_IP)", pod_ip)


def test_gateway_pods_announce_their_pod_ip_and_port_over_http() -> None:
    url = advertised({"gateway": {"port": 9090}}, "10.1.2.3")
    assert url == "http://10.1.2.3:9090"
    assert GatewaySettings(advertise_url=url).advertised_url == url


def test_gateway_pods_announce_https_when_the_listener_serves_tls() -> None:
    assert advertised(SCENARIOS["tls-listener"], "10.1.2.3") == "https://10.1.2.3:8080"


def test_an_advertise_url_in_extra_env_replaces_the_computed_one() -> None:
    own = {"name": "STREAMGATE_ADVERTISE_URL", "value": "http://[$(POD_IP)]:8080"}
    env = gateway_env({"gateway": {"extraEnv": [own]}})
    assert [entry for entry in env if entry["name"] == "STREAMGATE_ADVERTISE_URL"] == [own]
    names = [entry["name"] for entry in env]
    assert names.index("POD_IP") < names.index("STREAMGATE_ADVERTISE_URL")
    url = own["value"].replace("$(POD_IP)", "fd00::7")
    assert GatewaySettings(advertise_url=url).advertised_url == "http://[fd00::7]:8080"
