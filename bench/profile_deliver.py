"""Delivery profiling and figures: group delivery with acks, broadcast fan-out, latency, with
anchors.

Starts its own Redis Cluster + etcd (loopback, free ports) and one gateway process, then prints:
  1. anchor: bare redis-py XREADGROUP COUNT 500 + XACK of the same messages on the same cluster
     (msg/s);
  2. group delivery + ack over WebSocket through the gateway (bench/deliver.py's consumers);
  3. broadcast fan-out: S subscribers of one topic, M messages published while they follow;
     deliveries/s (subscriber processes count frames without parsing them, so the client is not the
     limit);
  4. publish -> delivery latency at a fixed rate (p50/p99).
``--py-spy FILE`` records the gateway process with py-spy (speedscope JSON) while it runs.
Nothing here is a test assertion; figures on a shared 2-core machine are noisy: read the ratios.

    python bench/profile_deliver.py --messages 50000 --subscribers 200 --fanout-messages 5000
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from deliver import create_topic, latency, lean_group_drain, publish, throughput
from publish import process_cpu_seconds, redis_cpu_seconds, start_gateway, wait_ready
from redis.asyncio.cluster import RedisCluster

from storage.keys import log_key
from streamgate_devstack import DevStack, DevStackConfig
from streamgate_devstack.ports import free_port

PARTITIONS = 8


async def redis_group_anchor(stack: DevStack, topic: str, messages: int) -> None:
    """Bare redis-py: XREADGROUP COUNT 500 then one XACK of the page, every partition in turn."""
    host, port = stack.redis_startup_nodes[0]
    cluster = RedisCluster(host=host, port=port, decode_responses=False)
    try:
        keys = [log_key(topic, p) for p in range(PARTITIONS)]
        for key in keys:
            await cluster.xgroup_create(key, "anchor", id="0")
        started, done = time.perf_counter(), 0
        while done < messages:
            got = 0
            for key in keys:
                reply = await cluster.xreadgroup("anchor", "c", {key: ">"}, count=500)
                if reply:
                    ids = [entry_id for entry_id, _ in reply[0][1]]
                    await cluster.xack(key, "anchor", *ids)
                    got += len(ids)
            if not got:
                break
            done += got
        elapsed = time.perf_counter() - started
        print("anchor: bare redis-py XREADGROUP COUNT 500 + XACK:      "
              f"{done / elapsed:>10,.0f} msg/s ({done})")
    finally:
        await cluster.aclose()


def fanout_subscriber(base: str, topic: str, sockets: int, expected: int,
                      ready: multiprocessing.Queue[int],
                      results: multiprocessing.Queue[tuple[int, float]]) -> None:
    """A process holding ``sockets`` broadcast subscriptions; reports frames received and when the
    last came."""

    async def one(http: aiohttp.ClientSession, counts: list[int], last: list[float]) -> None:
        params = {"topic": topic, "from": "latest", "max_in_flight": "2000"}
        async with http.ws_connect(f"{base}/v1/subscribe", params=params, max_msg_size=0) as ws:
            await ws.receive()  # assignment
            ready.put(1)
            got = 0
            while got < expected:
                message = await ws.receive()
                if message.type is not aiohttp.WSMsgType.TEXT:
                    break
                got += 1
            counts[0] += got
            last[0] = max(last[0], time.time())

    async def main() -> None:
        counts, last = [0], [0.0]
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as http:
            await asyncio.gather(*(one(http, counts, last) for _ in range(sockets)),
                                 return_exceptions=True)
        results.put((counts[0], last[0]))

    asyncio.run(main())


async def lean_group_throughput(http: aiohttp.ClientSession, base: str, messages: int,
                                processes: int, gateway_pid: int, stack: DevStack) -> None:
    """Group delivery + ack with consumers in their own processes (orjson, acks of up to 500 per
    frame)."""
    await create_topic(http, base, "group-lean-bench")
    await publish(http, base, "group-lean-bench", messages)
    cpu_before, redis_before = process_cpu_seconds(gateway_pid), redis_cpu_seconds(stack)
    total, elapsed = await lean_group_drain(base, "group-lean-bench", "lean", messages, processes)
    cpu = process_cpu_seconds(gateway_pid) - cpu_before
    redis_used = {role: seconds - redis_before[role]
                  for role, seconds in redis_cpu_seconds(stack).items()}
    print("group delivery + ack, Redis CPU per message:           " + ", ".join(
        f"{role} {1e6 * seconds / max(total, 1):.2f} us" for role, seconds in redis_used.items()))
    print(f"group delivery + ack, lean consumers, per gateway CPU s: {total / cpu:>10,.0f} "
          f"msg/CPU-s ({cpu:.2f} s)")
    print(f"group delivery + ack, lean consumer processes:         {total / elapsed:>10,.0f} msg/s "
          f"({total} of {messages} acked in {elapsed:.2f} s from the first delivery, "
          f"{processes}x2 members)")


def idle_holder(base: str, topic: str, sockets: int, ready: multiprocessing.Queue[int],
                release: multiprocessing.Queue[int]) -> None:
    """A process holding ``sockets`` idle broadcast subscriptions until told to let go."""

    async def main() -> None:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            sockets_open = [await http.ws_connect(f"{base}/v1/subscribe", params={"topic": topic})
                            for _ in range(sockets)]
            for ws in sockets_open:
                await ws.receive()  # assignment: the subscription is being served
            ready.put(len(sockets_open))
            await asyncio.to_thread(release.get, True, 300)
            for ws in sockets_open:
                await ws.close()

    asyncio.run(main())


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def idle_memory(http: aiohttp.ClientSession, base: str, gateway_pid: int,
                      connections: int) -> None:
    """Gateway RSS growth per idle broadcast subscription (after a warm-up batch of the same
    size)."""
    await create_topic(http, base, "idle-bench")
    context = multiprocessing.get_context("spawn")
    holders, figures = [], []
    for _ in range(2):  # the first round reuses memory freed by earlier runs; the second (both
                        # held) is the figure
        ready: multiprocessing.Queue[int] = context.Queue()
        release: multiprocessing.Queue[int] = context.Queue()
        before = rss_kib(gateway_pid)
        holder = context.Process(target=idle_holder,
                                 args=(base, "idle-bench", connections, ready, release))
        holder.start()
        held = await asyncio.to_thread(ready.get, True, 300)
        await asyncio.sleep(1.0)
        figures.append((rss_kib(gateway_pid) - before) / held)
        holders.append((holder, release))
    cpu_before = process_cpu_seconds(gateway_pid)
    await asyncio.sleep(3.0)
    idle_cpu = (process_cpu_seconds(gateway_pid) - cpu_before) / 3.0
    for holder, release in holders:
        release.put(1)
        holder.join(60)
    print(f"gateway CPU with {2 * connections} idle broadcast subscribers:       "
          f"{idle_cpu * 100:>10.1f} % of a core")
    print(f"gateway memory per idle broadcast connection:           {figures[-1]:>10.1f} KiB "
          f"(another {connections} connections on top of {connections}, 8 partitions)")


async def fanout(http: aiohttp.ClientSession, base: str, subscribers: int, messages: int,
                 processes: int, gateway_pid: int) -> None:
    await create_topic(http, base, "fanout-bench")
    context = multiprocessing.get_context("spawn")
    ready: multiprocessing.Queue[int] = context.Queue()
    results: multiprocessing.Queue[tuple[int, float]] = context.Queue()
    per = subscribers // processes
    workers = [context.Process(target=fanout_subscriber,
                               args=(base, "fanout-bench", per, messages, ready, results))
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    for _ in range(per * processes):
        await asyncio.to_thread(ready.get, True, 60)
    await asyncio.sleep(0.5)
    cpu_before = process_cpu_seconds(gateway_pid)
    started = time.time()
    await publish(http, base, "fanout-bench", messages)
    total, last = 0, 0.0
    for _ in workers:
        count, at = await asyncio.to_thread(results.get, True, 300)
        total, last = total + count, max(last, at)
    for worker in workers:
        worker.join(10)
    elapsed = last - started
    cpu = process_cpu_seconds(gateway_pid) - cpu_before
    print(f"broadcast fan-out, per gateway CPU second:              {total / cpu:>10,.0f} "
          f"msg/CPU-s ({cpu:.2f} s)")
    print(f"broadcast fan-out to {per * processes} subscribers:            "
          f"{total / elapsed:>10,.0f} msg/s ({total} deliveries of {messages} messages in "
          f"{elapsed:.2f} s, {processes} client processes)")


def start_py_spy(pid: int, output: str) -> subprocess.Popen[bytes]:
    """py-spy recording process ``pid`` into a speedscope file (stopped with SIGINT)."""
    return subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(pid),
                             "-f", "speedscope", "-o", output, "-r", "200", "--nonblocking"])


async def run(args: argparse.Namespace, stack: DevStack) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    gateway = start_gateway(stack, port)
    spy = None
    try:
        await wait_ready(base)
        if args.py_spy:
            spy = start_py_spy(gateway.pid, args.py_spy)
        async with aiohttp.ClientSession() as http:
            await create_topic(http, base, "anchor-bench")
            await publish(http, base, "anchor-bench", args.messages)
            await redis_group_anchor(stack, "anchor-bench", args.messages)
            await throughput(http, base, args.messages, args.consumers)
            await lean_group_throughput(http, base, args.messages, args.client_processes,
                                        gateway.pid, stack)
            if args.subscribers:
                await fanout(http, base, args.subscribers, args.fanout_messages,
                             args.client_processes, gateway.pid)
            await latency(http, base, args.rate, args.seconds)
            if args.idle_connections:
                await idle_memory(http, base, gateway.pid, args.idle_connections)
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            spy.wait(timeout=60)
        gateway.terminate()
        gateway.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=30_000)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--subscribers", type=int, default=200)
    parser.add_argument("--fanout-messages", type=int, default=3000)
    parser.add_argument("--client-processes", type=int, default=2)
    parser.add_argument("--rate", type=int, default=5000, help="publish rate for the latency run")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--idle-connections", type=int, default=900)
    parser.add_argument("--py-spy", default="",
                        help="record the gateway with py-spy into this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sg-bench-") as tmp, \
            DevStack(DevStackConfig(data_dir=Path(tmp))) as stack:
        asyncio.run(run(args, stack))


if __name__ == "__main__":
    main()
