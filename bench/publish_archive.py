"""Publishing with the archive on against the same publish with it off, alternated over rounds on
one local stack (3 primaries x 1 replica, AOF everysec, each node capped by ``--maxmemory-mib``).

Each round runs wrk (batch 100 of ~200-byte JSON orders, acks=1) for ``--seconds`` into a fresh
topic, first through a gateway without an archive, then through one archiving into a temp dir once
a node passes ``--watermark`` of its maxmemory (and, with ``--hot-retention-ms``, entries older than
that); the gateways' settings differ in nothing else. The archive-off round runs with the cap
lifted (``--off-maxmemory-mib``), as what it writes would not fit; the archive-on round writes more
than the whole cluster's cap. Sampled every second: each primary's used_memory and the gateway's hot
age gauge. Per round: msg/s, p99, 507s, the fullest primary against the cap, the hot age, what is
left in Redis at the end, CPU per message by process (``--detail``: the fill each second and the
primaries' costliest commands).

    .venv/bin/python bench/publish_archive.py [--rounds 3] [--seconds 40] [--maxmemory-mib 256]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aredis
from anchors import compact_aofs
from compression_rows import realistic_body
from prometheus_client.parser import text_string_to_metric_families
from publish import http_publish_for, wait_ready
from run import CpuReading, cpu_per_message, cpu_reading, settle
from services import GatewayProcess

from streamgate_devstack import DevStack, DevStackConfig
from streamgate_devstack.redis_cluster import RedisClusterProcess

MIB = 1 << 20
PARTITIONS = 6
BATCH = 100
# both gateways: the hot age gauge every second, so its maximum over a round is seen
COMMON_ENV = {"STREAMGATE_LAG_INTERVAL_S": "1"}


@dataclass
class Samples:
    """What one round saw every second: the fullest primary's used_memory, the topic's oldest hot
    entry's age (max over partitions; NaN until the gauge is exported)."""

    fullest: list[int] = field(default_factory=list)
    hot_age_s: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class RoundResult:
    """One mode's measurement in one round."""

    mode: str
    messages: int
    rate: float
    p99_ms: float  # request latency
    refused: int  # requests answered 507 (or any non-2xx), their messages not counted
    samples: Samples
    hot_entries: int  # entries still in Redis at the end: with the archive, not yet moved
    archived: int
    gateway_us: float  # the gateway's CPU per message published
    cpu: str
    commands_us: dict[str, float]  # the primaries' costliest commands, us per message published

    def line(self, cap: int, budget: int) -> str:
        fullest = self.samples.fullest
        tail = fullest[len(fullest) // 2:]
        ages = [age for age in self.samples.hot_age_s if not math.isnan(age)]
        return (f"  {self.mode:<3} {self.rate:>9,.0f} msg/s  p99 {self.p99_ms:.0f} ms  507s "
                f"{self.refused}  fullest primary: "
                f"peak {max(fullest) / cap:.2f} of cap, last {fullest[-1] / cap:.2f}, second half "
                f"{min(tail) / cap:.2f}-{max(tail) / cap:.2f}, {sum(u > budget for u in fullest)} "
                f"of {len(fullest)} samples over the budget  hot age max "
                f"{max(ages, default=math.nan):.1f} s  hot at end {self.hot_entries:,}, archived "
                f"{self.archived:,}\n      {self.cpu}")


def archive_cpu_us(off: RoundResult, on: RoundResult) -> float:
    """The gateway's CPU per archived message: what the archive-on round spent per message above
    the archive-off round, over the share of its messages that moved."""
    return (on.gateway_us - off.gateway_us) * on.messages / max(on.archived, 1)


async def set_maxmemory(cluster: RedisClusterProcess, cap: int) -> None:
    """CONFIG SET maxmemory on every node (primaries and replicas)."""
    for node in cluster.nodes:
        host, port = node.address
        async with aredis.Redis(host=host, port=port) as client:
            await client.config_set("maxmemory", cap)


async def primaries_info(cluster: RedisClusterProcess, section: str) -> list[dict[str, Any]]:
    """INFO ``section`` of every primary."""
    infos = []
    for node in cluster.primaries:
        host, port = node.address
        async with aredis.Redis(host=host, port=port) as client:
            infos.append(await client.info(section))
    return infos


async def fullest_primary(cluster: RedisClusterProcess) -> int:
    """The highest used_memory among the primaries now."""
    return max(int(info["used_memory"]) for info in await primaries_info(cluster, "memory"))


async def command_usec(cluster: RedisClusterProcess) -> Counter[str]:
    """Microseconds each command has taken so far, summed over the primaries (INFO
    commandstats; scripts count as EVALSHA, what they call as their own commands too)."""
    spent: Counter[str] = Counter()
    for info in await primaries_info(cluster, "commandstats"):
        spent.update({name.removeprefix("cmdstat_"): int(stats["usec"])
                      for name, stats in info.items()})
    return spent


async def scrape(session: aiohttp.ClientSession, base: str, topic: str) -> dict[str, list[float]]:
    """The gateway's /metrics samples labelled with ``topic``, by sample name."""
    async with session.get(base + "/metrics") as response:
        text = await response.text()
    found: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("topic") == topic:
                found.setdefault(sample.name, []).append(sample.value)
    return found


async def sample_every_second(cluster: RedisClusterProcess, base: str, topic: str,
                              samples: Samples) -> None:
    """Append a sample every second until cancelled."""
    async with aiohttp.ClientSession() as session:
        while True:
            samples.fullest.append(await fullest_primary(cluster))
            ages = (await scrape(session, base, topic)).get("streamgate_archive_hot_age_seconds")
            samples.hot_age_s.append(max(ages) if ages else math.nan)
            await asyncio.sleep(1.0)


async def topic_ready(base: str, topic: str) -> None:
    """Create ``topic`` and wait until the gateway owns every partition (its duties run)."""
    async with aiohttp.ClientSession() as session:
        async with session.post(base + "/v1/topics",
                                json={"name": topic, "partitions": PARTITIONS}) as response:
            if response.status != 201:
                raise RuntimeError(f"create {topic}: {response.status} {await response.text()}")
        for _ in range(600):
            owned = (await scrape(session, base, topic)).get("streamgate_topic_owned_partitions")
            if owned and owned[0] == PARTITIONS:
                return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{topic}: the gateway does not own every partition")


async def hot_and_archived(base: str, topic: str) -> tuple[int, int]:
    """Entries in Redis and entries archived so far, per the owner's gauges and counters."""
    async with aiohttp.ClientSession() as session:
        for _ in range(30):  # the length gauge follows the lag exporter's second
            await asyncio.sleep(1.0)
            found = await scrape(session, base, topic)
            lengths = found.get("streamgate_partition_length_entries", [])
            if len(lengths) == PARTITIONS:
                break
    return int(sum(lengths)), int(sum(found.get("streamgate_archive_entries_total", [0.0])))


async def delete_topic(base: str, topic: str) -> None:
    async with aiohttp.ClientSession() as session, \
            session.delete(f"{base}/v1/topics/{topic}") as response:
        if response.status != 204:
            raise RuntimeError(f"delete {topic}: {response.status} {await response.text()}")


@contextlib.asynccontextmanager
async def sampling(cluster: RedisClusterProcess, base: str, topic: str) -> AsyncIterator[Samples]:
    samples = Samples()
    task = asyncio.ensure_future(sample_every_second(cluster, base, topic, samples))
    try:
        yield samples
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def measure(stack: DevStack, gateway: GatewayProcess, mode: str, topic: str,
                  seconds: float, connections: int) -> RoundResult:
    """wrk into a fresh ``topic`` for ``seconds``, sampled; the topic deleted afterwards."""
    await wait_ready(gateway.base)
    await topic_ready(gateway.base, topic)
    before: CpuReading = cpu_reading(gateway, stack.redis)
    commands = await command_usec(stack.redis)
    async with sampling(stack.redis, gateway.base, topic) as samples:
        result = await http_publish_for(gateway.base, topic, realistic_body(BATCH), BATCH, seconds,
                                        connections, refused_ok=True)
    after = cpu_reading(gateway, stack.redis)
    commands = await command_usec(stack.redis) - commands
    gateway_us = (after.seconds["gateway"] - before.seconds["gateway"]) / result.messages * 1e6
    hot, archived = await hot_and_archived(gateway.base, topic)
    await delete_topic(gateway.base, topic)
    return RoundResult(mode, result.messages, result.rate, result.percentile_ms(0.99),
                       result.refused_requests, samples, hot, archived, gateway_us,
                       cpu_per_message(before, after, result.messages),
                       {name: usec / result.messages for name, usec in commands.most_common(6)})


def gateway_env(mode: str, args: argparse.Namespace, archive_dir: Path) -> dict[str, str]:
    """The one difference between the modes: the archive URL."""
    url = f"file://{archive_dir}" if mode == "on" else "none"
    segments = ({"STREAMGATE_ARCHIVE_SEGMENT_MAX_ENTRIES": str(args.segment_max_entries)}
                if args.segment_max_entries else {})
    return {**COMMON_ENV, **segments, "STREAMGATE_ARCHIVE_URL": url,
            "STREAMGATE_HOT_RETENTION_MS": str(args.hot_retention_ms),
            "STREAMGATE_ARCHIVE_MEMORY_WATERMARK": str(args.watermark)}


async def one_mode(stack: DevStack, mode: str, round_: int, args: argparse.Namespace,
                   archive_dir: Path) -> RoundResult:
    """A gateway of ``mode`` on the stack for one measurement; the cluster quiet afterwards."""
    cap = args.maxmemory_mib if mode == "on" else args.off_maxmemory_mib
    await set_maxmemory(stack.redis, cap * MIB)
    with GatewayProcess(stack, extra_env=gateway_env(mode, args, archive_dir)) as gateway:
        result = await measure(stack, gateway, mode, f"pa-{mode}-{round_}", args.seconds,
                               args.connections)
    # the next measurement starts from compact AOFs, none rewriting what this one wrote
    await asyncio.to_thread(compact_aofs, stack.redis)
    await settle()
    return result


def report(round_: int, off: RoundResult, on: RoundResult, args: argparse.Namespace) -> None:
    cap = args.maxmemory_mib * MIB
    budget = int(cap * args.watermark)
    print(f"round {round_}: on/off {on.rate / off.rate:.2f}, gateway CPU per archived message "
          f"{archive_cpu_us(off, on):.1f} us\n{off.line(cap, budget)}\n{on.line(cap, budget)}",
          flush=True)
    if args.detail:
        for result in (off, on):
            print(f"    {result.mode} fill: "
                  + " ".join(f"{used / cap:.2f}" for used in result.samples.fullest)
                  + "\n    commands (us per message): "
                  + ", ".join(f"{name} {us:.2f}" for name, us in result.commands_us.items()))


async def run(stack: DevStack, args: argparse.Namespace, archive_dir: Path) -> None:
    print(f"# {args.seconds:.0f} s per mode, wrk batch {BATCH} from {args.connections} "
          f"connections, acks=1, {PARTITIONS} partitions; cap {args.maxmemory_mib} MiB per node "
          f"(archive at {args.watermark:.2f} of it, refusals at 0.90; hot retention "
          f"{args.hot_retention_ms} ms), archive off with {args.off_maxmemory_mib} MiB")
    ratios = []
    for round_ in range(1, args.rounds + 1):
        off = await one_mode(stack, "off", round_, args, archive_dir)
        on = await one_mode(stack, "on", round_, args, archive_dir)
        ratios.append(on.rate / off.rate)
        report(round_, off, on, args)
    print("on/off by round: " + " ".join(f"{ratio:.2f}" for ratio in ratios)
          + f"; median {statistics.median(ratios):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--maxmemory-mib", type=int, default=256)
    parser.add_argument("--off-maxmemory-mib", type=int, default=4096)
    parser.add_argument("--watermark", type=float, default=0.5)
    parser.add_argument("--hot-retention-ms", type=int, default=0,
                        help="also move entries older than this (0: by memory only)")
    parser.add_argument("--segment-max-entries", type=int, default=0,
                        help="entries per segment at most (0: the gateway's default)")
    parser.add_argument("--detail", action="store_true",
                        help="also print each round's per-second fill of the fullest primary and "
                             "the primaries' costliest commands")
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sg-bench-") as tmp, \
            DevStack(DevStackConfig(data_dir=Path(tmp) / "stack",
                                    redis_maxmemory_bytes=args.maxmemory_mib * MIB)) as stack:
        asyncio.run(run(stack, args, Path(tmp) / "archive"))
    print(f"# {time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
