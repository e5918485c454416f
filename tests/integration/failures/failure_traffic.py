"""Load for the failure tests: HTTP producers that keep every outcome, a replay of a whole topic,
and an exclusive-group WebSocket consumer that acks what it gets.

Every message has a unique value that is also its idempotency key, so a producer can retry a 503
safely and the final check can compare sets of values.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp.test_utils import TestClient

Client = TestClient[Any, Any]
# A request must answer within the write deadline plus this much, else it counts as hung.
HANG_MARGIN_S = 5.0


@dataclass
class Outcome:
    """One publish request: when it started and answered, its status and the partition it wrote
    to."""

    started: float
    answered: float
    status: int  # -1: no answer in time (hung) or a client-side error
    partition: int
    detail: str = ""


@dataclass
class Producers:
    """`per_partition` producer tasks for every partition, each publishing batches of `batch`
    messages."""

    client: Client
    topic: str
    partitions: int
    acks: str
    deadline_s: float
    per_partition: int = 2
    batch: int = 5
    acked: dict[str, tuple[int, str]] = field(default_factory=dict)  # value -> (partition, offset)
    outcomes: list[Outcome] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self) -> None:
        for partition in range(self.partitions):
            for index in range(self.per_partition):
                self._tasks.append(
                    asyncio.create_task(self._produce(partition, f"{partition}.{index}"))
                )

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.gather(*self._tasks)

    async def _produce(self, partition: int, name: str) -> None:
        seq = 0
        while not self.stop.is_set():
            values = [f"{self.topic}/{name}/{seq + i}" for i in range(self.batch)]
            status = await self._post(partition, values)
            if status == 200:
                seq += self.batch
            else:  # retry the same values (same idempotency keys) after a short pause
                await asyncio.sleep(0.05)

    async def _post(self, partition: int, values: list[str]) -> int:
        body = {"acks": self.acks, "messages": [
            {"partition": partition, "value": v, "idempotency_key": v} for v in values]}
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.deadline_s + HANG_MARGIN_S):
                response = await self.client.post(f"/v1/topics/{self.topic}/messages", json=body)
                text = await response.text()
        except (TimeoutError, aiohttp.ClientError) as exc:
            self.outcomes.append(Outcome(started, time.monotonic(), -1, partition, repr(exc)))
            return -1
        outcome = Outcome(started, time.monotonic(), response.status, partition, text)
        self.outcomes.append(outcome)
        if response.status == 200:
            for value, result in zip(values, (await response.json())["results"], strict=True):
                self.acked[value] = (result["partition"], result["offset"])
        elif response.status == 503:
            outcome.detail = (
                f"{response.content_type} Retry-After={response.headers.get('Retry-After')} {text}"
            )
        return response.status

    def statuses(self) -> Counter[int]:
        return Counter(o.status for o in self.outcomes)

    def bad_503s(self) -> list[Outcome]:
        """503s without problem+json or a Retry-After of at least 1 s."""
        return [
            o
            for o in self.outcomes
            if o.status == 503
            and not (
                o.detail.startswith("application/problem+json Retry-After=")
                and _retry_after(o) >= 1
            )
        ]

    def others(self) -> list[Outcome]:
        """Anything but 200 and 503: a 500, a hang past the deadline, a client error."""
        return [o for o in self.outcomes if o.status not in (200, 503)]


def _retry_after(outcome: Outcome) -> int:
    raw = outcome.detail.split("Retry-After=", 1)[1].split(" ", 1)[0]
    return int(raw) if raw.isdigit() else 0


async def replay_topic(
    client: Client, topic: str, partitions: int
) -> dict[int, list[tuple[str, Any]]]:
    """Every (offset, value) of every partition, read through the replay API page by page."""
    stored: dict[int, list[tuple[str, Any]]] = {}
    for partition in range(partitions):
        entries: list[tuple[str, Any]] = []
        start = "earliest"
        while True:
            response = await client.get(f"/v1/topics/{topic}/partitions/{partition}/messages",
                                        params={"from": start, "limit": "1000"})
            assert response.status == 200, await response.text()
            page = await response.json()
            entries += [(m["offset"], m["value"]) for m in page["messages"]]
            if not page["messages"]:
                break
            start = page["next_offset"]
        stored[partition] = entries
    return stored


def missing_acked(
    acked: dict[str, tuple[int, str]], stored: dict[int, list[tuple[str, Any]]]
) -> list[str]:
    """Acknowledged values not found at the (partition, offset) they were acknowledged with."""
    where = {
        (partition, offset): value
        for partition, entries in stored.items()
        for offset, value in entries
    }
    return sorted(v for v, at in acked.items() if where.get(at) != v)


def duplicated(stored: dict[int, list[tuple[str, Any]]]) -> list[str]:
    """Values stored more than once (every message has an idempotency key: there must be none)."""
    counts = Counter(value for entries in stored.values() for _, value in entries)
    return sorted(str(v) for v, n in counts.items() if n > 1)


@dataclass
class GroupConsumer:
    """One exclusive-group WebSocket member that acks every message as it arrives."""

    ws: aiohttp.ClientWebSocketResponse
    received: Counter[str] = field(default_factory=Counter)
    errors: list[Any] = field(default_factory=list)
    close_code: int | None = None
    _task: asyncio.Task[None] | None = None

    @classmethod
    async def join(cls, client: Client, topic: str, group: str) -> GroupConsumer:
        params = {"topic": topic, "group": group, "mode": "exclusive", "max_in_flight": "500"}
        consumer = cls(await client.ws_connect("/v1/subscribe", params=params))
        consumer._task = asyncio.create_task(consumer._run())
        return consumer

    async def _run(self) -> None:
        while True:
            frame = await self.ws.receive()
            if frame.type is not aiohttp.WSMsgType.TEXT:
                break
            doc = frame.json()
            if doc["type"] == "message":
                self.received[doc["value"]] += 1
                await self.ws.send_json({"type": "ack", "messages": [
                    {"partition": doc["partition"], "offset": doc["offset"]}]})
            elif doc["type"] == "error":
                self.errors.append(doc)
        self.close_code = self.ws.close_code

    async def close(self) -> None:
        await self.ws.close()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self._task, 10)
