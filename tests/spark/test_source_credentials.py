"""The source's planning reads from a gateway with auth required: refused without credentials (the
error naming HTTP 401, never the credentials), answered with the source's ``apiKey``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from served import serve_gateway

from streamgate_client.admin import Admin
from streamgate_spark.errors import InvalidSourceOption
from streamgate_spark.options import parse_options
from streamgate_spark.schema_reading import schema_reading
from streamgate_spark.topic_partitions import source_partitions
from tests.integration.gateway.auth_config import api_keys, rule

ADMIN_KEY, READER_KEY = "sgk_admin-key-of-the-source-tests", "sgk_reader-key-of-the-source-tests"
CONFIG = (api_keys({"admin": ADMIN_KEY, "reader": READER_KEY})
          + rule(["admin"], ["*"], ["publish", "subscribe", "admin"])
          + rule(["reader"], ["sc-*"], ["subscribe"]))
V1 = {"type": "object", "properties": {"id": {"type": "string"}}}
V2 = {"type": "object", "properties": {"id": {"type": "string"}, "n": {"type": "integer"}}}


@pytest.fixture(scope="module")
def secured_gateway(redis_cluster: Any, etcd_server: Any,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config: Path = tmp_path_factory.mktemp("auth") / "auth.toml"
    config.write_text(CONFIG)
    yield from serve_gateway(redis_cluster, etcd_server, {
        "STREAMGATE_AUTH_MODE": "required", "STREAMGATE_AUTH_CONFIG_PATH": str(config)})


@pytest.fixture
def versioned_topic(secured_gateway: str) -> str:
    """Two partitions and two schema versions, made by the admin."""
    topic = f"sc-{uuid.uuid4().hex[:10]}"

    async def build() -> None:
        async with Admin(secured_gateway, api_key=ADMIN_KEY) as admin:
            await admin.create_topic(topic, 2)
            for schema in (V1, V2):
                await admin.register_schema(topic, schema, compatibility="none")
    asyncio.run(build())
    return topic


def source_options(gateway: str, topic: str, **credentials: str) -> dict[str, str]:
    return {"topic": topic, "redisNodes": "127.0.0.1:7000", "gateway": gateway,
            "schemaVersion": "1", **credentials}


def test_schema_reads_without_credentials_are_refused_naming_http_401(
        secured_gateway: str, versioned_topic: str) -> None:
    options = parse_options(source_options(secured_gateway, versioned_topic))
    with pytest.raises(InvalidSourceOption, match="HTTP 401") as refused:
        schema_reading(options)
    assert "apiKey" in str(refused.value)
    with pytest.raises(InvalidSourceOption, match=r"HTTP 401.*apiKey"):
        source_partitions(options)


def test_with_an_api_key_the_planning_reads_the_partitions_and_versions(
        secured_gateway: str, versioned_topic: str) -> None:
    options = parse_options(source_options(secured_gateway, versioned_topic, apiKey=READER_KEY))
    assert source_partitions(options) == (0, 1)
    reading = schema_reading(options)
    assert reading is not None
    assert (reading.version, reading.versions) == (1, (1, 2))
    assert [doc["schema"] for doc in reading.documents] == [V1, V2]


def test_a_wrong_api_key_is_refused_without_showing_it(
        secured_gateway: str, versioned_topic: str) -> None:
    wrong = "sgk_not-a-key-of-this-gateway"
    options = parse_options(source_options(secured_gateway, versioned_topic, apiKey=wrong))
    with pytest.raises(InvalidSourceOption, match="HTTP 401") as refused:
        schema_reading(options)
    assert wrong not in str(refused.value)
