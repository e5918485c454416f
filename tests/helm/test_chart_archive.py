"""The archive tier in the chart: a path archive on a shared claim mounted by every gateway pod, an
S3 archive whose keys reach the gateway from a Secret only, and the values the chart refuses."""

from __future__ import annotations

import asyncio
from typing import Any

import helm_python as helm
import pytest
from helm_render import CHART_DIR, SCENARIOS, manifests, merged, one, render_files

from gateway.settings import GatewaySettings, settings_from_env
from storage.archive.object_store import open_archive

KEY_VARIABLES = {"STREAMGATE_ARCHIVE_S3_ACCESS_KEY", "STREAMGATE_ARCHIVE_S3_SECRET_KEY"}


def gateway_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = one(objects, "Deployment")["spec"]["template"]["spec"]
    return pod


def built_settings(objects: list[dict[str, Any]]) -> GatewaySettings:
    return settings_from_env(one(objects, "ConfigMap", "sg-streamgate")["data"])


def secret_refs(objects: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """The gateway container's variables set from a Secret: name -> its secretKeyRef."""
    env = gateway_pod(objects)["containers"][0]["env"]
    return {e["name"]: e["valueFrom"]["secretKeyRef"] for e in env
            if "secretKeyRef" in e.get("valueFrom", {})}


def opens(url: str) -> None:
    """The gateway's archive opener takes the URL (nothing is contacted)."""
    store = open_archive(url)
    asyncio.run(store.aclose())


def test_default_install_has_no_archive() -> None:
    objects = manifests({})
    assert "PersistentVolumeClaim" not in {o["kind"] for o in objects}
    assert built_settings(objects).archive_url == "none"
    assert not KEY_VARIABLES & set(secret_refs(objects))
    assert "archive" not in {v["name"] for v in gateway_pod(objects)["volumes"]}


def test_path_archive_is_a_kept_shared_claim_mounted_at_its_path() -> None:
    objects = manifests(SCENARIOS["archive-path"])
    claim = one(objects, "PersistentVolumeClaim", "-archive")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == "nfs"
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Ti"
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    pod = gateway_pod(objects)
    assert {"name": "archive", "persistentVolumeClaim": {"claimName": "sg-streamgate-archive"}} \
        in pod["volumes"]
    assert {"name": "archive", "mountPath": "/archive"} in pod["containers"][0]["volumeMounts"]
    settings = built_settings(objects)
    assert settings.archive_url == "file:///archive"
    opens(settings.archive_url)


def test_archive_policy_values_reach_the_gateway_settings() -> None:
    values = merged(SCENARIOS["archive-path"],
                    {"archive": {"hotRetentionMs": 900_000, "memoryWatermark": 0.5}})
    settings = built_settings(manifests(values))
    assert (settings.hot_retention_ms, settings.archive_memory_watermark) == (900_000, 0.5)
    built, defaults = built_settings(manifests({"archive": {"enabled": True}})), GatewaySettings()
    assert (built.hot_retention_ms, built.archive_memory_watermark) == \
        (defaults.hot_retention_ms, defaults.archive_memory_watermark)


def test_existing_claim_is_mounted_and_none_is_created() -> None:
    objects = manifests(merged(SCENARIOS["archive-path"],
                               {"archive": {"persistence": {"existingClaim": "shared-nfs"}}}))
    assert "PersistentVolumeClaim" not in {o["kind"] for o in objects}
    assert {"name": "archive", "persistentVolumeClaim": {"claimName": "shared-nfs"}} \
        in gateway_pod(objects)["volumes"]


def test_s3_keys_reach_the_gateway_from_the_secret_never_the_configmap() -> None:
    objects = manifests(SCENARIOS["archive-s3"])
    refs = secret_refs(objects)
    assert refs["STREAMGATE_ARCHIVE_S3_ACCESS_KEY"] == {"name": "sg-streamgate",
                                                        "key": "archive-s3-access-key"}
    assert refs["STREAMGATE_ARCHIVE_S3_SECRET_KEY"] == {"name": "sg-streamgate",
                                                        "key": "archive-s3-secret-key"}
    secret = one(objects, "Secret")["stringData"]
    assert (secret["archive-s3-access-key"], secret["archive-s3-secret-key"]) == \
        ("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG")
    config = one(objects, "ConfigMap", "sg-streamgate")["data"]
    assert not KEY_VARIABLES & set(config)
    assert not [v for v in config.values() if "AKIDEXAMPLE" in v or "wJalrXUtnFEMI" in v]
    settings = settings_from_env(config)
    assert (settings.archive_url, settings.archive_s3_endpoint, settings.archive_s3_region,
            settings.archive_s3_scheme, settings.archive_s3_credentials_chain) == \
        ("s3://sg-archive/prod", "minio.storage:9000", "eu-1", "http", False)
    assert "PersistentVolumeClaim" not in {o["kind"] for o in objects}


def test_s3_keys_from_an_existing_secret_under_its_own_key_names() -> None:
    s3 = {"existingSecret": "archive-creds", "accessKeyKey": "id", "secretKeyKey": "secret",
          "accessKey": "", "secretKey": ""}
    objects = manifests(merged(SCENARIOS["archive-s3"], {"archive": {"s3": s3}}))
    refs = secret_refs(objects)
    assert refs["STREAMGATE_ARCHIVE_S3_ACCESS_KEY"] == {"name": "archive-creds", "key": "id"}
    assert refs["STREAMGATE_ARCHIVE_S3_SECRET_KEY"] == {"name": "archive-creds", "key": "secret"}
    assert not {"id", "secret", "archive-s3-access-key"} & set(one(objects, "Secret")["stringData"])


def test_s3_keys_in_the_auth_existing_secret() -> None:
    s3 = {"accessKey": "", "secretKey": ""}
    objects = manifests(merged(SCENARIOS["archive-s3"], SCENARIOS["existing-secret"],
                               {"archive": {"s3": s3}}))
    assert {ref["name"] for ref in secret_refs(objects).values()} == {"my-streamgate-secrets"}


def test_credentials_chain_passes_no_keys() -> None:
    s3 = {"accessKey": "", "secretKey": "", "credentialsChain": True}
    objects = manifests(merged(SCENARIOS["archive-s3"], {"archive": {"s3": s3}}))
    assert not KEY_VARIABLES & set(secret_refs(objects))
    assert built_settings(objects).archive_s3_credentials_chain is True


def test_changed_s3_keys_roll_the_pods() -> None:
    def secret_checksum(values: dict[str, Any]) -> str:
        annotations = one(manifests(values), "Deployment")["spec"]["template"]["metadata"][
            "annotations"]
        return str(annotations["checksum/secret"])

    rotated = merged(SCENARIOS["archive-s3"], {"auth": {"receiptSecret": "r" * 32}},
                     {"archive": {"s3": {"secretKey": "rotated"}}})
    before = merged(SCENARIOS["archive-s3"], {"auth": {"receiptSecret": "r" * 32}})
    assert secret_checksum(rotated) != secret_checksum(before)


@pytest.mark.parametrize("bad", [
    {"enabled": True, "url": ""}, {"url": "file:///archive"}, {"url": "relative/dir"},
    {"url": "s3://"}, {"memoryWatermark": 1}, {"memoryWatermark": 0}, {"hotRetentionMs": -1},
    {"s3": {"scheme": "ftp"}}, {"s3": {"endpoint": "http://minio:9000"}},
    {"persistence": {"accessModes": []}}, {"persistence": {"accessModes": ["ReadMany"]}},
    {"persistence": {"size": "lots"}}, {"bucket": "unknown-key"},
])
def test_schema_refuses_archive_values_the_gateway_could_not_use(bad: dict[str, Any]) -> None:
    with helm.Chart.load(str(CHART_DIR)) as chart, pytest.raises(helm.HelmValuesError):
        chart.validate_schema({"archive": bad})


@pytest.mark.parametrize(("archive", "message"), [
    ({"memoryWatermark": 0.95}, "publish_memory_watermark"),
    ({"persistence": {"accessModes": ["ReadWriteOnce"]}}, "ReadWriteMany"),
])
def test_rendering_refuses_a_path_archive_that_could_not_work(archive: dict[str, Any],
                                                              message: str) -> None:
    with pytest.raises(helm.HelmError, match=message):
        render_files(merged(SCENARIOS["archive-path"], {"archive": archive}))


def test_a_single_gateway_may_write_a_read_write_once_claim() -> None:
    values = merged(SCENARIOS["archive-path"], {"gateway": {"replicas": 1},
                                                "archive": {"persistence": {
                                                    "accessModes": ["ReadWriteOnce"]}}})
    claim = one(manifests(values), "PersistentVolumeClaim", "-archive")
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]


@pytest.mark.parametrize(("s3", "auth", "message"), [
    ({"accessKey": "", "secretKey": ""}, {}, "needs credentials"),
    ({"secretKey": ""}, {}, "go together"),
    ({"existingSecret": "archive-creds"}, {}, "put them in that Secret"),
    ({}, {"existingSecret": "mine"}, "put them in that Secret"),
])
def test_rendering_refuses_s3_keys_that_would_not_reach_the_gateway(
        s3: dict[str, Any], auth: dict[str, Any], message: str) -> None:
    values = merged(SCENARIOS["archive-s3"], {"archive": {"s3": s3}, "auth": auth})
    with pytest.raises(helm.HelmError, match=message):
        render_files(values)
