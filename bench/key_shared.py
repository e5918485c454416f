"""key_shared groups in the same run: 8 members (the project's Python client) draining 2 partitions
by key, with and without a poison key, checked for per-key order; and how soon a member that joins
gets its first message.

    python bench/key_shared.py --messages 200000    # alone: starts its own stack and gateway
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from dataclasses import dataclass, field

import aiohttp
import orjson
from services import on_own_gateway
from table import Row, at_least, below, render_text

from streamgate_client import Consumer, Message

MEMBERS = 8
PARTITIONS = 2
KEYS = 1000
POISON = "poison"
POISON_EVERY = 1000
DRAINS = 3  # each way, alternating: the machine's drift falls on both sides
MAX_DELIVERIES = 3
# with a poison key, the group keeps at least this share of its throughput without one
POISON_RATIO = 0.9
JOIN_GOAL_S = 1.0


@dataclass
class Drain:
    """What the members saw: messages handled, how long, per-key order violations."""

    expected: int
    handled: int = 0
    violations: int = 0
    in_hand: set[str] = field(default_factory=set)
    last: dict[str, tuple[int, int]] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    # when a tenth and nine tenths were handled: the steady part of the drain, without the group
    # forming and without the last keys' chains, which run one message per round trip
    marks: dict[int, float] = field(default_factory=dict)

    def take(self, message: Message) -> None:
        """A message in hand: no other of its key may be, and none later of it came before."""
        key = message.key or ""
        position = tuple(map(int, message.offset.split("-")))
        if key in self.in_hand or (key in self.last and self.last[key] >= position
                                   and key != POISON):
            self.violations += 1
        self.in_hand.add(key)
        self.last[key] = (position[0], position[1])

    def settle(self, message: Message) -> None:
        self.in_hand.discard(message.key or "")
        if message.key != POISON:
            self.handled += 1
            if self.handled in (self.expected // 10, self.expected * 9 // 10):
                self.marks[self.handled] = time.perf_counter()
            if self.handled >= self.expected:
                self.done.set()


async def publish(base: str, topic: str, messages: int, poison_every: int | None) -> int:
    """``messages`` keyed messages (KEYS keys, every ``poison_every``-th the poison key's), acks=1,
    batches of 500; how many are not poison."""
    plain = 0
    async with aiohttp.ClientSession() as http:
        for start in range(0, messages, 500):
            batch = []
            for n in range(start, min(start + 500, messages)):
                poison = poison_every is not None and n % poison_every == 0
                plain += not poison
                batch.append({"key": POISON if poison else f"k{n % KEYS}", "value": n})
            async with http.post(f"{base}/v1/topics/{topic}/messages",
                                 data=orjson.dumps({"messages": batch}),
                                 headers={"content-type": "application/json"}) as response:
                assert response.status == 200, await response.text()
    return plain


async def member(base: str, topic: str, drain: Drain) -> None:
    async with Consumer(base, topic, group="workers", mode="key_shared", max_in_flight=200,
                        max_deliveries=MAX_DELIVERIES) as consumer:
        async for message in consumer:
            drain.take(message)
            drain.settle(message)
            if message.key == POISON:
                await message.nack()
            else:
                await message.ack()
            if drain.done.is_set():
                return


async def drain_rate(base: str, messages: int, poison_every: int | None) -> tuple[float, Drain]:
    """A fresh topic published full, then drained by the members; messages handled per second
    from the tenth to the nine-tenths of them (poison ones not counted)."""
    topic = f"ks-{uuid.uuid4().hex[:8]}"
    async with aiohttp.ClientSession() as http, \
            http.post(f"{base}/v1/topics", json={"name": topic, "partitions": PARTITIONS}) as r:
        assert r.status == 201, await r.text()
    drain = Drain(await publish(base, topic, messages, poison_every))
    tasks = [asyncio.create_task(member(base, topic, drain)) for _ in range(MEMBERS)]
    await drain.done.wait()
    first, last = drain.expected // 10, drain.expected * 9 // 10
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return (last - first) / (drain.marks[last] - drain.marks[first]), drain


async def join_latency(base: str) -> float:
    """Seconds from a member's subscribe to its first message, joining a busy key_shared group."""
    topic = f"ks-join-{uuid.uuid4().hex[:8]}"
    async with aiohttp.ClientSession() as http, \
            http.post(f"{base}/v1/topics", json={"name": topic, "partitions": PARTITIONS}) as r:
        assert r.status == 201
    drain = Drain(10**9)
    members = [asyncio.create_task(member(base, topic, drain)) for _ in range(MEMBERS - 1)]
    stop = asyncio.Event()

    async def produce() -> None:
        while not stop.is_set():
            await publish(base, topic, 500, None)

    producer = asyncio.create_task(produce())
    await asyncio.sleep(2)  # the group is formed and busy
    started = time.perf_counter()
    async with Consumer(base, topic, group="workers", mode="key_shared",
                        max_deliveries=MAX_DELIVERIES) as late:
        first = await anext(late)
        joined_s = time.perf_counter() - started
        await first.ack()
    stop.set()
    for task in (*members, producer):
        task.cancel()
    await asyncio.gather(*members, producer, return_exceptions=True)
    return joined_s


async def key_shared_rows(base: str, messages: int) -> list[Row]:
    """The rows: the poison key's cost against the same drain without it, order violations, and a
    joining member's wait."""
    runs = [await drain_rate(base, messages, poison) for _ in range(DRAINS)
            for poison in (None, POISON_EVERY)]
    plain = max(rate for rate, _ in runs[0::2])
    poisoned = max(rate for rate, _ in runs[1::2])
    violations = sum(drain.violations for _, drain in runs)
    joined_s = await join_latency(base)
    note = (f"{MEMBERS} members (Python client) on {PARTITIONS} partitions, {KEYS} keys, "
            f"{messages:,} messages, the best of {DRAINS} drains each, taken in turn")
    return [
        at_least(Row("11", f"key_shared drain with a poison key (every {POISON_EVERY}th message)",
                     poisoned, "msg/s", plain, "the same drain without it", f">= {POISON_RATIO}x",
                     note=note + f"; poison nacked until max_deliveries={MAX_DELIVERIES}"),
                 POISON_RATIO, on_ratio=True),
        below(Row("11", f"key_shared per-key order violations (all {len(runs)} drains)",
                  violations, "", goal_text="0"), 1),
        below(Row("11", "key_shared: a joining member's first message", joined_s, "s",
                  goal_text=f"< {JOIN_GOAL_S} s",
                  note=f"joins {MEMBERS - 1} busy members"), JOIN_GOAL_S),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    args = parser.parse_args()
    rows = on_own_gateway(lambda base: key_shared_rows(base, args.messages))
    print(f"{os.cpu_count()} cores")
    print(render_text(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
