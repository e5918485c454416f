"""Publishing over HTTP: results, placement, acks, idempotency and every kind of bad input."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import orjson
from aiohttp.test_utils import TestClient

from partitioner.hashing import partition_for

Client = TestClient[Any, Any]


async def publish(client: Client, topic: str, body: Any, **kwargs: Any) -> Any:
    return await client.post(f"/v1/topics/{topic}/messages", json=body, **kwargs)


async def test_publish_returns_results_in_input_order(client: Client, orders: str) -> None:
    messages = [{"key": f"user-{i}", "value": {"n": i}} for i in range(10)]
    response = await publish(client, orders, {"messages": messages, "acks": "1"})
    assert response.status == 200
    results = (await response.json())["results"]
    assert [r["partition"] for r in results] == [partition_for(f"user-{i}".encode(), 3)
                                                 for i in range(10)]
    assert all(r["duplicate"] is False for r in results)


async def test_same_key_lands_on_same_partition_as_kafka(client: Client, orders: str) -> None:
    body = {"messages": [{"key": "alice", "value": 1}, {"key": "alice", "value": 2}]}
    results = (await (await publish(client, orders, body)).json())["results"]
    assert results[0]["partition"] == results[1]["partition"] == partition_for(b"alice", 3)


async def test_explicit_partition_wins_over_key(client: Client, orders: str) -> None:
    body = {"messages": [{"key": "alice", "value": 1, "partition": 2}]}
    assert (await (await publish(client, orders, body)).json())["results"][0]["partition"] == 2


async def test_partition_out_of_range_is_422_and_writes_nothing(client: Client, orders: str,
                                                                store: Any) -> None:
    body = {"messages": [{"value": 1}, {"value": 2, "partition": 3}]}
    response = await publish(client, orders, body)
    assert response.status == 422
    assert (await response.json())["pointer"] == "/messages/1/partition"
    assert store.total_entries() == 0


async def test_acks_zero_returns_202_and_writes_in_background(client: Client, orders: str,
                                                              store: Any) -> None:
    response = await publish(client, orders,
                             {"messages": [{"value": i} for i in range(5)], "acks": "0"})
    assert response.status == 202
    assert await response.json() == {"accepted": 5}
    for _ in range(100):
        if store.total_entries() == 5:
            break
        await asyncio.sleep(0.01)
    assert store.total_entries() == 5


async def test_idempotent_retry_returns_first_offset_as_duplicate(client: Client, orders: str,
                                                                   store: Any) -> None:
    body = {"messages": [{"value": "x", "idempotency_key": "order-1"}]}
    first = (await (await publish(client, orders, body)).json())["results"][0]
    second = (await (await publish(client, orders, body)).json())["results"][0]
    assert second == {**first, "duplicate": True}
    assert store.total_entries() == 1


async def test_idempotency_key_header_dedups_a_whole_batch_retry(client: Client, orders: str,
                                                                  store: Any) -> None:
    body = {"messages": [{"value": 1}, {"value": 2}]}
    headers = {"Idempotency-Key": "batch-7"}
    first = (await (await publish(client, orders, body, headers=headers)).json())["results"]
    again = (await (await publish(client, orders, body, headers=headers)).json())["results"]
    assert [r["offset"] for r in again] == [r["offset"] for r in first]
    assert all(r["duplicate"] for r in again)
    assert store.total_entries() == 2


async def test_keyless_messages_spread_over_partitions_across_batches(client: Client,
                                                                      orders: str) -> None:
    seen = set()
    for _ in range(6):
        results = (await (await publish(client, orders,
                                        {"messages": [{"value": 1}]})).json())["results"]
        seen.add(results[0]["partition"])
    assert seen == {0, 1, 2}


async def test_binary_value_is_stored_as_bytes(client: Client, orders: str, store: Any) -> None:
    raw = bytes(range(256))
    body = {"messages": [{"value_b64": base64.b64encode(raw).decode(), "partition": 0}]}
    assert (await publish(client, orders, body)).status == 200
    assert store.streams[(orders, 0)][0].value == raw


async def test_malformed_json_is_400(client: Client, orders: str) -> None:
    response = await client.post(f"/v1/topics/{orders}/messages", data=b'{"messages": [',
                                 headers={"content-type": "application/json"})
    assert response.status == 400
    assert response.content_type == "application/problem+json"


async def test_unknown_topic_is_404(client: Client) -> None:
    response = await publish(client, "missing", {"messages": [{"value": 1}]})
    assert response.status == 404


async def test_wrong_types_are_422_with_pointer(client: Client, orders: str) -> None:
    cases = [
        ({"messages": "nope"}, "/messages"),
        ({"messages": []}, "/messages"),
        ({"messages": [{"value": 1}], "acks": "2"}, "/acks"),
        ({"messages": [{"value": 1}, 5]}, "/messages/1"),
        ({"messages": [{"value": 1, "key": 7}]}, "/messages/0/key"),
        ({"messages": [{"value": 1, "headers": {"a": 1}}]}, "/messages/0/headers/a"),
        ({"messages": [{"value": 1, "headers": ["a"]}]}, "/messages/0/headers"),
        ({"messages": [{"value": 1, "partition": -1}]}, "/messages/0/partition"),
        ({"messages": [{"value": 1, "partition": True}]}, "/messages/0/partition"),
        ({"messages": [{"key": "k"}]}, "/messages/0"),
        ({"messages": [{"value": 1, "value_b64": "AA=="}]}, "/messages/0"),
        ({"messages": [{"value_b64": "not base64!"}]}, "/messages/0/value_b64"),
        ({"messages": [{"value": 1, "surprise": 1}]}, "/messages/0/surprise"),
        ({"messages": [{"value": 1, "idempotency_key": ""}]}, "/messages/0/idempotency_key"),
        ({"messages": [{"value": 1}], "extra": 1}, "/extra"),
        ([{"value": 1}], ""),
    ]
    for body, pointer in cases:
        response = await publish(client, orders, body)
        assert response.status == 422, body
        assert (await response.json())["pointer"] == pointer, body


async def test_value_over_limit_is_413_and_batch_writes_nothing(client: Client, orders: str,
                                                                store: Any) -> None:
    body = {"messages": [{"value": "ok"}, {"value": "x" * 2000}]}
    response = await publish(client, orders, body)
    assert response.status == 413
    assert (await response.json())["pointer"] == "/messages/1/value"
    assert store.total_entries() == 0


async def test_batch_over_message_limit_is_413(client: Client, orders: str) -> None:
    response = await publish(client, orders, {"messages": [{"value": 1}] * 51})
    assert response.status == 413


async def test_body_over_byte_limit_is_413(client: Client, orders: str, store: Any) -> None:
    body = orjson.dumps({"messages": [{"value": "y" * 900}] * 40, "pad": "z" * 70_000})
    response = await client.post(f"/v1/topics/{orders}/messages", data=body,
                                 headers={"content-type": "application/json"})
    assert response.status == 413
    assert response.content_type == "application/problem+json"
    assert store.total_entries() == 0


async def test_storage_unavailable_is_503_with_retry_after(client: Client, orders: str,
                                                           store: Any) -> None:
    store.unavailable = True
    response = await publish(client, orders, {"messages": [{"value": 1}]})
    assert response.status == 503
    assert response.headers["Retry-After"] == "2"
    assert response.content_type == "application/problem+json"


async def test_a_full_store_is_507_with_retry_after_for_every_acks(client: Client, orders: str,
                                                                  store: Any) -> None:
    store.full = True
    for acks in ("0", "1", "all"):
        response = await publish(client, orders, {"acks": acks, "messages": [{"value": 1}]})
        assert response.status == 507
        assert response.headers["Retry-After"] == "7"
        problem = await response.json(content_type=None)
        assert problem["type"].endswith("/storage-full")
        assert problem["reason"] == "watermark"
    assert store.total_entries() == 0
    text = await (await client.get("/metrics")).text()
    assert ('streamgate_publish_refused_full_total{reason="watermark",topic="orders"} 3.0'
            in text)


async def test_publish_is_counted_in_metrics(client: Client, orders: str) -> None:
    await publish(client, orders, {"messages": [{"value": 1}, {"value": 2}]})
    text = await (await client.get("/metrics")).text()
    assert 'streamgate_publish_messages_total{outcome="written",topic="orders"} 2.0' in text
    assert 'streamgate_publish_requests_total{outcome="ok",topic="orders"} 1.0' in text


async def test_delayed_messages_are_scheduled_not_written(client: Client, orders: str,
                                                          store: Any) -> None:
    tomorrow_ms = int(time.time() * 1000) + 86_400_000
    body = {"messages": [{"value": "now", "partition": 0},
                         {"value": "later", "partition": 1, "delay_ms": 60_000},
                         {"value": "at", "partition": 2, "deliver_at_ms": tomorrow_ms}]}
    response = await publish(client, orders, body)
    assert response.status == 200, await response.text()
    now, later, at = (await response.json())["results"]
    assert now["offset"] is not None
    assert "scheduled_id" not in now
    assert later["offset"] is None
    assert later["scheduled_id"]
    assert later["deliver_at_ms"] > 1_700_000_000_000
    assert at["deliver_at_ms"] == tomorrow_ms
    assert store.total_entries() == 1
    assert [(record.partition, due) for _, record, due in store.scheduled][1] == (2, tomorrow_ms)


async def test_past_deliver_at_and_zero_delay_publish_at_once(client: Client, orders: str,
                                                              store: Any) -> None:
    body = {"messages": [{"value": 1, "delay_ms": 0}, {"value": 2, "deliver_at_ms": 1}]}
    results = (await (await publish(client, orders, body)).json())["results"]
    assert all(r["offset"] is not None for r in results)
    assert store.scheduled == []


async def test_bad_delays_are_422(client: Client, orders: str) -> None:
    cases = [({"value": 1, "delay_ms": -1}, "/messages/0/delay_ms"),
             ({"value": 1, "delay_ms": "soon"}, "/messages/0/delay_ms"),
             ({"value": 1, "delay_ms": 10**13}, "/messages/0/delay_ms"),
             ({"value": 1, "deliver_at_ms": 10**15}, "/messages/0/deliver_at_ms"),
             ({"value": 1, "delay_ms": 5, "deliver_at_ms": 5}, "/messages/0")]
    for message, pointer in cases:
        response = await publish(client, orders, {"messages": [message]})
        assert response.status == 422, message
        assert (await response.json())["pointer"] == pointer


async def test_acks_zero_queues_and_writes_every_batch(
        client: Client, orders: str, store: Any, services: Any, monkeypatch: Any) -> None:
    queued: list[int] = []
    enqueue = services.publisher.enqueue_waiting

    async def recorded(topic: Any, records: Any, *args: Any) -> None:
        queued.append(len(records))
        await enqueue(topic, records, *args)

    monkeypatch.setattr(services.publisher, "enqueue_waiting", recorded)
    first = await publish(client, orders,
                          {"messages": [{"key": "k", "value": i} for i in range(3)], "acks": 0})
    second = await publish(client, orders,
                           {"messages": [{"value": 9, "headers": {"h": "1"}}], "acks": "0"})
    assert (first.status, second.status) == (202, 202)
    assert await first.json() == {"accepted": 3}
    assert queued == [3, 1]
    for _ in range(100):
        if store.total_entries() == 4:
            break
        await asyncio.sleep(0.01)
    assert [dict(e.headers) for s in store.streams.values() for e in s
            if e.value == b"9"] == [{"h": "1"}]
    assert sorted(e.value for s in store.streams.values() for e in s) == [b"0", b"1", b"2", b"9"]
