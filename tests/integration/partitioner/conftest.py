"""Fixtures shared by the etcd-backed partitioner tests: a private key prefix, a connection and a
topic registry."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from partitioner.etcd.connection import EtcdConnection, open_etcd
from partitioner.etcd_registry import EtcdTopicRegistry


@pytest.fixture
def prefix() -> str:
    return f"/streamgate-test-{uuid.uuid4().hex}/"


@pytest.fixture
async def conn(etcd_server: Any) -> AsyncIterator[EtcdConnection]:
    async with open_etcd([etcd_server.endpoint], timeout_s=2.0) as connection:
        yield connection


@pytest.fixture
def registry(conn: EtcdConnection, prefix: str) -> EtcdTopicRegistry:
    return EtcdTopicRegistry(conn, prefix)
