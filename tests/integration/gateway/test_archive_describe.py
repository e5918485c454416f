"""A gateway with an archive on a local path (``test_archive_gateway``'s): describing a topic shows
each partition's hot and archived ranges, and the owner's retention round drops whole archived
segments by the whole log's length, counted with the stream's trims."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import requests
from http_reads import replay_all

from tests.integration.gateway.test_archive_gateway import (  # noqa: F401
    archive_dir,
    archiving_gateway,
)

pytestmark = pytest.mark.integration


def _partition(url: str, topic: str) -> dict[str, Any]:
    described = requests.get(f"{url}/v1/topics/{topic}", timeout=30)
    assert described.status_code == 200, described.text
    details: dict[str, Any] = described.json()["partition_details"][0]
    return details


def _wait_for(read: Callable[[], dict[str, Any]], condition: Callable[[dict[str, Any]], bool],
              timeout_s: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while not condition(seen := read()):
        assert time.monotonic() < deadline, f"timed out; last seen {seen}"
        time.sleep(0.2)
    return seen


def test_describe_shows_both_tiers_and_retention_drops_whole_segments(
        archiving_gateway: str) -> None:  # noqa: F811
    gateway = archiving_gateway
    topic = f"tiers-{uuid.uuid4().hex[:8]}"
    assert requests.post(f"{gateway}/v1/topics", json={"name": topic, "partitions": 1},
                         timeout=30).status_code == 201
    published = requests.post(f"{gateway}/v1/topics/{topic}/messages", timeout=30, json={
        "acks": "all", "messages": [{"value": n} for n in range(300)]}).json()
    offsets = [result["offset"] for result in published["results"]]

    details = _wait_for(lambda: _partition(gateway, topic),
                        lambda d: d["tiers"]["archive"]["entries"] == 300)
    archive = details["tiers"]["archive"]
    assert (archive["first_offset"], archive["last_offset"]) == (offsets[0], offsets[-1])
    assert archive["segments"] >= 2  # 150 entries at most each
    assert archive["bytes"] > 0
    assert details["tiers"]["hot"] == {"first_offset": None, "last_offset": None, "entries": 0}
    assert (details["length"], details["first_offset"], details["last_offset"]) == (
        300, offsets[0], offsets[-1])

    assert requests.patch(f"{gateway}/v1/topics/{topic}", json={"max_length": 100},
                          timeout=30).status_code == 200
    # whole segments go, the oldest first, while at least 100 entries are left
    details = _wait_for(lambda: _partition(gateway, topic), lambda d: d["length"] < 300)
    kept = details["length"]
    assert 100 <= kept < 250
    assert details["first_offset"] == details["tiers"]["archive"]["first_offset"]
    assert details["first_offset"] == offsets[300 - kept]
    assert [m["offset"] for m in replay_all(gateway, topic, 0, page=64)] == offsets[300 - kept:]
    metrics = requests.get(f"{gateway}/metrics", timeout=10).text
    trimmed = re.search(
        rf'^streamgate_retention_trimmed_entries_total{{topic="{topic}"}} (\S+)$', metrics, re.M)
    assert trimmed is not None
    assert float(trimmed.group(1)) == 300 - kept
