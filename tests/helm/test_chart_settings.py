"""values.yaml mirrors GatewaySettings (names and defaults), and the rendered ConfigMap/Secret build
the same settings and auth config the gateway would load."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path
from typing import Any

import yaml
from helm_render import CHART_DIR, SCENARIOS, manifests, one

from gateway.auth.config import parse_auth_config
from gateway.settings import ENV_PREFIX, GatewaySettings, settings_from_env

# Settings the chart computes, so they are not in values.yaml's gateway.settings (values.yaml
# documents this list); the archive's come from values.yaml's archive block.
CHART_COMPUTED = frozenset({"host", "port", "node_id", "redis_nodes", "etcd_endpoints",
                            "redis_password", "receipt_secret", "auth_config_path",
                            "archive_url", "hot_retention_ms", "archive_memory_watermark",
                            "archive_s3_endpoint", "archive_s3_region", "archive_s3_scheme",
                            "archive_s3_credentials_chain", "archive_s3_access_key",
                            "archive_s3_secret_key", "advertise_url"})
SCHEMA_TYPES = {"int": "integer", "float": "number", "str": "string", "bool": "boolean"}


def settings_fields() -> dict[str, dataclasses.Field[Any]]:
    return {spec.name: spec for spec in dataclasses.fields(GatewaySettings)}


def values_file() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    return loaded


def schema_file() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART_DIR / "values.schema.json").read_text())
    return loaded


def test_values_settings_are_gateway_settings_minus_computed() -> None:
    fields = settings_fields()
    assert fields.keys() >= CHART_COMPUTED, ("a computed setting no longer exists: update "
                                             "CHART_COMPUTED and values")
    assert set(values_file()["gateway"]["settings"]) == set(fields) - CHART_COMPUTED


def test_values_yaml_documents_every_computed_setting() -> None:
    lines = (CHART_DIR / "values.yaml").read_text().splitlines()
    above = lines[:lines.index("  settings:")]
    comments = len(above) - next(i for i, line in enumerate(reversed(above))
                                 if not line.lstrip().startswith("#"))
    header = "\n".join(above[comments:])
    for name in CHART_COMPUTED:
        assert name in header, f"values.yaml must say that {name} is computed by the chart"


def test_values_defaults_equal_gateway_defaults() -> None:
    defaults = GatewaySettings()
    for name, value in values_file()["gateway"]["settings"].items():
        expected = getattr(defaults, name)
        assert value == (list(expected) if isinstance(expected, tuple) else expected), name
        assert type(value) is not bool or type(expected) is bool, name


def test_schema_types_follow_the_settings_annotations() -> None:
    properties = schema_file()["properties"]["gateway"]["properties"]["settings"]["properties"]
    fields = settings_fields()
    assert set(properties) == set(fields) - CHART_COMPUTED
    for name, prop in properties.items():
        annotation = str(fields[name].type)
        if annotation.startswith("tuple"):
            assert prop["type"] == "array", name
            assert prop["items"] == {"type": "string"}, name
        elif annotation.endswith(" | None"):
            assert prop["type"] == [SCHEMA_TYPES[annotation.removesuffix(" | None")], "null"], name
        else:
            assert prop["type"] == SCHEMA_TYPES[annotation], name


def configmap_env(values: dict[str, Any]) -> dict[str, str]:
    data: dict[str, str] = one(manifests(values), "ConfigMap", "sg-streamgate")["data"]
    assert all(isinstance(value, str) for value in data.values())
    return data


def test_configmap_builds_defaults_with_computed_endpoints() -> None:
    env = configmap_env({})
    built = settings_from_env(env)
    defaults = GatewaySettings()
    for name in set(settings_fields()) - CHART_COMPUTED:
        assert getattr(built, name) == getattr(defaults, name), name
    headless = "sg-streamgate-redis-headless.streaming.svc.cluster.local"
    assert built.redis_nodes == tuple(f"sg-streamgate-redis-{i}.{headless}:6379" for i in range(6))
    etcd = "sg-streamgate-etcd-headless.streaming.svc.cluster.local"
    assert built.etcd_endpoints == tuple(f"sg-streamgate-etcd-{i}.{etcd}:2379" for i in range(3))
    assert built.auth_config_path == "/etc/streamgate/auth/auth.toml"
    assert not {ENV_PREFIX + name.upper()
                for name in ("host", "port", "node_id", "redis_password")} & set(env)


def test_configmap_renders_overrides_parseably_and_omits_nulls() -> None:
    overrides = {"dedup_ttl_ms": 172_800_000, "max_batch_bytes": 33_554_432,
                 "rate_limit_topic_bytes_per_s": 2.5,
                 "rate_limit_principal_messages_per_s": 1_000_000.0,
                 "auth_public_paths": ["/healthz"], "redis_tls": True,
                 "redis_tls_check_hostname": False, "etcd_prefix": "/sg-prod/",
                 "tls_client_ca_path": None}
    env = configmap_env({"gateway": {"settings": overrides}})
    built = settings_from_env(env)
    for name, value in overrides.items():
        assert getattr(built, name) == (tuple(value) if isinstance(value, list) else value), name
    assert env["STREAMGATE_DEDUP_TTL_MS"] == "172800000"  # no float exponent for large whole
                                                          # numbers
    assert "STREAMGATE_TLS_CLIENT_CA_PATH" not in env
    assert "STREAMGATE_RATE_LIMIT_PRINCIPAL_READS_PER_S" not in env


def test_external_redis_and_etcd_endpoints_are_passed_through() -> None:
    built = settings_from_env(configmap_env(SCENARIOS["external-redis"]))
    assert built.redis_nodes == ("redis-a.db:6379", "redis-b.db:6379")
    built = settings_from_env(configmap_env(SCENARIOS["external-etcd"]))
    assert built.etcd_endpoints == ("etcd-0.coord:2379", "etcd-1.coord:2379")
    objects = manifests(merged_external())
    assert not [o for o in objects if o["kind"] in {"StatefulSet", "Job"}]
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert "initContainers" not in pod  # no wait for an in-chart cluster that does not exist


def merged_external() -> dict[str, Any]:
    return {**SCENARIOS["external-redis"], **SCENARIOS["external-etcd"]}


def test_default_auth_config_loads_with_no_keys() -> None:
    secret = one(manifests({}), "Secret")
    config = parse_auth_config(tomllib.loads(secret["stringData"]["auth.toml"]),
                               Path("/etc/streamgate/auth"), {})
    assert len(config.api_keys) == 0
    assert config.jwt is None
    assert set(secret["stringData"]) == {"auth.toml", "redis-password", "receipt-secret"}


def test_in_chart_redis_gets_generated_password_external_none() -> None:
    generated = one(manifests({}), "Secret")["stringData"]["redis-password"]
    assert len(generated) == 32
    assert generated.isalnum()
    assert "redis-password" not in one(manifests(SCENARIOS["external-redis"]), "Secret")[
        "stringData"]
    given = {**SCENARIOS["external-redis"], "auth": {"redisPassword": "their-password"}}
    assert one(manifests(given), "Secret")["stringData"]["redis-password"] == "their-password"


def test_created_secret_holds_auth_files_jwt_and_redis_password() -> None:
    data = one(manifests(SCENARIOS["created-secret"]), "Secret")["stringData"]
    assert set(data) == {"auth.toml", "jwks.json", "jwt-secret", "redis-password", "receipt-secret"}
    assert len(data["receipt-secret"]) == 48
    config = parse_auth_config(tomllib.loads(data["auth.toml"]), Path("/etc/streamgate/auth"), {})
    assert len(config.api_keys) == 1


def test_existing_secret_replaces_the_created_one_everywhere() -> None:
    objects = manifests(SCENARIOS["existing-secret"])
    assert not [o for o in objects if o["kind"] == "Secret"]
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "auth",
            "secret": {"secretName": "my-streamgate-secrets", "defaultMode": 0o440}} \
        in pod["volumes"]
    refs = [e["valueFrom"]["secretKeyRef"]["name"]
            for c in pod["containers"] + pod["initContainers"]
            for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})]
    assert refs
    assert set(refs) == {"my-streamgate-secrets"}


def test_pods_roll_when_settings_or_secrets_change() -> None:
    def checksums(values: dict[str, Any]) -> dict[str, str]:
        annotations: dict[str, str] = one(manifests(values), "Deployment")["spec"]["template"][
            "metadata"]["annotations"]
        return annotations

    base = checksums({})
    changed_setting = checksums({"gateway": {"settings": {"max_headers": 10}}})
    changed_secret = checksums({"auth": {"jwtSecret": "y" * 32}})
    assert changed_setting["checksum/config"] != base["checksum/config"]
    assert changed_secret["checksum/secret"] != base["checksum/secret"]


def test_chart_app_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    project = tomllib.loads((CHART_DIR.parents[1] / "pyproject.toml").read_text())["project"]
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == project["version"]
