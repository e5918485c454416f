"""Topic administration over HTTP, against the in-memory registry."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from storage.models import ArchivedRange, PartitionInfo
from tests.unit.gateway.memory_store import InMemoryStreamStore

Client = TestClient[Any, Any]


async def test_create_topic_returns_201_with_metadata(client: Client) -> None:
    response = await client.post(
        "/v1/topics", json={"name": "orders", "partitions": 4, "retention_ms": 60000}
    )
    assert response.status == 201
    assert response.headers["Location"] == "/v1/topics/orders"
    body = await response.json()
    assert body["name"] == "orders"
    assert body["partitions"] == 4
    assert body["retention_ms"] == 60000
    assert body["owner"] == "anonymous"
    assert body["created_at_ms"] > 1_700_000_000_000


async def test_creating_an_existing_topic_is_409_problem(client: Client, orders: str) -> None:
    response = await client.post("/v1/topics", json={"name": orders, "partitions": 1})
    assert response.status == 409
    assert response.content_type == "application/problem+json"
    problem = await response.json()
    assert problem["status"] == 409
    assert problem["type"].endswith("/topic-exists")


async def test_invalid_topic_name_is_422_pointing_at_name(client: Client) -> None:
    response = await client.post("/v1/topics", json={"name": "bad name!", "partitions": 1})
    assert response.status == 422
    assert (await response.json())["pointer"] == "/name"


async def test_zero_partitions_is_422(client: Client) -> None:
    response = await client.post("/v1/topics", json={"name": "t", "partitions": 0})
    assert response.status == 422
    assert (await response.json())["pointer"] == "/partitions"


async def test_malformed_create_body_is_400(client: Client) -> None:
    response = await client.post(
        "/v1/topics", data=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status == 400
    assert response.content_type == "application/problem+json"


async def test_list_topics_is_sorted_by_name(client: Client) -> None:
    for name in ("zeta", "alpha"):
        await client.post("/v1/topics", json={"name": name, "partitions": 1})
    body = await (await client.get("/v1/topics")).json()
    assert [t["name"] for t in body["topics"]] == ["alpha", "zeta"]


async def test_describe_topic_has_partition_details(client: Client, orders: str) -> None:
    await client.post(
        f"/v1/topics/{orders}/messages", json={"messages": [{"value": 1, "partition": 2}]}
    )
    body = await (await client.get(f"/v1/topics/{orders}")).json()
    details = body["partition_details"]
    assert [d["partition"] for d in details] == [0, 1, 2]
    assert details[2]["length"] == 1
    assert details[2]["first_offset"] == details[2]["last_offset"] is not None
    assert details[0]["length"] == 0
    assert details[0]["first_offset"] is details[0]["last_offset"] is None
    assert details[2]["tiers"] == {"hot": {"first_offset": details[2]["first_offset"],
                                           "last_offset": details[2]["last_offset"],
                                           "entries": 1},
                                   "archive": None}  # this store has no archive tier
    assert details[2]["publish_rate_per_s"] > 0
    assert details[0]["publish_rate_per_s"] == 0
    # With 3 partitions no partition can exceed 3x the mean (the hot rule is tested with 4 in
    # test_hotspots).
    assert [d["hot"] for d in details] == [False, False, False]


async def test_describe_topic_spans_both_tiers(client: Client, orders: str,
                                                store: InMemoryStreamStore,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    archived = ArchivedRange("5-0", "9-3", 40, 2, 4096)

    async def tiered_info(topic: str, partitions: int) -> list[PartitionInfo]:
        return [PartitionInfo(0, 3, "10-0", "12-0", archived),
                PartitionInfo(1, 0, None, None, archived),
                PartitionInfo(2, 0, None, None, ArchivedRange(None, None, 0, 0, 0))]

    monkeypatch.setattr(store, "partition_info", tiered_info)
    details = (await (await client.get(f"/v1/topics/{orders}")).json())["partition_details"]
    bounds = [(d["length"], d["first_offset"], d["last_offset"]) for d in details]
    assert bounds == [(43, "5-0", "12-0"), (40, "5-0", "9-3"), (0, None, None)]
    assert details[0]["tiers"] == {
        "hot": {"first_offset": "10-0", "last_offset": "12-0", "entries": 3},
        "archive": {"first_offset": "5-0", "last_offset": "9-3", "entries": 40, "segments": 2,
                    "bytes": 4096}}


async def test_describe_topic_lists_heavy_keys(client: Client, orders: str) -> None:
    await client.post(
        f"/v1/topics/{orders}/messages", json={"messages": [{"value": 1, "key": "whale"}] * 20}
    )
    body = await (await client.get(f"/v1/topics/{orders}")).json()
    [whale_partition] = [d for d in body["partition_details"] if d["top_keys"]]
    assert whale_partition["top_keys"] == [{"key": "whale", "messages": 20}]
    metrics = await (await client.get("/metrics")).text()
    assert 'key="whale"' not in metrics, (
        "keys are message data: /metrics shows them only when metrics_expose_keys"
    )


async def test_describe_unknown_topic_is_404(client: Client) -> None:
    response = await client.get("/v1/topics/nope")
    assert response.status == 404
    assert (await response.json())["type"].endswith("/topic-not-found")


async def test_partitions_can_grow_but_not_shrink(client: Client, orders: str) -> None:
    grown = await client.patch(f"/v1/topics/{orders}", json={"partitions": 6})
    assert grown.status == 200
    assert (await grown.json())["partitions"] == 6
    shrunk = await client.patch(f"/v1/topics/{orders}", json={"partitions": 2})
    assert shrunk.status == 422
    assert (await shrunk.json())["pointer"] == "/partitions"


async def test_patch_changes_retention_and_clears_max_length(client: Client, orders: str) -> None:
    await client.patch(f"/v1/topics/{orders}", json={"max_length": 100})
    body = await (await client.patch(f"/v1/topics/{orders}",
                                     json={"retention_ms": 1000, "max_length": None})).json()
    assert body["retention_ms"] == 1000
    assert body["max_length"] is None


async def test_delete_topic_is_204_and_removes_data(
    client: Client, orders: str, store: Any
) -> None:
    await client.post(f"/v1/topics/{orders}/messages", json={"messages": [{"value": 1}]})
    assert (await client.delete(f"/v1/topics/{orders}")).status == 204
    assert (await client.get(f"/v1/topics/{orders}")).status == 404
    assert store.total_entries() == 0
    publish = await client.post(f"/v1/topics/{orders}/messages", json={"messages": [{"value": 1}]})
    assert publish.status == 404


async def test_unknown_route_is_a_problem_document(client: Client) -> None:
    response = await client.get("/v1/nothing-here")
    assert response.status == 404
    assert response.content_type == "application/problem+json"


async def test_chunked_create_body_is_read_whole(client: Client) -> None:
    async def chunks() -> Any:
        yield b'{"name": "chunked", '
        yield b'"partitions": 2}'

    response = await client.post(
        "/v1/topics", data=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status == 201


async def test_admin_body_over_64_kib_is_413_even_when_chunked(client: Client) -> None:
    async def chunks() -> Any:
        yield b'{"name": "big", "partitions": 1, "pad": "'
        for _ in range(70):
            yield b"x" * 1024
        yield b'"}'

    response = await client.post(
        "/v1/topics", data=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status == 413
    assert (await client.get("/v1/topics/big")).status == 404


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [{"key": "whale", "value": 1}]},  # the plain path
        {"messages": [{"key": "whale", "value": 1, "headers": {"h": "1"}}]},
    ],
    ids=["plain", "general"],
)
async def test_refused_publish_is_not_counted_as_traffic(
    client: Client, orders: str, store: Any, body: dict[str, Any]
) -> None:
    store.unavailable = True
    for acks in ("1", "all"):
        assert (
            await client.post(f"/v1/topics/{orders}/messages", json={**body, "acks": acks})
        ).status == 503
    details = (await (await client.get(f"/v1/topics/{orders}")).json())["partition_details"]
    assert all(d["publish_rate_per_s"] == 0 and d["top_keys"] == [] for d in details)
    store.unavailable = False
    assert (await client.post(f"/v1/topics/{orders}/messages", json=body)).status == 200
    details = (await (await client.get(f"/v1/topics/{orders}")).json())["partition_details"]
    assert [d["top_keys"] for d in details if d["top_keys"]] == [[{"key": "whale", "messages": 1}]]
