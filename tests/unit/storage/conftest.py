"""Fixtures shared by the storage unit tests: a fakeredis node reached through the node lanes as
the store reaches a node (``fake_node``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from storage.settings import RedisStoreSettings
from storage.wire.lanes import NodeLanes
from tests.unit.storage.fake_node import OneNodeRouter, fake_node


@pytest.fixture
def node_settings() -> RedisStoreSettings:
    """The store settings of the fake node's router and lanes (a module may override it)."""
    return RedisStoreSettings()


@pytest.fixture
async def node(node_settings: RedisStoreSettings) -> AsyncIterator[tuple[OneNodeRouter, NodeLanes]]:
    """A router to a fakeredis node and node lanes to it, closed before the server stops."""
    async with fake_node(node_settings) as (router, lanes):
        yield router, lanes


@pytest.fixture
def redis(node: tuple[OneNodeRouter, NodeLanes]) -> Any:
    """A fakeredis client of the same node, to arrange and inspect its data."""
    return node[0].cluster
