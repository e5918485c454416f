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
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import aiohttp
from anchors import (
    VALUE,
    nats_best_publish_async_rate,
    nats_delivery_latencies,
    nats_one_at_a_time,
    nats_pull_ack_rate,
    nats_task_per_publish_rate,
    paced,
    wait_for_count,
)
from deliver import create_topic
from publish import http_publish_for, publish_body, wait_ready
from services import GatewayProcess, NatsServer
from table import Row, at_least, below, render_text

from streamgate_client import Consumer, Producer
from streamgate_devstack import DevStack, DevStackConfig

CpuClock = Callable[[], float]

TEXT_VALUE = VALUE.decode()  # 200 bytes, sent as a JSON string
KEYS = [f"user-{n}" for n in range(1000)]
PARTITIONS = 8
MAX_CLI_LINES = 1_000_000
# `streamgate produce`'s goal, 200,000 lines/s where wrk's batches took ~219,000 msg/s, as a ratio
CLI_WRK_RATIO = 0.9
LATENCY_RATE = 200  # messages per second of the publish -> delivery rows: one at a time, paced


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


class Lone(NamedTuple):
    """``send_and_wait`` one at a time: msg/s, each call's latency (s), the gateway's CPU per
    message (us; None when not measured)."""

    rate: float
    latencies: list[float]
    gateway_us: float | None


async def producer_one_at_a_time(base: str, topic: str, seconds: float, transport: str,
                                 gateway_cpu: CpuClock | None) -> Lone:
    """``await producer.send_and_wait(...)`` in a loop over ``transport`` (after one to connect)."""
    async with Producer(base, topic, acks="1",
                        transport=transport) as producer:  # type: ignore[arg-type]
        await producer.send_and_wait(TEXT_VALUE, key=KEYS[0])
        latencies: list[float] = []
        cpu = gateway_cpu() if gateway_cpu is not None else 0.0
        started = time.perf_counter()
        while (sent_at := time.perf_counter()) - started < seconds:
            await producer.send_and_wait(TEXT_VALUE, key=KEYS[len(latencies) % 100])
            latencies.append(time.perf_counter() - sent_at)
        elapsed = time.perf_counter() - started
    per_message = (None if gateway_cpu is None
                   else (gateway_cpu() - cpu) / len(latencies) * 1e6)
    return Lone(len(latencies) / elapsed, latencies, per_message)


async def delivery_latencies(base: str, topic: str, rate_per_s: int,
                             seconds: float) -> list[float]:
    """One message every ``1 / rate_per_s`` s by ``send_and_wait`` over the producer's WebSocket
    to a broadcast ``Consumer`` in the same process: each message's publish -> delivery latency
    (s)."""
    sent: dict[int, float] = {}
    latencies: list[float] = []
    async with Consumer(base, topic, mode="broadcast", from_="latest") as consumer, \
            Producer(base, topic, acks="1") as producer:

        async def receive() -> None:
            async for message in consumer:
                if message.value != "warm-up":
                    latencies.append(time.perf_counter() - sent[int(message.value)])

        reader = asyncio.create_task(receive())
        await producer.send_and_wait("warm-up")  # the subscription is in place once it arrives
        await asyncio.sleep(0.5)
        await paced(rate_per_s, seconds, lambda n: producer.send_and_wait(n), sent)
        await wait_for_count(latencies, len(sent))
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    return latencies


def percentile_ms(latencies: list[float], share: float) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] * 1e3


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


async def client_rows(base: str, nats_url: str, seconds: float, group_messages: int,
                      gateway_cpu: CpuClock | None = None) -> list[Row]:
    """Every client row with its anchors, measured in this order in one run; ``gateway_cpu``
    reads the gateway process's CPU seconds."""
    async with aiohttp.ClientSession() as http:
        for topic in ("client-in-flight", "client-one", "client-group", "client-cli",
                      "client-latency"):
            await create_topic(http, base, topic, PARTITIONS)
    rows, wrk_rate = await producer_rows(base, nats_url, seconds)
    rows += await lone_rows(base, nats_url, seconds, gateway_cpu)
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


async def lone_rows(base: str, nats_url: str, seconds: float,
                    gateway_cpu: CpuClock | None) -> list[Row]:
    """One message at a time over the producer's WebSocket and over HTTP, against nats-py's
    ``await js.publish()``: rate, latency, the gateway's CPU per message; then publish ->
    delivery at a low steady rate against a JetStream push consumer."""
    socket = await producer_one_at_a_time(base, "client-one", seconds, "websocket", gateway_cpu)
    http = await producer_one_at_a_time(base, "client-one", seconds, "http", gateway_cpu)
    nats_rate, nats_latencies = await nats_one_at_a_time(nats_url, seconds)
    figure = "Producer: await send_and_wait() one at a time"
    rows = [at_least(Row("c2", figure, socket.rate, "msg/s", nats_rate,
                         "nats-py await js.publish", ">= 0.7x JetStream",
                         note=f"over HTTP: {http.rate:,.0f} msg/s ({http.rate / nats_rate:.2f}x)"),
                     0.7, on_ratio=True)]
    for share, limit in ((0.5, 1.5), (0.99, 2.0)):
        name = f"p{share * 100:.0f}"
        rows.append(below(Row("c2", f"{figure}, {name} latency", percentile_ms(socket.latencies,
                                                                               share), "ms",
                              percentile_ms(nats_latencies, share), f"nats-py js.publish {name}",
                              f"< {limit}x JetStream",
                              note=f"over HTTP: {percentile_ms(http.latencies, share):.2f} ms"),
                          limit, on_ratio=True))
    if socket.gateway_us is not None and http.gateway_us is not None:
        rows.append(below(Row("c2", "gateway CPU per lone message over the WebSocket",
                              socket.gateway_us, "us", http.gateway_us,
                              "the same over HTTP", "< 0.5x HTTP"), 0.5, on_ratio=True))
    ours = await delivery_latencies(base, "client-latency", LATENCY_RATE, seconds)
    theirs = await nats_delivery_latencies(nats_url, LATENCY_RATE, seconds)
    rows.append(below(Row("c5", f"publish -> delivery p50 at {LATENCY_RATE} msg/s, WebSocket "
                          "publish and broadcast subscription", percentile_ms(ours, 0.5), "ms",
                          percentile_ms(theirs, 0.5), "JetStream publish -> push consumer p50",
                          "< 1.5x JetStream",
                          note=f"p99 {percentile_ms(ours, 0.99):.2f} ms against "
                               f"{percentile_ms(theirs, 0.99):.2f} ms; one message each "
                               f"send_and_wait / js.publish"), 1.5, on_ratio=True))
    return rows


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
            return await client_rows(gateway.base, nats.url, args.seconds, args.group_messages,
                                     gateway.cpu_seconds)

        rows = asyncio.run(run())
    print(f"{os.cpu_count()} cores, NATS {nats.version()}")
    print(render_text(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
