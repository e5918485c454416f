"""``streamgate bench``: publish (and optionally subscribe) rates and latency percentiles against
any gateway, like ``nats bench``. One JSON summary on stdout; readable lines on stderr at a
terminal.

Each message carries its send time, so subscribers measure publish-to-delivery latency on this
host's clock.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Callable
from typing import Any

from streamgate_client.admin import Admin
from streamgate_client.cli_contexts import connection
from streamgate_client.consumer import Consumer
from streamgate_client.cursors import offset_key
from streamgate_client.errors import ProblemError
from streamgate_client.output import emit
from streamgate_client.producer import Producer


async def bench(args: argparse.Namespace) -> int:
    """Publish ``--messages`` with the Python producer while the subscribers count them."""
    if args.messages < 1 or args.size < 1:
        raise ValueError("--messages and --size must be at least 1")
    end = await _ensure_topic(args)
    latencies: list[float] = []
    finished = asyncio.Event()
    seen: set[tuple[int, str]] = set()  # a group's deliveries: a redelivery counts once
    subscribers = [_Subscriber(args, end, latencies, seen) for _ in range(args.subscribers)]

    def all_received() -> None:
        counts = [s.received for s in subscribers]
        if (sum(counts) >= args.messages if args.group
                else min(counts) >= args.messages):
            finished.set()

    for subscriber in subscribers:
        await subscriber.consumer.start()
    counting = [asyncio.create_task(s.count(all_received)) for s in subscribers]
    complete = True
    try:
        published_s = await _publish(args)
        if counting:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished.wait(), timeout=max(30.0, 5 * published_s))
            complete = finished.is_set()
    finally:
        for task in counting:
            task.cancel()
        for subscriber in subscribers:
            await subscriber.consumer.aclose()
    summary = _summary(args, published_s, subscribers, latencies)
    emit(summary)
    if sys.stderr.isatty():
        _describe(summary)
    if not complete:
        counts = ", ".join(f"{s.received:,}" for s in subscribers)
        sys.stderr.write(f"streamgate bench: the subscribers received {counts} messages, not "
                         "all that were published\n")
        return 1
    return 0


async def _ensure_topic(args: argparse.Namespace) -> str:
    """Create the topic unless it exists; a cursor past its current end (``<p>:<offset>,...``),
    where a group of subscribers starts, however late the group is created."""
    async with Admin(args.url, **connection(args)) as admin:
        try:
            topic = await admin.describe_topic(args.topic)
        except ProblemError as exc:
            if exc.status != 404:
                raise
            await admin.create_topic(args.topic, args.partitions)
            topic = await admin.describe_topic(args.topic)
    # a group starts every partition after the lowest offset its cursor names: the highest one
    # for all (offsets are times, so whatever is published next comes after it)
    last = max((d["last_offset"] for d in topic["partition_details"] if d.get("last_offset")),
               key=offset_key, default="0-0")
    return ",".join(f"{d['partition']}:{last}" for d in topic["partition_details"])


async def _publish(args: argparse.Namespace) -> float:
    """Send every message (``send`` in a loop, then ``flush``); the seconds it took."""
    padding = "x" * max(0, args.size - 30)
    keys: list[str | None] = [f"k{n}" for n in range(args.keys)] or [None]
    async with Producer(args.url, args.topic, acks=args.acks,
                        **connection(args)) as producer:
        futures = []
        started = time.perf_counter()
        for n in range(args.messages):
            futures.append(await producer.send({"t": time.time_ns(), "p": padding},
                                               key=keys[n % len(keys)]))
        await producer.flush()
        elapsed = time.perf_counter() - started
    for future in futures:
        future.result()  # a failed message fails the run
    return elapsed


class _Subscriber:
    def __init__(self, args: argparse.Namespace, end: str, latencies: list[float],
                 seen: set[tuple[int, str]]) -> None:
        self.consumer = Consumer(args.url, args.topic, group=args.group,
                                 from_=end if args.group else "latest", max_in_flight=5000,
                                 **connection(args))
        self.latencies = latencies
        self.seen = seen
        self.received = self.redelivered = 0
        self.first = self.last = 0.0

    async def count(self, after_each_batch: Callable[[], None]) -> None:
        async for batch in self.consumer.batches():
            now = time.time_ns()
            self.first = self.first or time.perf_counter()
            self.last = time.perf_counter()
            if self.consumer.group:
                await self.consumer.ack(batch)
                fresh = [m for m in batch if (m.partition, m.offset) not in self.seen]
                self.seen.update((m.partition, m.offset) for m in fresh)
                self.redelivered += len(batch) - len(fresh)
                batch = fresh
            self.received += len(batch)
            self.latencies += [(now - m.value["t"]) / 1e6 for m in batch
                               if isinstance(m.value, dict) and "t" in m.value]
            after_each_batch()


def _summary(args: argparse.Namespace, published_s: float, subscribers: list[_Subscriber],
             latencies: list[float]) -> dict[str, Any]:
    bytes_out = args.messages * args.size
    summary: dict[str, Any] = {
        "topic": args.topic, "messages": args.messages, "size": args.size, "acks": args.acks,
        "publish": {"seconds": round(published_s, 3),
                    "msg_per_s": round(args.messages / published_s),
                    "mb_per_s": round(bytes_out / published_s / 1e6, 2)},
    }
    if subscribers:
        span = max(s.last for s in subscribers) - min(s.first for s in subscribers if s.first)
        received = sum(s.received for s in subscribers)
        latencies.sort()
        summary["subscribe"] = {
            "subscribers": len(subscribers), "group": args.group, "received": received,
            "redelivered": sum(s.redelivered for s in subscribers),
            "msg_per_s": round(received / span) if span > 0 else None,
            "latency_ms": {name: round(latencies[min(len(latencies) - 1,
                                                     int(q * len(latencies)))], 2)
                           for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))}
            if latencies else None,
        }
    return summary


def _describe(summary: dict[str, Any]) -> None:
    publish = summary["publish"]
    lines = [f"publish: {summary['messages']:,} messages of {summary['size']} B in "
             f"{publish['seconds']} s: {publish['msg_per_s']:,} msg/s, {publish['mb_per_s']} MB/s"]
    if "subscribe" in summary:
        sub = summary["subscribe"]
        latency = sub["latency_ms"] or {}
        lines.append(f"subscribe: {sub['received']:,} messages over {sub['subscribers']} "
                     f"subscribers: {sub['msg_per_s'] or 0:,} msg/s; latency p50 "
                     f"{latency.get('p50')} ms, p90 {latency.get('p90')} ms, p99 "
                     f"{latency.get('p99')} ms")
    sys.stderr.write("\n".join(lines) + "\n")
