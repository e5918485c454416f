"""The archive tier's costs, in one run on a local stack (3 primaries x 1 replica, AOF everysec):

- Redis memory per million hot messages (the primaries' used_memory before and after);
- a move: entries per second and the mover's CPU per million (this process: XRANGE, Parquet
  encoding, the commit script), and bytes per message in the segments (zstd; 200-byte JSON values
  of which about half is random hex, as ids and notes are);
- replay through the gateway's API (pages of 1000) of the same entries from Redis and from the
  archive: two topics filled alike, one moved whole into the archive, replayed partition by
  partition in turn (a loaded machine slows both alike); the ratio archive/hot of messages per
  second, and the gateway's CPU per message replayed from each.

    .venv/bin/python bench/archive.py [--entries 300000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.services import GatewayProcess
from storage.archive.object_store import open_archive
from storage.archive.tier import ArchiveSettings
from storage.models import AppendOptions, Records, ValueFormat
from storage.redis_store import RedisStreamStore
from storage.settings import RedisStoreSettings
from streamgate_devstack import DevStack, DevStackConfig

PARTITIONS = 6


def value(n: int) -> bytes:
    """A 200-byte JSON order of its own: ids and amounts vary, as real events' do (identical values
    would compress to nothing)."""
    head = b'{"order":%d,"customer":"c-%05d","sku":"%s","qty":%d,"total":%d.%02d,"note":"' % (
        n, random.randrange(100_000), random.randbytes(6).hex().encode(), random.randrange(1, 9),
        random.randrange(10_000), random.randrange(100))
    return head + random.randbytes((198 - len(head)) // 2).hex().encode().ljust(
        198 - len(head), b"0") + b'"}'
BATCH = 1000
EPOCH = 1 << 40  # above any etcd revision: the bench's own moves are never fenced


async def fill(store: RedisStreamStore, topics: Sequence[str], entries: int) -> None:
    """The same entries into each of ``topics``."""
    for start in range(0, entries, BATCH):
        count = min(BATCH, entries - start)
        records = Records([(start + i) % PARTITIONS for i in range(count)],
                          [value(start + i) for i in range(count)],
                          [b"k%d" % (i % 100) for i in range(count)], ValueFormat.JSON)
        for topic in topics:
            await store.append(topic, records, AppendOptions())


def primaries_info(stack: DevStack, section: str, fields: Sequence[str]) -> float:
    """The sum of ``fields`` of an INFO ``section`` over the primaries."""
    total = 0.0
    for node in stack.redis.primaries:
        client = node.client()
        info = client.info(section)
        total += sum(float(info[name]) for name in fields)
        client.close()
    return total


def used_memory(stack: DevStack) -> int:
    return int(primaries_info(stack, "memory", ["used_memory"]))


def redis_cpu(stack: DevStack) -> float:
    return primaries_info(stack, "cpu", ["used_cpu_user", "used_cpu_sys"])


class Replayed(NamedTuple):
    """What replaying took: messages, wall seconds, the gateway's and the primaries' CPU
    seconds."""

    messages: int
    seconds: float
    cpu: float
    redis_cpu: float

    def plus(self, other: Replayed) -> Replayed:
        return Replayed(self.messages + other.messages, self.seconds + other.seconds,
                        self.cpu + other.cpu, self.redis_cpu + other.redis_cpu)

    def rate(self) -> str:
        return (f"{self.messages / self.seconds:,.0f}/s (CPU per message: gateway "
                f"{self.cpu / self.messages * 1e6:.1f} us, Redis "
                f"{self.redis_cpu / self.messages * 1e6:.1f} us)")


async def replay(session: aiohttp.ClientSession, stack: DevStack, gateway: GatewayProcess,
                 topic: str, partition: int) -> Replayed:
    """One partition read through the API from the first offset."""
    started, cpu, redis = time.perf_counter(), gateway.cpu_seconds(), redis_cpu(stack)
    count, cursor = 0, "earliest"
    while True:
        async with session.get(f"/v1/topics/{topic}/partitions/{partition}/messages",
                               params={"from": cursor, "limit": "1000"}) as response:
            page = await response.json()
        if not page["messages"]:
            break
        count += len(page["messages"])
        cursor = page["next_offset"]
    return Replayed(count, time.perf_counter() - started, gateway.cpu_seconds() - cpu,
                    redis_cpu(stack) - redis)


async def replay_in_turn(stack: DevStack, gateway: GatewayProcess, hot: str,
                         archived: str) -> tuple[Replayed, Replayed]:
    """Both topics replayed partition by partition, in turn (which goes first alternates)."""
    totals = {hot: Replayed(0, 0.0, 0.0, 0.0), archived: Replayed(0, 0.0, 0.0, 0.0)}
    async with aiohttp.ClientSession(gateway.base) as session:
        for partition in range(PARTITIONS):
            for topic in (hot, archived) if partition % 2 == 0 else (archived, hot):
                totals[topic] = totals[topic].plus(await replay(session, stack, gateway, topic,
                                                                partition))
    return totals[hot], totals[archived]


async def move_all(store: RedisStreamStore, topic: str) -> tuple[int, int, float, float]:
    """Every entry moved; (entries, segment bytes, wall seconds, CPU seconds of this process)."""
    assert store.archive is not None
    entries = size = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for partition in range(PARTITIONS):
        while info := await store.archive.move_oldest(topic, partition, epoch=EPOCH, until=None):
            entries, size = entries + info.count, size + info.bytes
    return entries, size, time.perf_counter() - wall, time.process_time() - cpu


async def create_topic(base: str, topic: str) -> None:
    async with aiohttp.ClientSession(base) as session:
        for _ in range(100):
            async with session.post("/v1/topics", json={"name": topic,
                                                       "partitions": PARTITIONS}) as response:
                if response.status in (201, 409):
                    return
            await asyncio.sleep(0.2)


async def wait_ready(base: str) -> None:
    async with aiohttp.ClientSession(base) as session:
        for _ in range(300):
            try:
                async with session.get("/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("gateway not ready")


async def run(stack: DevStack, gateway: GatewayProcess, archive_url: str,
              args: argparse.Namespace) -> None:
    settings = RedisStoreSettings(startup_nodes=list(stack.redis_startup_nodes))
    async with open_archive(archive_url) as archive, \
            RedisStreamStore(settings, archive=archive,
                             archive_settings=ArchiveSettings(segment_max_entries=100_000)) \
            as store:
        rounds = [await one_round(stack, gateway, store, round_, args.entries)
                  for round_ in range(args.rounds)]
    ratios = [c.messages / c.seconds / (h.messages / h.seconds) for h, c in rounds]
    gateway_cpu = [c.cpu / h.cpu for h, c in rounds]
    total_cpu = [(c.cpu + c.redis_cpu) / (h.cpu + h.redis_cpu) for h, c in rounds]
    print(f"replay archived/hot: median {statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f}) over {args.rounds} rounds; "
          f"CPU per message archived/hot: gateway {spread(gateway_cpu)}, gateway + Redis "
          f"{spread(total_cpu)}")


def spread(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


async def one_round(stack: DevStack, gateway: GatewayProcess, store: RedisStreamStore,
                    round_: int, entries: int) -> tuple[Replayed, Replayed]:
    hot, archived = f"bench-archive-{round_}-hot", f"bench-archive-{round_}"
    for topic in (hot, archived):
        await create_topic(gateway.base, topic)
    before = used_memory(stack)
    await fill(store, [hot, archived], entries)
    per_million = (used_memory(stack) - before) / (2 * entries) * 1e6
    moved, size, wall, cpu = await move_all(store, archived)
    from_hot, from_archive = await replay_in_turn(stack, gateway, hot, archived)
    print(f"round {round_ + 1}: hot {per_million / 2**20:7.1f} MiB per million in the "
          f"primaries; moved {moved} in {wall:.2f} s ({moved / wall:,.0f}/s, "
          f"{cpu / moved * 1e6:.2f} CPU s per million); {size / moved:.1f} B per message "
          f"on disk; replay hot {from_hot.rate()}, archived {from_archive.rate()}")
    return from_hot, from_archive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sg-bench-") as tmp:
        archive_url = f"file://{tmp}/archive"
        with DevStack(DevStackConfig(data_dir=Path(tmp) / "stack")) as stack, \
                GatewayProcess(stack, extra_env={"STREAMGATE_ARCHIVE_URL": archive_url,
                                                 "STREAMGATE_HOT_RETENTION_MS": "0"}) as gateway:
            asyncio.run(wait_ready(gateway.base))
            asyncio.run(run(stack, gateway, archive_url, args))


if __name__ == "__main__":
    main()
