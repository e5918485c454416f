"""Gateway throughput with worker processes: `streamgate serve --workers N` for N = 1, 2, ... in one
run.

Starts its own Redis Cluster (3 primaries x 1 replica, AOF everysec) and etcd on free loopback
ports. For each N it starts `streamgate serve --workers N`, then load-generator processes post
batches of B messages (acks=1, 200-byte values, prebuilt bodies, many connections so SO_REUSEPORT
spreads them) for a fixed time. It prints msg/s, p50/p99 request latency and the CPU seconds spent
per 100k messages by the gateway workers, Redis and the load generators, plus the anchor measured in
the same run: raw pipelined XADD (redis-benchmark -P B on every primary at once, AOF on) and N=1.
Nothing here is a test assertion; on a shared 2-core machine the absolute figures are noisy, the
ratios less so.

    python bench/workers.py --workers 1,2 --seconds 8 --batch 100
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson
from redis.cluster import RedisCluster

from streamgate_devstack import DevStack, DevStackConfig
from streamgate_devstack.ports import free_port

VALUE = "x" * 200
PARTITIONS = 12
TOPIC = "bench-workers"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class LoadResult:
    """What one load-generator process did."""

    requests: int
    latencies_s: list[float]
    cpu_s: float


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def tree_pids(pid: int) -> list[int]:
    """A process and its children."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *(int(child) for child in children)]


def load_process(url: str, body: bytes, connections: int, seconds: float,
                 queue: multiprocessing.Queue[LoadResult]) -> None:
    """One load generator: ``connections`` concurrent posters for ``seconds``."""
    queue.put(asyncio.run(_load(url, body, connections, seconds)))


async def _load(url: str, body: bytes, connections: int, seconds: float) -> LoadResult:
    latencies: list[float] = []
    cpu_before = time.process_time()
    deadline = time.monotonic() + seconds
    headers = {"content-type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections,
                                                                    force_close=False)) as session:

        async def poster() -> None:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"publish failed: {response.status}")
                latencies.append(time.perf_counter() - started)

        await asyncio.gather(*(poster() for _ in range(connections)))
    return LoadResult(len(latencies), latencies, time.process_time() - cpu_before)


def start_gateway(stack: DevStack, port: int, workers: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "STREAMGATE_AUTH_MODE": "none",
           "STREAMGATE_REDIS_NODES": ",".join(f"{h}:{p}" for h, p in stack.redis_startup_nodes),
           "STREAMGATE_ETCD_ENDPOINTS": stack.etcd_endpoint,
           "STREAMGATE_ETCD_PREFIX": f"/bench-{port}/"}
    return subprocess.Popen([sys.executable, "-m", "gateway.cli", "--log-level", "warning", "serve",
                             "--port", str(port), "--workers", str(workers)], env=env)


async def wait_ready(base: str, topic: bool) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(300):
            try:
                async with session.get(base + "/readyz") as response:
                    if response.status == 200:
                        break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
        else:
            raise RuntimeError("gateway did not become ready")
        if topic:
            async with session.post(base + "/v1/topics",
                                    json={"name": TOPIC, "partitions": PARTITIONS}) as created:
                await created.read()


def redis_pids(stack: DevStack) -> list[int]:
    ports = {str(port) for _, port in stack.redis_startup_nodes}
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if ("redis-server" in cmdline.split(" ", 1)[0]
                    and any(f":{port} " in cmdline for port in ports)):
                pids.append(int(entry.name))
    return pids


def measure_gateway(stack: DevStack, workers: int, args: argparse.Namespace) -> tuple[str, float]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    gateway = start_gateway(stack, port, workers)
    try:
        asyncio.run(wait_ready(base, topic=True))
        time.sleep(1.0)  # every worker ready: the parent's readiness is one worker's
        body = orjson.dumps({"acks": "1",
                             "messages": [{"key": f"k{i}", "value": VALUE}
                                          for i in range(args.batch)]})
        url = f"{base}/v1/topics/{TOPIC}/messages"
        asyncio.run(_load(url, body, 4, 1.0))  # warm up every worker's connections and scripts
        gateway_pids, redis = tree_pids(gateway.pid), redis_pids(stack)
        cpu_before = {pid: cpu_seconds(pid) for pid in gateway_pids + redis}
        queue: multiprocessing.Queue[LoadResult] = multiprocessing.Queue()
        loaders = [multiprocessing.Process(target=load_process,
                                           args=(url, body, args.connections, args.seconds, queue))
                   for _ in range(args.loaders)]
        started = time.perf_counter()
        for loader in loaders:
            loader.start()
        results = [queue.get() for _ in loaders]
        elapsed = time.perf_counter() - started
        for loader in loaders:
            loader.join()
        spent = {pid: cpu_seconds(pid) - before for pid, before in cpu_before.items()}
    finally:
        gateway.send_signal(signal.SIGTERM)
        gateway.wait(timeout=90)
    messages = sum(r.requests for r in results) * args.batch
    latencies = sorted(lat for r in results for lat in r.latencies_s)
    per_100k = 100_000 / max(1, messages)
    gateway_cpu = sum(spent[pid] for pid in gateway_pids)
    redis_cpu = sum(spent[pid] for pid in redis)
    load_cpu = sum(r.cpu_s for r in results)
    rate = messages / elapsed
    p50 = statistics.median(latencies) * 1000
    p99 = latencies[int(len(latencies) * 0.99)] * 1000
    return (f"workers={workers:<3} {rate:>10,.0f} msg/s  p50 {p50:6.1f} ms  p99 {p99:6.1f} ms  "
            f"CPU s/100k msgs: gateway {gateway_cpu * per_100k:5.2f} redis "
            f"{redis_cpu * per_100k:5.2f} load {load_cpu * per_100k:5.2f}"), rate


def primaries_with_keys(stack: DevStack) -> list[tuple[int, str]]:
    """One (port, key) per primary, the key in a slot that primary serves."""
    host, port = stack.redis_startup_nodes[0]
    client = RedisCluster(host=host, port=port)
    try:
        found: dict[int, str] = {}
        for tag in range(10_000):
            key = f"raw:{{t{tag}}}:log"
            node = client.nodes_manager.get_node_from_slot(client.keyslot(key))
            found.setdefault(int(node.port), key)
            if len(found) == len(client.get_primaries()):
                return sorted(found.items())
    finally:
        client.close()
    raise RuntimeError("could not find a key per primary")


def raw_redis_rate(stack: DevStack, args: argparse.Namespace) -> float:
    """redis-benchmark XADD pipelined -P batch on every primary at once: total entries/s."""
    commands = [["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", "8", "-n",
                 str(args.raw_requests), "-P", str(args.batch), "--csv", "XADD", key, "*", "v",
                 VALUE, "k", "k1"]
                for port, key in primaries_with_keys(stack)]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for command in commands]
    total = 0.0
    for run in runs:
        output, _ = run.communicate(timeout=300)
        last = [line for line in output.splitlines() if line.startswith('"XADD')][-1]
        total += float(last.split(",")[1].strip('"'))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2])
    parser.add_argument("--seconds", type=float, default=8.0, help="load time per run")
    parser.add_argument("--batch", type=int, default=100, help="messages per request")
    parser.add_argument("--loaders", type=int, default=2, help="load-generator processes")
    parser.add_argument("--connections", type=int, default=16,
                        help="connections per load generator")
    parser.add_argument("--raw-requests", type=int, default=200_000,
                        help="XADDs per primary for the anchor")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sg-bench-") as tmp, \
            DevStack(DevStackConfig(data_dir=Path(tmp), redis_replicas=1)) as stack:
        print(f"# {os.cpu_count()} CPUs; batch {args.batch} x {len(VALUE)} B, acks=1, "
              f"{PARTITIONS} partitions, 3 primaries x 1 replica, AOF everysec; {args.loaders} "
              f"load processes x {args.connections} connections, {args.seconds:.0f} s per run")
        raw = raw_redis_rate(stack, args)
        print(f"{'raw redis-benchmark XADD':<20} {raw:>10,.0f} msg/s  (-P {args.batch}, every "
              "primary at once)")
        rates: dict[int, float] = {}
        for workers in args.workers:
            line, rates[workers] = measure_gateway(stack, workers, args)
            print(line, flush=True)
        first = args.workers[0]
        for workers, rate in rates.items():
            print(f"workers={workers}: {rate / rates[first]:.2f}x workers={first}, "
                  f"{rate / raw:.2f}x raw Redis")


if __name__ == "__main__":
    main()
