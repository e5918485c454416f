"""Profile HTTP publish and measure it beside its anchors, in one run (a tool, not a test).

Starts its own Redis Cluster (3 primaries, AOF everysec) and etcd, a gateway process, then for each
batch size:
  - gateway: concurrent HTTP clients posting batches (acks=1, or --acks), 200-byte values;
  - bare redis-py: the same batches as redis-py cluster pipelines of XADD;
  - raw XADD: the same batches pipelined as raw RESP over one connection per primary
    (``storage.wire.lanes``), the "Redis limit" anchor from Python (no Lua, no dedup, no HTTP).
With ``--profile`` the gateway's run is sampled by py-spy (``py-spy record --pid``) and the hottest
functions by own time and by total time are printed; ``--flamegraph DIR`` keeps an SVG per batch
size.

    python bench/profile_publish.py --batches 1,100 --messages 30000 \\
        --single-messages 5000 --profile
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from publish import (  # bench/ is not a package
    PARTITIONS,
    VALUE,
    Result,
    bench_bare,
    drive,
    http_publish_for,
    process_cpu_seconds,
    redis_cpu_seconds,
    start_gateway,
    wait_ready,
)
from wrk import wrk_binary

from storage.keys import slot_of
from storage.settings import RedisStoreSettings
from storage.wire.lanes import NodeLanes
from streamgate_devstack import DevStack, DevStackConfig
from streamgate_devstack.ports import free_port


async def bench_gateway(base: str, topic: str, batch: int, messages: int, concurrency: int,
                        acks: str) -> Result:
    """The gateway under load: from wrk for about as long as ``messages`` take at ~10k req/s when
    wrk is installed (the load generator then costs little of the shared CPU), else ``messages``
    from aiohttp."""
    body = orjson.dumps({"acks": acks,
                         "messages": [{"key": f"k{i}", "value": VALUE} for i in range(batch)]})
    if wrk_binary() is not None:
        seconds = max(2.0, min(10.0, messages / batch / 10_000 * (10 if batch > 1 else 1)))
        return await http_publish_for(base, topic, body, batch, seconds, concurrency)
    url = f"{base}/v1/topics/{topic}/messages"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:

        async def send(_: int) -> None:
            async with session.post(url, data=body,
                                    headers={"content-type": "application/json"}) as response:
                if response.status != 200:
                    raise RuntimeError(f"publish failed: {response.status} {await response.text()}")
                await response.read()

        elapsed, latencies = await drive(messages // batch, concurrency, send)
    return Result(f"gateway batch={batch} acks={acks}", (messages // batch) * batch, elapsed,
                  latencies)


async def bench_raw(stack: DevStack, topic: str, batch: int, messages: int,
                    concurrency: int) -> Result:
    """Pipelined XADD as raw RESP, each batch split by owning primary: the ceiling a Python client
    can reach."""
    settings = RedisStoreSettings(startup_nodes=list(stack.redis_startup_nodes))
    probe = await _owners(stack, topic)
    async with NodeLanes(settings) as lanes:

        async def send(index: int) -> None:
            by_node: dict[tuple[str, int], list[tuple[object, ...]]] = collections.defaultdict(list)
            for i in range(batch):
                partition = (index + i) % PARTITIONS
                by_node[probe[partition]].append(
                    ("XADD", f"raw:{{{topic}/{partition}}}:log", "*", "v", VALUE, "k", f"k{i}"))
            await asyncio.gather(*(lanes.execute(addr, cmds, exclusive=False)
                                   for addr, cmds in by_node.items()))

        elapsed, latencies = await drive(messages // batch, concurrency, send)
    return Result(f"raw RESP XADD batch={batch}", (messages // batch) * batch, elapsed, latencies)


async def _owners(stack: DevStack, topic: str) -> dict[int, tuple[str, int]]:
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    cluster = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in stack.redis_startup_nodes])
    await cluster.initialize()
    try:
        owners = {}
        for partition in range(PARTITIONS):
            node = cluster.nodes_manager.get_node_from_slot(slot_of(topic, partition))
            owners[partition] = (node.host, int(node.port))
        return owners
    finally:
        await cluster.aclose()


def _load_generator_cpu() -> float:
    """CPU seconds of this process plus its finished children (wrk, once it exits)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def start_profiler(pid: int, out: Path, fmt: str) -> subprocess.Popen[bytes] | None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("# py-spy not found: pip install py-spy (dev extra)")
        return None
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "200", "--format", fmt,
                             "--output", str(out), "--nonblocking"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def stop_profiler(profiler: subprocess.Popen[bytes]) -> None:
    profiler.send_signal(2)  # SIGINT: py-spy writes its output and exits
    profiler.wait(timeout=60)


def summarize(collapsed: Path, top: int) -> None:
    """Print the functions with the most own samples and the most total samples (collapsed stack
    format)."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        frames = [_short(frame) for frame in stack.split(";")]
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    if not samples:
        print("# no samples")
        return
    print(f"# {samples} samples; own time:")
    for frame, count in own.most_common(top):
        print(f"  {100 * count / samples:5.1f}%  {frame}")
    print("# total time (including callees):")
    for frame, count in total.most_common(top):
        print(f"  {100 * count / samples:5.1f}%  {frame}")


def _short(frame: str) -> str:
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    for marker in ("site-packages/", "/work/main/", "python3.11/"):
        if marker in where:
            where = where.split(marker, 1)[1]
    return f"{name} ({where.rsplit(':', 1)[0]})"


async def run(args: argparse.Namespace, stack: DevStack, workdir: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    gateway = start_gateway(stack, port)
    try:
        await wait_ready(base)
        async with aiohttp.ClientSession() as session:
            await session.post(base + "/v1/topics",
                               json={"name": "bench", "partitions": PARTITIONS})
        print(f"# {len(VALUE)} B values, concurrency {args.concurrency}, {PARTITIONS} "
              f"partitions, 3 primaries x {args.replicas} replicas, AOF everysec; figures are "
              "noisy on a shared 2-core machine")
        for batch in args.batches:
            count = args.messages if batch > 1 else args.single_messages
            await bench_gateway(base, "bench", batch, max(batch, count // 10), args.concurrency,
                                args.acks)  # warm
            profiler = None
            if args.profile:
                fmt = "raw"
                out = workdir / f"batch{batch}.txt"
                profiler = start_profiler(gateway.pid, out, fmt)
                await asyncio.sleep(0.5)
            redis_before = redis_cpu_seconds(stack)
            cpu_before, own_before = process_cpu_seconds(gateway.pid), _load_generator_cpu()
            gw = await bench_gateway(base, "bench", batch, count, args.concurrency, args.acks)
            gw_cpu, own_cpu = (process_cpu_seconds(gateway.pid) - cpu_before,
                               _load_generator_cpu() - own_before)
            redis_cpu = {role: redis_cpu_seconds(stack)[role] - redis_before[role]
                         for role in redis_before}
            if profiler is not None:
                stop_profiler(profiler)
            bare = await bench_bare(stack.redis_startup_nodes, "bench", batch, count,
                                    args.concurrency)
            raw_before = redis_cpu_seconds(stack)
            raw = await bench_raw(stack, "bench", batch, count, args.concurrency)
            raw_cpu = {role: redis_cpu_seconds(stack)[role] - raw_before[role]
                       for role in raw_before}
            for result in (gw, bare, raw):
                print(result.line())
            print(f"{'gateway CPU per message':<28} {1e6 * gw_cpu / gw.messages:>8.2f} us "
                  f"({100 * gw_cpu / gw.seconds:.0f}% of a core; load generator "
                  f"{100 * own_cpu / gw.seconds:.0f}%)")
            print(f"{'Redis CPU per message':<28} " + ", ".join(
                f"{role} {1e6 * cpu / gw.messages:.2f} us" for role, cpu in redis_cpu.items())
                + " (raw XADD: " + ", ".join(
                f"{role} {1e6 * cpu / raw.messages:.2f} us" for role, cpu in raw_cpu.items()) + ")")
            print(f"{'ratio gateway/bare redis-py':<28} {gw.rate / bare.rate:>11.2f}")
            print(f"{'ratio gateway/raw XADD':<28} {gw.rate / raw.rate:>11.2f}")
            if profiler is not None and out.exists():
                summarize(out, args.top)
            if args.flamegraph and profiler is not None and out.exists():
                args.flamegraph.mkdir(parents=True, exist_ok=True)
                shutil.copy(out, args.flamegraph / f"batch{batch}.collapsed.txt")
    finally:
        gateway.send_signal(15)
        gateway.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=30_000, help="messages per batched run")
    parser.add_argument("--single-messages", type=int, default=5_000,
                        help="messages for batch=1 runs")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1, 100])
    parser.add_argument("--acks", choices=["1", "all"], default="1")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="sample the gateway with py-spy")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--flamegraph", type=Path,
                        help="keep the collapsed stacks in this directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sg-prof-") as tmp, \
            DevStack(DevStackConfig(data_dir=Path(tmp), redis_replicas=args.replicas)) as stack:
        asyncio.run(run(args, stack, Path(tmp)))


if __name__ == "__main__":
    main()
