"""A dead letter keeps its message's schema version aside, with the source topic's incarnation: the
DLQ's own readers never take it for a version of the DLQ, and a redrive gives it back only to the
incarnation the message was checked in."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient
from test_groups_http import create, dead_letters, publish

Client = TestClient[Any, Any]
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
VERSION, LETTER_VERSION, LETTER_SOURCE = "sg-schema-version", "sg-dlq-schema-version", \
    "sg-dlq-topic-created-at-ms"


async def with_schema(gateway: Client, topic: str) -> None:
    await create(gateway, topic, 1)
    registered = await gateway.post(f"/v1/topics/{topic}/schemas", json={"schema": SCHEMA})
    assert registered.status == 201, await registered.text()


async def dead_letter_all(gateway: Client, topic: str, count: int) -> list[dict[str, Any]]:
    """Pull with one delivery allowed and a short ack timeout until ``count`` letters wait."""
    pull = {"topic": topic, "ack_timeout_ms": 200, "max_deliveries": 1, "wait_ms": 300}
    letters: list[dict[str, Any]] = []
    for _ in range(40):
        await gateway.post("/v1/groups/g/pull", json=pull)
        if len(letters := await dead_letters(gateway, topic)) == count:
            break
    assert len(letters) == count
    return letters


async def entries(gateway: Client, topic: str) -> list[dict[str, Any]]:
    response = await gateway.get(f"/v1/topics/{topic}/partitions/0/messages?from=earliest")
    return list((await response.json())["messages"])


async def created_at_ms(gateway: Client, topic: str) -> int:
    return int((await (await gateway.get(f"/v1/topics/{topic}")).json())["created_at_ms"])


async def test_a_letter_keeps_its_version_aside_and_a_redrive_restores_it(
        gateway: Client, topic_name: str) -> None:
    await with_schema(gateway, topic_name)
    await publish(gateway, topic_name, [{"value": {"n": 1}}])
    [letter] = await dead_letter_all(gateway, topic_name, 1)
    assert VERSION not in letter["headers"]
    assert letter["headers"][LETTER_VERSION] == "1"
    assert letter["headers"][LETTER_SOURCE] == str(await created_at_ms(gateway, topic_name))

    redriven = await gateway.post(f"/v1/topics/{topic_name}/dlq/redrive")
    assert (await redriven.json()) == {"redriven": 1}
    back = (await entries(gateway, topic_name))[-1]
    assert (back["value"], back["headers"]) == ({"n": 1}, {VERSION: "1"})


async def test_a_letter_redriven_into_a_new_incarnation_carries_no_version(
        gateway: Client, topic_name: str) -> None:
    await with_schema(gateway, topic_name)
    await publish(gateway, topic_name, [{"value": {"n": 2}}])
    await dead_letter_all(gateway, topic_name, 1)
    deleted = await gateway.delete(f"/v1/topics/{topic_name}")
    assert deleted.status == 204
    await with_schema(gateway, topic_name)  # the same name again: version 1 of another schema

    redriven = await gateway.post(f"/v1/topics/{topic_name}/dlq/redrive")
    assert (await redriven.json()) == {"redriven": 1}
    [back] = await entries(gateway, topic_name)
    assert (back["value"], back["headers"]) == ({"n": 2}, {})
