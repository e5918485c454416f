"""The declared topics' Job: a post-install/post-upgrade hook that runs `streamgate topics apply`
on the values' list through the gateway Service, with the named API key."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import orjson
import pytest
from helm_render import CHART_DIR, SCENARIOS, manifests, merged, one, render_files

from streamgate_client.cli_topics_apply import parse_specs

HOOK = "post-install,post-upgrade"


def topics_objects(values: dict[str, Any], revision: int = 1) -> tuple[dict[str, Any],
                                                                        dict[str, Any]]:
    objects = manifests(values, revision)
    return one(objects, "ConfigMap", "-topics"), one(objects, "Job", "-topics")


def test_no_job_without_declared_topics() -> None:
    assert not [obj for obj in manifests({}) if obj["metadata"]["name"].endswith("-topics")]


@pytest.mark.parametrize("revision", [1, 2])
def test_job_applies_the_declared_list_after_install_and_upgrade(revision: int) -> None:
    values = SCENARIOS["declared-topics"]
    config, job = topics_objects(values, revision)
    for obj in (config, job):
        assert obj["metadata"]["annotations"]["helm.sh/hook"] == HOOK
    assert int(config["metadata"]["annotations"]["helm.sh/hook-weight"]) < 0
    document = orjson.loads(config["data"]["topics.json"])
    assert document == {"topics": values["topics"], "delete_unlisted": False}
    specs, delete_unlisted = parse_specs(document)
    assert [spec.name for spec in specs] == ["orders", "accounts", "old"]
    assert delete_unlisted is False
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] + container["args"][:3] == [
        "streamgate", "topics", "apply", "-f"]
    mount = container["volumeMounts"][0]["mountPath"]
    assert container["args"][3] == f"{mount}/topics.json"
    assert pod["volumes"][0]["configMap"]["name"] == config["metadata"]["name"]


def test_job_reaches_the_service_with_the_named_key_as_a_locked_down_pod() -> None:
    _, job = topics_objects(SCENARIOS["declared-topics"])
    pod = job["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["STREAMGATE_URL"]["value"] == "http://sg-streamgate:80"
    assert env["STREAMGATE_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "streamgate-ops", "key": "api-key"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    context = pod["containers"][0]["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}


def test_delete_unlisted_reaches_the_file() -> None:
    values = merged(SCENARIOS["declared-topics"], {"topicsJob": {"deleteUnlisted": True}})
    config, _ = topics_objects(values)
    assert orjson.loads(config["data"]["topics.json"])["delete_unlisted"] is True


def test_chart_refuses_declared_topics_without_a_key_when_auth_is_required() -> None:
    values = {"topics": [{"name": "orders", "partitions": 1}]}
    with pytest.raises(helm.HelmError, match=r"topicsJob\.apiKeySecret\.name"):
        render_files(values)
    open_gateway = merged(values, {"gateway": {"settings": {"auth_mode": "none"}}})
    _, job = topics_objects(open_gateway)
    env = {e["name"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env == {"STREAMGATE_URL"}


@pytest.mark.parametrize("bad", [
    {"name": "orders", "partitions": 0},
    {"name": "orders", "partitions": 1, "retention": 5},
    {"name": "bad name", "partitions": 1},
    {"name": "orders", "state": "gone"},
    {"partitions": 1},
])
def test_schema_refuses_a_malformed_topic(bad: dict[str, Any]) -> None:
    with helm.Chart.load(str(CHART_DIR)) as chart, pytest.raises(helm.HelmValuesError):
        chart.validate_schema({"topics": [bad]})



def ca_parts(job: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]]]:
    """The Job's CA flag and value, and its CA mounts and volumes (empty: none)."""
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    flag = args[args.index("--ca-file"):][:2] if "--ca-file" in args else []
    mounts = [m for m in container["volumeMounts"] if m["name"] == "ca"]
    return flag, mounts, [v for v in pod["volumes"] if v["name"] == "ca"]


TLS_TOPICS = merged(SCENARIOS["declared-topics"], SCENARIOS["tls-listener"])


@pytest.mark.parametrize(("source", "volume"), [
    ({"secretName": "gw-ca"}, {"secret": {"secretName": "gw-ca"}}),
    ({"configMapName": "gw-ca", "key": "root.pem"}, {"configMap": {"name": "gw-ca"}}),
])
def test_job_trusts_the_private_ca_of_a_tls_gateway(source: dict[str, str],
                                                     volume: dict[str, Any]) -> None:
    _, job = topics_objects(merged(TLS_TOPICS, {"topicsJob": {"caCert": source}}))
    key = source.get("key", "ca.crt")
    flag, mounts, volumes = ca_parts(job)
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["STREAMGATE_URL"]["value"] == "https://sg-streamgate:80"
    assert flag == ["--ca-file", f"{mounts[0]['mountPath']}/{key}"]
    assert mounts[0]["readOnly"] is True
    (kind,) = volume
    assert volumes[0][kind] == {**volume[kind], "items": [{"key": key, "path": key}]}


@pytest.mark.parametrize("values", [
    TLS_TOPICS,  # TLS under a public CA: the system's CAs
    merged(SCENARIOS["declared-topics"], {"topicsJob": {"caCert": {"secretName": "gw-ca"}}}),
], ids=["tls-without-ca", "ca-without-tls"])
def test_job_takes_no_ca_unless_tls_and_a_ca_are_both_set(values: dict[str, Any]) -> None:
    _, job = topics_objects(values)
    assert ca_parts(job) == ([], [], [])


def test_chart_refuses_a_ca_from_both_a_secret_and_a_config_map() -> None:
    values = merged(TLS_TOPICS, {"topicsJob": {"caCert": {"secretName": "a",
                                                          "configMapName": "b"}}})
    with pytest.raises(helm.HelmError, match=r"topicsJob\.caCert"):
        render_files(values)
