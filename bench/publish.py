"""Publish throughput and latency: the gateway over HTTP vs bare redis-py pipelined XADD, in one
run.

Starts its own Redis Cluster (3 primaries + replicas, AOF everysec) and etcd on free loopback ports,
runs the gateway in a separate process (`streamgate serve`), then measures for each batch size:
  - gateway: N concurrent HTTP clients posting batches of B messages (acks=1), 200-byte values;
  - bare:    N concurrent tasks sending the same batches as redis-py cluster pipelines of XADD.
Prints messages/s, p50/p99 request latency and the ratio gateway/bare. Nothing here is a test
assertion.

    python bench/publish.py --messages 20000 --concurrency 16 --batches 1,100
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson
from redis.asyncio.cluster import RedisCluster

from streamgate_devstack import DevStack, DevStackConfig
from streamgate_devstack.redis_cluster import RedisClusterProcess

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wrk import wrk_binary, wrk_post_for

from streamgate_devstack.ports import free_port

VALUE = "x" * 200
PARTITIONS = 6


@dataclass(frozen=True)
class Result:
    """One measured run: every request's latency, or (from wrk) its p50 and p99 as wrk computed
    them."""

    name: str
    messages: int
    seconds: float
    latencies_s: list[float]
    measured_ms: dict[float, float] | None = None  # fraction -> latency (ms), when latencies_s is
                                                   # not kept
    refused_requests: int = 0  # answered other than 2xx, not in ``messages``
                               # (``http_publish_for(refused_ok=True)``)

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    def percentile_ms(self, fraction: float) -> float:
        """The ``fraction`` (0.5 or 0.99 for wrk runs) latency percentile in ms."""
        if self.measured_ms is not None:
            return self.measured_ms[fraction]
        return percentile_ms(self.latencies_s, fraction)

    def line(self) -> str:
        return (f"{self.name:<28} {self.rate:>11,.0f} msg/s   p50 "
                f"{self.percentile_ms(0.5):7.2f} ms   p99 {self.percentile_ms(0.99):7.2f} ms")


async def drive(requests: int, concurrency: int,
                send: Callable[[int], Awaitable[None]]) -> tuple[float, list[float]]:
    """Run ``requests`` calls of ``send`` over ``concurrency`` workers; return elapsed and per-call
    latency."""
    latencies: list[float] = []
    counter = iter(range(requests))

    async def worker() -> None:
        for index in counter:
            started = time.perf_counter()
            await send(index)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started, latencies


async def drive_for(seconds: float, concurrency: int,
                    send: Callable[[int], Awaitable[None]]) -> tuple[float, list[float]]:
    """Call ``send`` from ``concurrency`` workers until ``seconds`` have passed; return elapsed and
    latencies."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            await send(0)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started, latencies


def publish_body(batch: int, acks: str = "1", value: object = VALUE) -> bytes:
    """One prebuilt publish request of ``batch`` messages (so the client spends no time
    encoding)."""
    return orjson.dumps({"acks": acks,
                         "messages": [{"key": f"k{i}", "value": value} for i in range(batch)]})


async def http_publish_for(base: str, topic: str, body: bytes, batch: int, seconds: float,
                           concurrency: int, headers: dict[str, str] | None = None,
                           refused_ok: bool = False) -> Result:
    """POST ``body`` (``batch`` messages) from ``concurrency`` connections for ``seconds``; 200/202
    expected, or, with ``refused_ok``, refusals counted (``refused_requests``, their messages not in
    ``messages``).

    The load comes from wrk (C) when it is installed, else from an aiohttp client in this process
    (STREAMGATE_BENCH_LOADGEN=aiohttp forces that); the result's name says which.
    """
    url = f"{base}/v1/topics/{topic}/messages"
    sent_headers = {"content-type": "application/json", **(headers or {})}
    if wrk_binary() is not None and os.environ.get("STREAMGATE_BENCH_LOADGEN", "wrk") == "wrk":
        run = await wrk_post_for(url, body, sent_headers, seconds, concurrency, refused_ok)
        return Result(f"gateway batch={batch} (wrk)", (run.requests - run.refused) * batch,
                      run.seconds, [], {0.5: run.p50_ms, 0.99: run.p99_ms}, run.refused)
    connector = aiohttp.TCPConnector(limit=concurrency)
    refused = 0
    async with aiohttp.ClientSession(connector=connector) as session:

        async def send(_: int) -> None:
            nonlocal refused
            async with session.post(url, data=body, headers=sent_headers) as response:
                if response.status not in (200, 202):
                    if not refused_ok:
                        raise RuntimeError(f"publish failed: {response.status} "
                                           f"{await response.text()}")
                    refused += 1
                await response.read()

        elapsed, latencies = await drive_for(seconds, concurrency, send)
    return Result(f"gateway batch={batch}", (len(latencies) - refused) * batch, elapsed, latencies,
                  refused_requests=refused)


def percentile_ms(latencies_s: list[float], fraction: float) -> float:
    """The ``fraction`` percentile of latencies in seconds, as milliseconds."""
    ordered = sorted(latencies_s)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1000


async def bench_gateway(base: str, topic: str, batch: int, messages: int,
                        concurrency: int) -> Result:
    body = orjson.dumps({"acks": "1",
                         "messages": [{"key": f"k{i}", "value": VALUE} for i in range(batch)]})
    url = f"{base}/v1/topics/{topic}/messages"
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def send(_: int) -> None:
            async with session.post(url, data=body,
                                    headers={"content-type": "application/json"}) as response:
                if response.status != 200:
                    raise RuntimeError(f"publish failed: {response.status} {await response.text()}")
                await response.read()

        elapsed, latencies = await drive(messages // batch, concurrency, send)
    return Result(f"gateway batch={batch}", (messages // batch) * batch, elapsed, latencies)


async def bench_bare(nodes: list[tuple[str, int]], topic: str, batch: int, messages: int,
                     concurrency: int) -> Result:
    from redis.asyncio.cluster import ClusterNode

    client = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in nodes])
    await client.initialize()
    try:
        async def send(index: int) -> None:
            pipe = client.pipeline(transaction=False)
            for i in range(batch):
                pipe.xadd(f"bare:{{{topic}/{(index + i) % PARTITIONS}}}:log",
                          {"v": VALUE, "k": f"k{i}"})
            await pipe.execute()

        elapsed, latencies = await drive(messages // batch, concurrency, send)
    finally:
        await client.aclose()
    return Result(f"bare redis-py batch={batch}", (messages // batch) * batch, elapsed, latencies)


def start_gateway(stack: DevStack, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ,
           "STREAMGATE_AUTH_MODE": "none",
           "STREAMGATE_REDIS_NODES": ",".join(f"{h}:{p}" for h, p in stack.redis_startup_nodes),
           "STREAMGATE_ETCD_ENDPOINTS": stack.etcd_endpoint}
    return subprocess.Popen([sys.executable, "-m", "gateway.cli", "--log-level", "warning", "serve",
                             "--port", str(port)], env=env)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def redis_cpu_by_role(cluster: RedisClusterProcess) -> dict[str, float]:
    """CPU seconds used so far by the cluster's primaries and by its replicas (no "replicas" key
    without any)."""
    used = {"primaries": 0.0}
    for node in cluster.nodes:
        if node.pid is not None:
            role = "primaries" if node.role == "primary" else "replicas"
            used[role] = used.get(role, 0.0) + process_cpu_seconds(node.pid)
    return used


def redis_cpu_seconds(stack: DevStack) -> dict[str, float]:
    """CPU seconds used so far by the cluster's primaries and by its replicas (0.0 for a cluster
    without)."""
    return {"replicas": 0.0, **redis_cpu_by_role(stack.redis)}


@contextlib.asynccontextmanager
async def serving_gateway(stack: DevStack) -> AsyncIterator[tuple[str, subprocess.Popen[bytes]]]:
    """A gateway process on a free port, ready: (base URL, process); terminated on exit."""
    port = free_port()
    gateway = start_gateway(stack, port)
    try:
        base = f"http://127.0.0.1:{port}"
        await wait_ready(base)
        yield base, gateway
    finally:
        gateway.terminate()
        gateway.wait(30)


async def wait_ready(base: str) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(200):
            try:
                async with session.get(base + "/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("gateway did not become ready")


async def run(args: argparse.Namespace, stack: DevStack) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    gateway = start_gateway(stack, port)
    try:
        await wait_ready(base)
        async with aiohttp.ClientSession() as session:
            await session.post(base + "/v1/topics",
                               json={"name": "bench", "partitions": PARTITIONS})
        print(f"# {args.messages} messages of {len(VALUE)} B, concurrency "
              f"{args.concurrency}, acks=1, {PARTITIONS} partitions, 3 primaries x {args.replicas} "
              "replicas, AOF everysec")
        for batch in args.batches:
            count = args.messages if batch > 1 else args.single_messages
            gateway_result = await bench_gateway(base, "bench", batch, count, args.concurrency)
            bare_result = await bench_bare(stack.redis_startup_nodes, "bench", batch, count,
                                           args.concurrency)
            print(gateway_result.line())
            print(bare_result.line())
            print(f"{'ratio gateway/bare':<28} {gateway_result.rate / bare_result.rate:>11.2f}")
    finally:
        gateway.send_signal(signal.SIGTERM)
        gateway.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=50_000, help="messages per batched run")
    parser.add_argument("--single-messages", type=int, default=5_000,
                        help="messages for batch=1 runs")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1, 100])
    parser.add_argument("--replicas", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sg-bench-") as tmp, \
            DevStack(DevStackConfig(data_dir=Path(tmp), redis_replicas=args.replicas)) as stack:
        asyncio.run(run(args, stack))


if __name__ == "__main__":
    main()
