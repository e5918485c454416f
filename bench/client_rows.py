"""The client rows: the project's Python client and CLI next to nats-py on JetStream in the same
patterns and the same run, and next to the same gateway loaded by wrk.

    python bench/client_rows.py --seconds 5       # alone: starts its own stack, gateway and NATS
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from anchors import (
    VALUE,
    nats_best_publish_async_rate,
    nats_one_at_a_time_rate,
    nats_pull_ack_rate,
    nats_task_per_publish_rate,
)
from deliver import create_topic
from publish import http_publish_for, publish_body, wait_ready
from services import GatewayProcess, NatsServer
from table import Row, at_least, render_text

from client import Consumer, Producer
from devstack import DevStack, DevStackConfig

TEXT_VALUE = VALUE.decode()  # 200 bytes, sent as a JSON string
KEYS = [f"user-{n}" for n in range(1000)]
PARTITIONS = 8
MAX_CLI_LINES = 1_000_000
# `streamgate produce`'s goal, 200,000 lines/s where wrk's batches took ~219,000 msg/s, as a ratio
CLI_WRK_RATIO = 0.9


async def producer_in_flight_rate(base: str, topic: str, acks: str, seconds: float) -> float:
    """``await producer.send(...)`` in a loop (each returns once queued), then ``flush()``: msg/s,
    every result checked."""
    async with Producer(base, topic, acks=acks) as producer:  # type: ignore[arg-type]
        futures = []
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            for key in KEYS:
                futures.append(await producer.send(TEXT_VALUE, key=key))
        await producer.flush()
        elapsed = time.perf_counter() - started
    assert all(f.result().offset is not None for f in futures)
    return len(futures) / elapsed


async def producer_task_per_send_rate(base: str, topic: str, seconds: float) -> float:
    """A task per ``send_and_wait``, gathered 1,000 at a time: msg/s."""
    async with Producer(base, topic) as producer:
        sent = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            await asyncio.gather(*(asyncio.create_task(producer.send_and_wait(TEXT_VALUE, key=key))
                                   for key in KEYS))
            sent += len(KEYS)
        return sent / (time.perf_counter() - started)


async def producer_one_at_a_time_rate(base: str, topic: str, seconds: float) -> float:
    """``await producer.send_and_wait(...)`` in a loop: msg/s."""
    async with Producer(base, topic, acks="1") as producer:
        sent = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            for key in KEYS[:100]:
                await producer.send_and_wait(TEXT_VALUE, key=key)
            sent += 100
        return sent / (time.perf_counter() - started)


async def prefill(base: str, topic: str, messages: int) -> None:
    async with Producer(base, topic, acks="1") as producer:
        for n in range(messages):
            await producer.send(TEXT_VALUE, key=KEYS[n % len(KEYS)])
        await producer.flush()


async def consumer_rate(base: str, topic: str, messages: int, batches: bool) -> float:
    """One exclusive-group consumer over a backlog of ``messages``, acking each: per message
    (``async for m in consumer``) or per batch (``consumer.batches()``); acked msg/s."""
    group = f"bench-{'batches' if batches else 'each'}"
    async with Consumer(base, topic, group=group, from_="earliest",
                        max_in_flight=1000) as consumer:
        acked = 0
        started = time.perf_counter()
        if batches:
            async for batch in consumer.batches():
                await consumer.ack(batch)
                acked += len(batch)
                if acked >= messages:
                    break
        else:
            async for message in consumer:
                await message.ack()
                acked += 1
                if acked >= messages:
                    break
        elapsed = time.perf_counter() - started
    return acked / elapsed


def cli_lines_rate(base: str, topic: str, lines: int) -> float:
    """``streamgate produce`` with ``lines`` JSON lines on stdin (a file): lines/s, wall clock of
    the whole command (start-up included)."""
    with tempfile.TemporaryFile() as source:
        for n in range(0, lines, 1000):
            source.write(b"".join(b'{"n":%d,"v":"%s"}\n' % (i, VALUE[:160])
                                  for i in range(n, min(lines, n + 1000))))
        source.seek(0)
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gateway.cli", "produce", "--url", base, topic],
                       stdin=source, stdout=subprocess.DEVNULL, check=True)
        return lines / (time.perf_counter() - started)


async def client_rows(base: str, nats_url: str, seconds: float, group_messages: int) -> list[Row]:
    """Every client row with its anchors, measured in this order in one run."""
    async with aiohttp.ClientSession() as http:
        for topic in ("client-in-flight", "client-one", "client-group", "client-cli"):
            await create_topic(http, base, topic, PARTITIONS)
    rows, wrk_rate = await producer_rows(base, nats_url, seconds)
    one = await producer_one_at_a_time_rate(base, "client-one", seconds)
    nats_one = await nats_one_at_a_time_rate(nats_url, seconds)
    rows.append(at_least(Row("c2", "Producer: await send_and_wait() one at a time", one, "msg/s",
                             nats_one, "nats-py await js.publish", ">= 1x JetStream"),
                         1.0, on_ratio=True))
    rows += await consumer_rows(base, nats_url, group_messages)
    count = min(MAX_CLI_LINES, 20 * group_messages)
    lines = await asyncio.to_thread(cli_lines_rate, base, "client-cli", count)
    rows.append(at_least(Row("c4", "streamgate produce < file", lines, "lines/s", wrk_rate,
                             "wrk, batch 100, 16 conn.",
                             f">= {CLI_WRK_RATIO}x wrk (was >= 200,000)",
                             note=f"{count:,} lines, wall clock incl. start-up"),
                         CLI_WRK_RATIO, on_ratio=True))
    return rows


async def producer_rows(base: str, nats_url: str, seconds: float) -> tuple[list[Row], float]:
    """Many sends in flight: the fast pattern against nats-py's task per publish (the issue's
    anchor), its own best pattern and wrk; the task pattern like for like. Also wrk's rate, the
    CLI row's anchor."""
    wrk = await http_publish_for(base, "client-in-flight", publish_body(100, "1"), 100, seconds, 16)
    nats_tasks = await nats_task_per_publish_rate(nats_url, seconds)
    nats_best, nats_note = await nats_best_publish_async_rate(nats_url, seconds)
    rows = []
    for acks, goal in (("1", 8.0), ("all", 6.0)):
        rate = await producer_in_flight_rate(base, "client-in-flight", acks, seconds)
        figure = f"Producer: await send() in a loop, then flush(), acks={acks}"
        rows.append(at_least(Row("c1", figure, rate, "msg/s", nats_tasks,
                                 "nats-py, a task per js.publish", f">= {goal:.0f}x JetStream",
                                 note=f"nats-py's own fastest pattern, publish_async: "
                                      f"{nats_best:,.0f} msg/s ({rate / nats_best:.2f}x; "
                                      f"{nats_note})"), goal, on_ratio=True))
        if acks == "1":
            rows.append(at_least(Row("c1", figure, rate, "msg/s", wrk.rate,
                                     "wrk, batch 100, 16 conn.", ">= 0.5x wrk",
                                     note="wrk's bodies carry no idempotency keys; every "
                                          "producer batch does"), 0.5, on_ratio=True))
    tasks = await producer_task_per_send_rate(base, "client-in-flight", seconds)
    rows.append(Row("c1", "Producer: a task per send_and_wait(), gathered", tasks, "msg/s",
                    nats_tasks, "nats-py, a task per js.publish", "information (same pattern)"))
    return rows, wrk.rate


async def consumer_rows(base: str, nats_url: str, group_messages: int) -> list[Row]:
    """One consumer over a backlog, per message and per batch, against nats-py pull + ack."""
    await prefill(base, "client-group", 2 * group_messages)
    nats_pull = await nats_pull_ack_rate(nats_url, group_messages)
    rows = []
    for batches in (False, True):
        rate = await consumer_rate(base, "client-group", group_messages, batches)
        how = "consumer.batches(), ack per batch" if batches else "async for m: await m.ack()"
        rows.append(at_least(Row("c3", f"Consumer: {how}", rate, "msg/s", nats_pull,
                                 "nats-py fetch 500 + ack each", ">= 8x JetStream",
                                 note=f"{group_messages:,} backlog, exclusive group, one process"),
                             8.0, on_ratio=True))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--group-messages", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sg-bench-") as tmp, \
            DevStack(DevStackConfig(data_dir=Path(tmp))) as stack, NatsServer() as nats, \
            GatewayProcess(stack) as gateway:

        async def run() -> list[Row]:
            await wait_ready(gateway.base)
            await asyncio.to_thread(nats.wait_ready)
            return await client_rows(gateway.base, nats.url, args.seconds, args.group_messages)

        rows = asyncio.run(run())
    print(f"{os.cpu_count()} cores, NATS {nats.version()}")
    print(render_text(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
