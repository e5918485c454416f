"""The chart's NetworkPolicies: who reaches the gateway, Redis and etcd, and what the gateway
reaches, for the in-chart datastores, external ones, an S3 archive and push endpoints."""

from __future__ import annotations

from typing import Any

from helm_render import SCENARIOS, manifests, merged, one

SELECTOR = {"app.kubernetes.io/name": "streamgate", "app.kubernetes.io/instance": "sg"}


def policies(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Component of the pods each NetworkPolicy selects -> its spec."""
    return {obj["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"]: obj["spec"]
            for obj in manifests(values) if obj["kind"] == "NetworkPolicy"}


def component(name: str) -> dict[str, Any]:
    return {"podSelector": {"matchLabels": SELECTOR | {"app.kubernetes.io/component": name}}}


def ports(rule: dict[str, Any]) -> set[tuple[int, str]]:
    return {(port["port"], port["protocol"]) for port in rule["ports"]}


def egress_by_ports(spec: dict[str, Any]) -> dict[frozenset[tuple[int, str]], list[Any]]:
    return {frozenset(ports(rule)): rule.get("to") for rule in spec["egress"]}


def test_gateway_takes_its_port_from_anywhere_and_reaches_only_dns_redis_and_etcd() -> None:
    gateway = policies({})["gateway"]
    assert gateway["policyTypes"] == ["Ingress", "Egress"]
    assert gateway["ingress"] == [{"ports": [{"port": 8080, "protocol": "TCP"}]}]
    assert egress_by_ports(gateway) == {
        frozenset({(53, "UDP"), (53, "TCP")}): [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
        frozenset({(6379, "TCP")}): [component("redis")],
        frozenset({(2379, "TCP")}): [component("etcd")],
    }


def test_redis_and_etcd_take_only_the_gateway_their_peers_and_their_job() -> None:
    found = policies({})
    for name, client, peer_ports, job in (("redis", 6379, {6379, 16379}, "redis-cluster-create"),
                                          ("etcd", 2379, {2379, 2380}, "etcd-members")):
        spec = found[name]
        assert spec["policyTypes"] == ["Ingress"]
        clients, peers = spec["ingress"]
        assert ports(clients) == {(client, "TCP")}
        assert clients["from"] == [component("gateway"), component(job)]
        assert ports(peers) == {(port, "TCP") for port in peer_ports}
        assert peers["from"] == [component(name)]


def test_narrowed_ingress_keeps_prometheus_the_gateways_and_the_charts_jobs() -> None:
    values = SCENARIOS["narrowed-network"]
    gateway = policies(values)["gateway"]
    (ingress,) = gateway["ingress"]
    assert ingress["from"] == [
        *values["networkPolicy"]["ingressFrom"], *values["networkPolicy"]["metricsFrom"],
        component("gateway"), component("topics"), component("helm-test")]
    assert gateway["egress"][-1] == values["networkPolicy"]["extraEgress"][0]


def test_external_datastores_are_reached_on_their_ports_within_the_given_cidrs() -> None:
    values = merged(SCENARIOS["external-redis"], SCENARIOS["external-etcd"],
                    {"externalRedis": {"nodes": ["10.1.0.5:6379", "10.1.0.6:7000"]},
                     "networkPolicy": {"externalRedisCIDRs": ["10.1.0.0/24"]}})
    found = policies(values)
    egress = egress_by_ports(found["gateway"])
    assert egress[frozenset({(6379, "TCP"), (7000, "TCP")})] == [{"ipBlock": {"cidr":
                                                                            "10.1.0.0/24"}}]
    assert egress[frozenset({(2379, "TCP")})] == [{"ipBlock": {"cidr": "0.0.0.0/0"}},
                                                  {"ipBlock": {"cidr": "::/0"}}]
    assert set(found) == {"gateway"}


def test_s3_archive_is_reached_on_its_endpoint_port_or_the_schemes() -> None:
    with_port = egress_by_ports(policies(SCENARIOS["archive-s3"])["gateway"])
    assert frozenset({(9000, "TCP")}) in with_port
    aws = merged(SCENARIOS["archive-s3"], {"archive": {"s3": {"endpoint": "", "scheme": "https"}},
                                           "networkPolicy": {"archiveCIDRs": ["52.0.0.0/8"]}})
    assert egress_by_ports(policies(aws)["gateway"])[frozenset({(443, "TCP")})] == [
        {"ipBlock": {"cidr": "52.0.0.0/8"}}]


def test_push_endpoints_are_reached_only_once_push_is_allowed() -> None:
    pushing = merged({"gateway": {"settings": {"push_allowed_hosts": ["*.hooks.example.com"]}},
                      "networkPolicy": {"pushCIDRs": ["203.0.113.0/24"], "pushPorts": [443, 8443]}})
    egress = egress_by_ports(policies(pushing)["gateway"])
    assert egress[frozenset({(443, "TCP"), (8443, "TCP")})] == [
        {"ipBlock": {"cidr": "203.0.113.0/24"}}]
    assert frozenset({(443, "TCP")}) not in egress_by_ports(policies({})["gateway"])
    configmap = one(manifests(pushing), "ConfigMap", "sg-streamgate")
    assert configmap["data"]["STREAMGATE_PUSH_ALLOWED_HOSTS"] == "*.hooks.example.com"


def test_network_policies_can_be_switched_off() -> None:
    assert policies(SCENARIOS["no-network-policy"]) == {}
    redis = one(manifests({}), "NetworkPolicy", "-redis")
    assert redis["metadata"]["name"] == "sg-streamgate-redis"
