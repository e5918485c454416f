"""Pages of a pinned broadcast and CloudEvents answers at a schema version on the real cluster and
etcd: a page mixing versions goes out converted and in order, an error frame in the place of each
value that cannot be; events carry the converted data, its version and why one was not."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from test_schema_migrations import V1, V2, V2_MIGRATIONS, V3, V3_MIGRATIONS, publish, register
from test_schema_pinned_delivery import dead_letters, frames, pull, subscribe
from test_sse_events import open_stream

Client = TestClient[Any, Any]
BATCH = "application/cloudevents-batch+json"
EACH = 80  # values written under each version: the page is a few hundred entries


def before_schemas(n: int) -> dict[str, Any]:
    """A value written before the topic had a schema: even ones match v2 as they are."""
    return {"id": f"p{n}", "quantity": n} if n % 2 == 0 else {"id": f"p{n}", "qty": n}


def at_v2(n: int, version: int) -> dict[str, Any] | None:
    """Value ``n`` of ``version`` read at v2 (None: it cannot be)."""
    if version == 0:
        return before_schemas(n) if n % 2 == 0 else None
    if version == 1:
        return {"id": f"v1-{n}", "quantity": n, "currency": "EUR"}
    if version == 2:
        return {"id": f"v2-{n}", "quantity": n, "currency": "USD"}
    return None  # v3 declares no downgrade


@pytest.fixture
async def mixed_topic(gateway: Client, topic_name: str) -> str:
    """A topic holding EACH values written before it had a schema, then under v1, v2 and v3."""
    created = await gateway.post("/v1/topics", json={"name": topic_name, "partitions": 1})
    assert created.status == 201, await created.text()
    await publish(gateway, topic_name, *(before_schemas(n) for n in range(EACH)))
    await register(gateway, topic_name, V1)
    await publish(gateway, topic_name, *({"id": f"v1-{n}", "qty": n} for n in range(EACH)))
    await register(gateway, topic_name, V2, migrations=V2_MIGRATIONS)
    await publish(gateway, topic_name, *({"id": f"v2-{n}", "quantity": n, "currency": "USD"}
                                         for n in range(EACH)))
    await register(gateway, topic_name, V3, migrations=V3_MIGRATIONS)
    await publish(gateway, topic_name, *({"id": f"v3-{n}", "quantity": n, "note": "x"}
                                         for n in range(EACH)))
    return topic_name


def expected_at_v2() -> list[dict[str, Any] | None]:
    return [at_v2(n, version) for version in range(4) for n in range(EACH)]


def read_as(received: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
    """Each frame's value at v2, None for an error frame (checked to be a conversion failure)."""
    values: list[dict[str, Any] | None] = []
    for frame in received:
        if frame["type"] == "error":
            assert (frame["code"], frame["partition"]) == ("schema-conversion-failed", 0)
            assert frame["detail"].startswith("cannot convert to schema version 2")
            values.append(None)
        else:
            assert frame["headers"]["sg-schema-version"] == "2"
            values.append(frame["value"])
    return values


async def test_a_pinned_broadcast_gets_a_mixed_page_converted_in_order_with_error_frames(
        gateway: Client, mixed_topic: str) -> None:
    ws = await subscribe(gateway, mixed_topic, schema_version="2", **{"from": "earliest"})
    received = await frames(ws, 4 * EACH, ack=False)
    await ws.close()
    assert read_as(received) == expected_at_v2()
    offsets = [frame["offset"] for frame in received]
    assert offsets == sorted(offsets, key=lambda o: tuple(map(int, o.split("-"))))
    assert len(set(offsets)) == len(offsets)


async def test_a_pinned_broadcast_following_the_tail_converts_what_is_written_meanwhile(
        gateway: Client, topic_name: str) -> None:
    created = await gateway.post("/v1/topics", json={"name": topic_name, "partitions": 1})
    assert created.status == 201, await created.text()
    await register(gateway, topic_name, V1)
    ws = await subscribe(gateway, topic_name, schema_version="1", **{"from": "latest"})
    assert (await ws.receive_json())["type"] == "assignment"
    await publish(gateway, topic_name, *({"id": f"v1-{n}", "qty": n} for n in range(EACH)))
    await register(gateway, topic_name, V2, migrations=V2_MIGRATIONS)
    await publish(gateway, topic_name, *({"id": f"v2-{n}", "quantity": n, "currency": "USD"}
                                         for n in range(EACH)))
    await register(gateway, topic_name, V3, migrations=V3_MIGRATIONS)
    await publish(gateway, topic_name, {"id": "v3", "quantity": 1, "note": "x"})
    received = await frames(ws, 2 * EACH + 1, ack=False)
    await ws.close()
    assert [(frame["value"], frame["headers"]["sg-schema-version"])
            for frame in received[:-1]] == [({"id": f"v{v}-{n}", "qty": n}, "1")
                                            for v in (1, 2) for n in range(EACH)]
    assert received[-1]["type"] == "error"
    assert "declares no downgrade" in received[-1]["detail"]


async def test_a_cloudevents_replay_at_a_version_carries_converted_data_and_what_was_not(
        gateway: Client, mixed_topic: str) -> None:
    url = f"/v1/topics/{mixed_topic}/partitions/0/messages"
    params = {"limit": str(4 * EACH), "schema_version": "2"}
    response = await gateway.get(url, params=params, headers={"Accept": BATCH})
    assert response.status == 200, await response.text()
    events: list[dict[str, Any]] = await response.json(content_type=BATCH)
    plain = (await (await gateway.get(url, params=params)).json())["messages"]
    assert [event["sgoffset"] for event in events] == [m["offset"] for m in plain]
    # the same as the plain answer: converted, or as written with the same error
    assert [(e["data"], e.get("sgschemaerror")) for e in events] == [
        (m["value"], m.get("schema_error")) for m in plain]
    assert [e["data"] if "sgschemaerror" not in e else None for e in events] == expected_at_v2()
    written = {0: None, 1: 1, 2: 2, 3: 3}
    assert [e.get("sgschemaversion") for e in events] == [
        2 if at_v2(n, version) is not None else written[version]
        for version in range(4) for n in range(EACH)]
    assert "declares no downgrade" in events[-1]["sgschemaerror"]
    unversioned = await gateway.get(url, params={"limit": str(4 * EACH)},
                                    headers={"Accept": BATCH})
    as_written = await unversioned.json(content_type=BATCH)
    assert as_written[EACH]["data"] == {"id": "v1-0", "qty": 0}
    assert not [e for e in as_written if {"sgschemaversion", "sgschemaerror"} & e.keys()]


async def test_a_cloudevents_pull_of_a_pinned_group_is_converted_and_dead_letters_the_rest(
        gateway: Client, topic_name: str) -> None:
    created = await gateway.post("/v1/topics", json={"name": topic_name, "partitions": 1})
    assert created.status == 201, await created.text()
    await register(gateway, topic_name, V1)
    await publish(gateway, topic_name, {"id": "a", "qty": 1})
    await register(gateway, topic_name, V2, migrations=V2_MIGRATIONS)
    await publish(gateway, topic_name, {"id": "b", "quantity": 2, "currency": "USD"})
    await register(gateway, topic_name, V3, migrations=V3_MIGRATIONS)
    await publish(gateway, topic_name, {"id": "c", "quantity": 3, "note": "n"})
    response = await gateway.post("/v1/groups/ce-v1/pull", headers={"Accept": BATCH}, json={
        "topic": topic_name, "max_messages": 10, "wait_ms": 1000, "schema_version": 1})
    assert response.status == 200, await response.text()
    events = await response.json(content_type=BATCH)
    assert [(e["data"], e["sgschemaversion"]) for e in events] == [
        ({"id": "a", "qty": 1}, 1), ({"id": "b", "qty": 2}, 1)]
    letters = await dead_letters(gateway, topic_name, 1)
    assert [m["value"] for m in letters] == [{"id": "c", "quantity": 3, "note": "n"}]
    assert letters[0]["headers"]["sg-dlq-group"] == "ce-v1"
    assert "declares no downgrade" in letters[0]["headers"]["sg-dlq-reason"]
    unpinned = await pull(gateway, "ce-any", topic_name)
    assert [m["value"]["id"] for m in (await unpinned.json())["messages"]] == ["a", "b", "c"]


async def test_a_pinned_event_stream_gets_the_mixed_page_converted_with_error_events(
        gateway: Client, mixed_topic: str) -> None:
    reader = await open_stream(gateway, mixed_topic,
                               params={"from": "earliest", "schema_version": "2"})
    received: list[dict[str, Any]] = []
    while len(received) < 4 * EACH:
        event = await reader.next()
        assert event is not None, f"the stream ended after {len(received)} events"
        if event.get("event") in ("message", "error"):
            received.append(event["data"])
            assert "id" in event  # a failed conversion's error moves the cursor past it too
    reader.response.close()
    assert read_as(received) == expected_at_v2()
