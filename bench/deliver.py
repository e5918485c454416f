"""Delivery: consumer-group throughput with acks over WebSocket, end-to-end latency and redelivery
timing.

Starts its own Redis Cluster + etcd (loopback, free ports) and one gateway process, then measures:
  1. throughput: N pre-published messages drained by C exclusive-group WebSocket consumers that ack
     in batches (msg/s delivered and acked, one gateway process);
  2. latency: publish -> WebSocket delivery at a fixed publish rate (p50/p99);
  3. redelivery: how long after the ack timeout an un-acked message comes back, and after a nack.
Nothing here is a test assertion.

    python bench/deliver.py --messages 50000 --consumers 4
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
from publish import start_gateway, wait_ready

from streamgate_devstack import DevStack, DevStackConfig
from streamgate_devstack.ports import free_port

PARTITIONS = 8
GROUP_DRAIN = Path(__file__).resolve().parent / "group_drain.py"


async def create_topic(http: aiohttp.ClientSession, base: str, name: str,
                       partitions: int = PARTITIONS) -> None:
    async with http.post(f"{base}/v1/topics",
                         json={"name": name, "partitions": partitions}) as response:
        assert response.status == 201, await response.text()


async def publish(http: aiohttp.ClientSession, base: str, topic: str, count: int) -> None:
    for start in range(0, count, 1000):
        body = {"messages": [{"key": f"k{i}", "value": {"i": i, "t": time.time()}}
                             for i in range(start, min(count, start + 1000))]}
        async with http.post(f"{base}/v1/topics/{topic}/messages", json=body) as response:
            assert response.status == 200, await response.text()


async def consume(http: aiohttp.ClientSession, base: str, topic: str, group: str,
                  done: asyncio.Event, counter: list[int], total: int,
                  latencies: list[float] | None = None,
                  assigned: asyncio.Event | None = None) -> None:
    params = {"topic": topic, "group": group, "max_in_flight": "1000"}
    async with http.ws_connect(f"{base}/v1/subscribe", params=params) as ws:
        pending: list[dict[str, Any]] = []
        while not done.is_set():
            try:
                frame = await asyncio.wait_for(ws.receive_json(loads=orjson.loads),
                                               0.01 if pending else 1.0)
            except TimeoutError:
                frame = None
            if frame and frame["type"] == "assignment" and assigned is not None \
                    and len(frame["partitions"]) == PARTITIONS:
                assigned.set()
            if frame and frame["type"] == "message":
                if latencies is not None:
                    latencies.append(time.time() - frame["value"]["t"])
                pending.append({"partition": frame["partition"], "offset": frame["offset"]})
            if pending and (frame is None or len(pending) >= 200):
                await ws.send_json({"type": "ack", "messages": pending})
                counter[0] += len(pending)
                pending = []
                if counter[0] >= total:
                    done.set()


async def lean_group_drain(base: str, topic: str, group: str, messages: int, processes: int,
                           members: int = 2) -> tuple[int, float]:
    """Drain a prefilled topic with ``processes`` x ``members`` exclusive-group consumers in their
    own processes (bench/group_drain.py: lean, so the client is not the limit); (messages acked,
    seconds from the first delivery to the last ack)."""
    acked, first_ts, last_ts = await lean_group_drain_window(base, topic, group, messages,
                                                             processes, members)
    return acked, max(last_ts - first_ts, 1e-9)


async def lean_group_drain_window(base: str, topic: str, group: str, messages: int, processes: int,
                                  members: int = 2,
                                  client_args: Sequence[str] = ()) -> tuple[int, float, float]:
    """``lean_group_drain``'s drain: (messages acked, wall-clock time of the first delivery, of the
    last ack). ``client_args``: more options for bench/group_drain.py (``--ack-each-read``)."""
    argv = [sys.executable, str(GROUP_DRAIN), "--port",
            str(urlsplit(base).port), "--topic", topic, "--group", group, "--members", str(members),
            "--total", str(messages), *client_args]
    workers = [await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
               for _ in range(processes)]
    try:
        outputs = await asyncio.wait_for(asyncio.gather(*(worker.communicate()
                                                          for worker in workers)), 600)
    finally:
        for worker in workers:
            if worker.returncode is None:
                worker.kill()
                await worker.wait()
    results = [orjson.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    started = min((r["first_ts"] for r in results if r["first_ts"]), default=0.0)
    last = max(r["last_ts"] for r in results)
    return sum(r["acked"] for r in results), started, last


async def group_rate(http: aiohttp.ClientSession, base: str, topic: str, messages: int,
                     consumers: int, timeout_s: float = 600) -> tuple[float, int]:
    """Prefill ``messages``, drain them with ``consumers`` exclusive-group sockets acking by 200:
    (msg/s, acked)."""
    await create_topic(http, base, topic)
    await publish(http, base, topic, messages)
    done, counter = asyncio.Event(), [0]
    started = time.perf_counter()
    tasks = [asyncio.create_task(consume(http, base, topic, "bench", done, counter, messages))
             for _ in range(consumers)]
    try:
        await asyncio.wait_for(done.wait(), timeout_s)
    finally:
        elapsed = time.perf_counter() - started
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return counter[0] / elapsed, counter[0]


async def paced_latencies(http: aiohttp.ClientSession, base: str, topic: str, rate_per_s: int,
                          seconds: float) -> tuple[list[float], float]:
    """Publish at ``rate_per_s`` (batches every 10 ms, paced on the clock) to one group consumer;
    return the publish -> delivery latencies (s) and the publish rate achieved."""
    await create_topic(http, base, topic)
    done, counter, latencies, assigned = asyncio.Event(), [0], [], asyncio.Event()
    per_tick = max(1, rate_per_s // 100)
    ticks = max(1, int(seconds * 100))
    consumer = asyncio.create_task(consume(http, base, topic, "lat", done, counter,
                                           per_tick * ticks, latencies, assigned))
    await asyncio.wait_for(assigned.wait(), 30)
    started = time.perf_counter()
    for tick in range(ticks):
        body = {"messages": [{"value": {"i": tick, "t": time.time()}} for _ in range(per_tick)]}
        async with http.post(f"{base}/v1/topics/{topic}/messages", json=body) as response:
            assert response.status == 200, await response.text()
        await asyncio.sleep(max(0.0, started + (tick + 1) / 100 - time.perf_counter()))
    achieved = per_tick * ticks / (time.perf_counter() - started)
    try:
        await asyncio.wait_for(done.wait(), 60)
    finally:
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
    return latencies, achieved


async def throughput(http: aiohttp.ClientSession, base: str, messages: int, consumers: int) -> None:
    rate, acked = await group_rate(http, base, "deliver-bench", messages, consumers)
    counter = [acked]
    print(f"group delivery + ack over WebSocket: {rate:>10,.0f} msg/s "
          f"({counter[0]} messages, {consumers} consumers, {PARTITIONS} partitions, one "
          "gateway process)")


async def latency(http: aiohttp.ClientSession, base: str, rate_per_s: int, seconds: float) -> None:
    await create_topic(http, base, "latency-bench")
    done, counter, latencies, assigned = asyncio.Event(), [0], [], asyncio.Event()
    total = int(rate_per_s * seconds)
    consumer = asyncio.create_task(consume(http, base, "latency-bench", "lat", done, counter, total,
                                           latencies, assigned))
    await asyncio.wait_for(assigned.wait(), 30)
    per_tick = max(1, rate_per_s // 100)
    for tick in range(total // per_tick):
        body = {"messages": [{"value": {"i": tick, "t": time.time()}} for _ in range(per_tick)]}
        async with http.post(f"{base}/v1/topics/latency-bench/messages", json=body) as response:
            assert response.status == 200
        await asyncio.sleep(0.01)
    await asyncio.wait_for(done.wait(), 60)
    consumer.cancel()
    ordered = sorted(latencies)
    print(f"publish -> delivery latency at ~{rate_per_s} msg/s: p50 "
          f"{statistics.median(ordered) * 1000:.1f} ms, p99 "
          f"{ordered[int(len(ordered) * 0.99)] * 1000:.1f} ms ({len(ordered)} messages)")


async def redelivery(http: aiohttp.ClientSession, base: str, ack_timeout_ms: int) -> None:
    await create_topic(http, base, "redelivery-bench")
    params = {"topic": "redelivery-bench", "group": "r", "ack_timeout_ms": str(ack_timeout_ms)}
    async with http.ws_connect(f"{base}/v1/subscribe", params=params) as ws:
        await ws.receive_json()  # assignment
        await publish(http, base, "redelivery-bench", 1)
        first = await ws.receive_json()
        t0 = time.perf_counter()
        second = await ws.receive_json()
        timeout_s = time.perf_counter() - t0
        ref = {"partition": second["partition"], "offset": second["offset"]}
        t1 = time.perf_counter()
        await ws.send_json({"type": "nack", "messages": [ref]})
        third = await ws.receive_json()
        nack_s = time.perf_counter() - t1
    assert first["offset"] == second["offset"] == third["offset"]
    print(f"redelivery after ack timeout {ack_timeout_ms} ms: {timeout_s * 1000:.0f} ms "
          f"(delivery_count {second['delivery_count']}); after nack: {nack_s * 1000:.0f} ms "
          f"(delivery_count {third['delivery_count']})")


async def promotion(http: aiohttp.ClientSession, base: str, count: int) -> None:
    """Delayed-message promotion latency: the promoted entry's stream timestamp minus its due
    time."""
    await create_topic(http, base, "delayed-bench")
    now_ms = int(time.time() * 1000)
    due = {i: now_ms + 1000 + (i * 2000) // count for i in range(count)}
    body = {"messages": [{"value": i, "deliver_at_ms": due[i]} for i in range(count)]}
    async with http.post(f"{base}/v1/topics/delayed-bench/messages", json=body) as response:
        assert response.status == 200, await response.text()
    await asyncio.sleep(4.0)
    late_ms = []
    for partition in range(PARTITIONS):
        async with http.get(f"{base}/v1/topics/delayed-bench/partitions/{partition}/messages",
                            params={"limit": "1000"}) as response:
            late_ms += [m["timestamp_ms"] - due[m["value"]]
                        for m in (await response.json())["messages"]]
    ordered = sorted(late_ms)
    print(f"delayed-message promotion after due time: p50 {statistics.median(ordered):.0f} ms, "
          f"p99 {ordered[int(len(ordered) * 0.99)]:.0f} ms, max {ordered[-1]:.0f} ms "
          f"({len(ordered)} of {count} promoted)")


async def run(args: argparse.Namespace, stack: DevStack) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    gateway = start_gateway(stack, port)
    try:
        await wait_ready(base)
        async with aiohttp.ClientSession() as http:
            await throughput(http, base, args.messages, args.consumers)
            await latency(http, base, args.rate, args.seconds)
            await redelivery(http, base, args.ack_timeout_ms)
            await promotion(http, base, args.delayed)
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--rate", type=int, default=1000, help="publish rate for the latency run")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--ack-timeout-ms", type=int, default=1000)
    parser.add_argument("--delayed", type=int, default=500,
                        help="delayed messages for the promotion run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sg-bench-") as tmp, \
            DevStack(DevStackConfig(data_dir=Path(tmp))) as stack:
        asyncio.run(run(args, stack))


if __name__ == "__main__":
    main()
