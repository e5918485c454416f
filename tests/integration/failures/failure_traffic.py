"""Load for the failure tests: HTTP producers that keep every outcome, a replay of a whole topic,
and an exclusive-group WebSocket consumer that acks what it gets.

Every message has a unique value that is also its idempotency key, so a producer can retry a 503
safely and the final check can compare sets of values; its key names its producer, whose sequence
numbers show per-key order. The client is an in-process test client or a session with a base URL.
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

Client = TestClient[Any, Any] | aiohttp.ClientSession
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
    label: str = ""  # a prefix of the producers' names, unique among Producers on one topic
    acked: dict[str, tuple[int, str]] = field(default_factory=dict)  # value -> (partition, offset)
    outcomes: list[Outcome] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self) -> None:
        for partition in range(self.partitions):
            for index in range(self.per_partition):
                self._tasks.append(
                    asyncio.create_task(
                        self._produce(partition, f"{self.label}{partition}.{index}"))
                )

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.gather(*self._tasks)

    async def _produce(self, partition: int, name: str) -> None:
        seq = 0
        while not self.stop.is_set():
            values = [f"{self.topic}/{name}/{seq + i}" for i in range(self.batch)]
            status = await self._post(partition, name, values)
            if status == 200:
                seq += self.batch
            else:  # retry the same values (same idempotency keys) after a short pause
                await asyncio.sleep(0.05)

    async def _post(self, partition: int, name: str, values: list[str]) -> int:
        body = {"acks": self.acks, "messages": [
            {"partition": partition, "key": name, "value": v, "idempotency_key": v}
            for v in values]}
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


def out_of_order(stored: dict[int, list[tuple[str, Any]]]) -> list[str]:
    """Values stored after a later value of the same producer (its key): per-key order broken."""
    broken: list[str] = []
    for entries in stored.values():
        last: dict[str, int] = {}
        for _, value in entries:
            producer, _, seq = str(value).rpartition("/")
            if int(seq) <= last.get(producer, -1):
                broken.append(str(value))
            last[producer] = int(seq)
    return broken


def duplicated(stored: dict[int, list[tuple[str, Any]]]) -> list[str]:
    """Values stored more than once (every message has an idempotency key: there must be none)."""
    counts = Counter(value for entries in stored.values() for _, value in entries)
    return sorted(str(v) for v, n in counts.items() if n > 1)


@dataclass
class GroupConsumer:
    """One exclusive-group WebSocket member that acks every message as it arrives, noting when each
    assignment and delivery came."""

    ws: aiohttp.ClientWebSocketResponse
    received: Counter[str] = field(default_factory=Counter)
    errors: list[Any] = field(default_factory=list)
    close_code: int | None = None
    close_codes: list[int | None] = field(default_factory=list)  # every session's, in order
    assignments: list[tuple[float, frozenset[int]]] = field(default_factory=list)
    deliveries: list[tuple[float, int]] = field(default_factory=list)  # (time, partition)
    # with a client: a socket the gateway closed is reopened a second later, as 1001 and 4503 ask
    rejoin: Client | None = None
    params: dict[str, str] = field(default_factory=dict)
    _closing: bool = False
    _task: asyncio.Task[None] | None = None

    @classmethod
    async def join(cls, client: Client, topic: str, group: str,
                   rejoin: bool = False) -> GroupConsumer:
        params = {"topic": topic, "group": group, "mode": "exclusive", "max_in_flight": "500"}
        consumer = cls(await client.ws_connect("/v1/subscribe", params=params),
                       rejoin=client if rejoin else None, params=params)
        consumer._task = asyncio.create_task(consumer._run())
        return consumer

    async def _run(self) -> None:
        while True:
            await self._session()
            self.close_code = self.ws.close_code
            self.close_codes.append(self.close_code)
            # the session holds nothing more
            self.assignments.append((time.monotonic(), frozenset()))
            if self.rejoin is None or self._closing:
                return
            self.ws = await self._reconnect(self.rejoin)

    async def _reconnect(self, client: Client) -> aiohttp.ClientWebSocketResponse:
        while True:
            await asyncio.sleep(1.0)
            try:
                return await client.ws_connect("/v1/subscribe", params=self.params)
            except (aiohttp.ClientError, OSError) as exc:
                self.errors.append(repr(exc))

    async def _session(self) -> None:
        while True:
            frame = await self.ws.receive()
            if frame.type is not aiohttp.WSMsgType.TEXT:
                return
            doc = frame.json()
            if doc["type"] == "assignment":
                self.assignments.append((time.monotonic(), frozenset(doc["partitions"])))
            elif doc["type"] == "message":
                self.deliveries.append((time.monotonic(), doc["partition"]))
                self.received[doc["value"]] += 1
                await self.ws.send_json({"type": "ack", "messages": [
                    {"partition": doc["partition"], "offset": doc["offset"]}]})
            elif doc["type"] == "error":
                self.errors.append(doc)

    def holds(self, partition: int, until: float) -> list[tuple[float, float]]:
        """The spans during which the member's assignments included the partition."""
        spans: list[tuple[float, float]] = []
        since: float | None = None
        for at, partitions in self.assignments:
            if partition in partitions and since is None:
                since = at
            elif partition not in partitions and since is not None:
                spans.append((since, at))
                since = None
        if since is not None:
            spans.append((since, until))  # each session's close ended its holds above
        return spans

    def serving(self, partition: int, until: float) -> list[tuple[float, float]]:
        """From the first to the last delivery of the partition within each of its holds."""
        spans = []
        for start, end in self.holds(partition, until):
            times = [at for at, p in self.deliveries if p == partition and start <= at <= end]
            if times:
                spans.append((times[0], times[-1]))
        return spans

    def deliveries_outside_holds(self, until: float) -> list[tuple[float, int]]:
        """Messages of a partition delivered while the member was not assigned it."""
        return [(at, p) for at, p in self.deliveries
                if not any(start <= at <= end for start, end in self.holds(p, until))]

    async def close(self) -> None:
        self._closing = True
        await self.ws.close()
        if self._task is None:
            return
        await asyncio.wait({self._task}, timeout=10)
        if not self._task.done():  # caught between sessions: a rejoin may have opened another
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            await self.ws.close()


def exclusive_overlap_s(consumers: list[GroupConsumer], partitions: int, until: float,
                        delivering: bool = False) -> float:
    """The longest time any partition was assigned to two members at once; with ``delivering``,
    counting only from a member's first to its last delivery of the partition in each assignment
    (an assignment frame can outlive the member's serving: its socket closes later)."""
    longest = 0.0
    for partition in range(partitions):
        spans = [consumer.serving(partition, until) if delivering
                 else consumer.holds(partition, until) for consumer in consumers]
        for index, first in enumerate(spans):
            for second in spans[index + 1:]:
                for a_start, a_end in first:
                    for b_start, b_end in second:
                        longest = max(longest, min(a_end, b_end) - max(a_start, b_start))
    return longest
