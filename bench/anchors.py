"""Side-by-side anchors measured in the same run as the gateway: raw pipelined XADD and NATS
JetStream (nats-py)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis

from streamgate_devstack import RedisClusterProcess

VALUE = b"x" * 200


def key_on(cluster: RedisClusterProcess, port: int) -> str:
    """A stream key whose slot the primary listening on ``port`` serves."""
    for salt in range(100_000):
        key = f"anchor:{{a{salt}}}:log"
        if cluster.primary_for_key(key).address[1] == port:
            return key
    raise RuntimeError(f"no key for the primary on port {port}")


def raw_xadd_rate(cluster: RedisClusterProcess, per_primary: int, pipeline: int = 64,
                  clients: int = 16) -> float:
    """XADD msg/s of the whole cluster: redis-benchmark -P ``pipeline`` against every primary at
    once (AOF on), entries as the gateway writes a keyed JSON message (the value under ``K`` + one
    of 100 keys)."""
    binary = shutil.which("redis-benchmark")
    if binary is None:
        raise FileNotFoundError("redis-benchmark not found (Debian package redis-tools)")
    started = time.perf_counter()
    runs = [subprocess.Popen([binary, "-h", host, "-p", str(port), "-c", str(clients), "-n",
                              str(per_primary), "-P", str(pipeline), "-r", "100", "--csv", "XADD",
                              key_on(cluster, port), "*", "Kk__rand_int__", VALUE.decode()],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            for host, port in (node.address for node in cluster.primaries)]
    try:
        for run in runs:
            out, _ = run.communicate(timeout=300)
            if run.returncode != 0:
                raise RuntimeError(f"redis-benchmark failed: {out.decode()[-300:]}")
        return per_primary * len(runs) / (time.perf_counter() - started)
    finally:
        drop_and_wait_for_rewrites(cluster,
                                   [key_on(cluster, node.address[1]) for node in cluster.primaries])


def drop_and_wait_for_rewrites(cluster: RedisClusterProcess, keys: list[str],
                               longest_s: float = 120.0) -> None:
    """Unlink ``keys``, then wait until no node rewrites its AOF any more.

    What one measurement wrote must not weigh on the next: the raw anchor leaves ~250 MB per
    primary, a 10 s gateway run ~300 MB, and the AOF rewrites they trigger (a fork and a full
    rewrite on every primary and replica) would otherwise run into the next measurement's clock on a
    2-core machine.
    """
    for key in keys:
        host, port = cluster.primary_for_key(key).address
        with redis.Redis(host=host, port=port) as client:
            client.unlink(key)
    deadline = time.monotonic() + longest_s
    for node in cluster.nodes:
        host, port = node.address
        with redis.Redis(host=host, port=port) as client:
            while time.monotonic() < deadline:
                persistence = client.info("persistence")
                if (not persistence.get("aof_rewrite_in_progress")
                        and not persistence.get("aof_rewrite_scheduled")):
                    break
                time.sleep(0.2)


def compact_aofs(cluster: RedisClusterProcess) -> None:
    """BGREWRITEAOF on every node, then wait until none rewrites: a short measurement starts from
    compact AOFs.

    Redis rewrites an AOF by itself once it has doubled since the last rewrite (and passed 64 MB).
    Left to chance, that fork and rewrite of every node fell into a short drain in some runs (and
    those drains came out markedly slower): a fresh base puts the drain's ~15 MB per node far from
    it.
    """
    for node in cluster.nodes:
        host, port = node.address
        with redis.Redis(host=host, port=port) as client, contextlib.suppress(redis.ResponseError):
            client.bgrewriteaof()  # refused while one runs already: that one is waited for below
    drop_and_wait_for_rewrites(cluster, [])


def aof_rewrites(cluster: RedisClusterProcess) -> int:
    """AOF rewrites started so far, summed over every node of the cluster (INFO persistence)."""
    total = 0
    for node in cluster.nodes:
        host, port = node.address
        with redis.Redis(host=host, port=port) as client:
            total += int(client.info("persistence").get("aof_rewrites", 0))
    return total


async def _jetstream(url: str, stream: str, replicas: int = 1,  # type: ignore[no-untyped-def]
                     ready_s: float = 60.0, max_pending: int = 4000):
    """A connection (``url``: one server or a comma-separated cluster) and a fresh file-store
    stream. A new cluster answers "JetStream not available" until it has elected its meta leader:
    retried up to ``ready_s``."""
    import nats
    from nats.js.api import StorageType
    from nats.js.errors import Error as JetStreamError

    connection = await nats.connect(servers=url.split(","))
    js = connection.jetstream(publish_async_max_pending=max_pending)
    deadline = time.monotonic() + ready_s
    while True:
        try:
            await js.add_stream(name=stream, subjects=[f"{stream}.>"], storage=StorageType.FILE,
                                num_replicas=replicas)
            # a replicated stream answers "service unavailable" until its own leader is elected
            # and its replicas have caught up
            while not _led(await js.stream_info(stream)):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"stream {stream} has no leader and current replicas")
                await asyncio.sleep(0.2)
            return connection, js
        except (JetStreamError, nats.errors.TimeoutError, TimeoutError):
            if time.monotonic() > deadline:
                await connection.close()
                raise
            await asyncio.sleep(0.5)


def _led(info: Any) -> bool:
    """Whether a stream has its leader and every replica current (a lone server's always has)."""
    cluster = info.cluster
    return cluster is None or (bool(cluster.leader)
                               and all(peer.current for peer in cluster.replicas or ()))


async def nats_publish_async_rate(url: str, seconds: float, stream: str = "BENCHPUB",
                                  replicas: int = 1, max_pending: int = 4000) -> tuple[float, int]:
    """JetStream publish_async with acks (file store, ``replicas`` copies before each ack, at most
    ``max_pending`` unacknowledged): msg/s over ``seconds``; also returns the count."""
    connection, js = await _jetstream(url, stream, replicas, max_pending=max_pending)
    try:
        sent = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            for _ in range(1000):
                await js.publish_async(f"{stream}.k", VALUE)
            sent += 1000
        await js.publish_async_completed()
        return sent / (time.perf_counter() - started), sent
    finally:
        await js.delete_stream(stream)  # its file store must not weigh on what is measured next
        await connection.close()


async def nats_task_per_publish_rate(url: str, seconds: float, stream: str = "BENCHTASKS") -> float:
    """JetStream, a task per message (``await js.publish()``, which waits for its ack), then
    gathered, 1,000 at a time: msg/s."""
    connection, js = await _jetstream(url, stream)
    try:
        sent = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            await asyncio.gather(*(asyncio.create_task(js.publish(f"{stream}.k", VALUE))
                                   for _ in range(1000)))
            sent += 1000
        return sent / (time.perf_counter() - started)
    finally:
        await js.delete_stream(stream)
        await connection.close()


async def nats_one_at_a_time(url: str, seconds: float,
                             stream: str = "BENCHONE") -> tuple[float, list[float]]:
    """JetStream ``await js.publish()`` in a loop (each waits for its ack): msg/s, and each
    publish's latency (s)."""
    connection, js = await _jetstream(url, stream)
    try:
        await js.publish(f"{stream}.k", VALUE)
        latencies: list[float] = []
        started = time.perf_counter()
        while (sent_at := time.perf_counter()) - started < seconds:
            await js.publish(f"{stream}.k", VALUE)
            latencies.append(time.perf_counter() - sent_at)
        return len(latencies) / (time.perf_counter() - started), latencies
    finally:
        await js.delete_stream(stream)
        await connection.close()


async def nats_delivery_latencies(url: str, rate_per_s: int, seconds: float,
                                  stream: str = "BENCHLAT") -> list[float]:
    """JetStream ``await js.publish()`` of one message every ``1 / rate_per_s`` s to a push
    consumer in the same process: each message's publish -> delivery latency (s)."""
    connection, js = await _jetstream(url, stream)
    sent: dict[int, float] = {}
    latencies: list[float] = []

    async def received(message: Any) -> None:
        latencies.append(time.perf_counter() - sent[int(message.data)])

    try:
        subscription = await js.subscribe(f"{stream}.>", cb=received)
        await paced(rate_per_s, seconds, lambda n: js.publish(f"{stream}.k", b"%d" % n), sent)
        await wait_for_count(latencies, len(sent))
        await subscription.unsubscribe()
        return latencies
    finally:
        await js.delete_stream(stream)
        await connection.close()


async def paced(rate_per_s: int, seconds: float, publish: Callable[[int], Awaitable[Any]],
                sent: dict[int, float]) -> None:
    """``publish(n)`` for n = 0, 1, ... one every ``1 / rate_per_s`` s on the clock, noting when
    each was sent in ``sent``."""
    started = time.perf_counter()
    for n in range(int(rate_per_s * seconds)):
        sent[n] = time.perf_counter()
        await publish(n)
        await asyncio.sleep(max(0.0, started + (n + 1) / rate_per_s - time.perf_counter()))


async def wait_for_count(items: list[Any], count: int, timeout_s: float = 30) -> None:
    """Until ``items`` holds ``count`` (a consumer filling it meanwhile)."""
    deadline = time.monotonic() + timeout_s
    while len(items) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(items)} of {count} delivered within {timeout_s} s")
        await asyncio.sleep(0.01)


PUBLISH_PENDING_SWEEP = (1000, 4000)  # nats-py's unacknowledged publishes; 1,000 was its best
                                      # (250-16,000 tried)


async def nats_best_publish_async_rate(url: str, seconds: float,
                                       replicas: int = 1) -> tuple[float, str]:
    """JetStream at its best, as the gateway's rows are at theirs: the best publish_async rate over
    ``PUBLISH_PENDING_SWEEP``, and a note with every figure."""
    rates = [(pending,
              (await nats_publish_async_rate(url, seconds, replicas=replicas,
                                             max_pending=pending))[0])
             for pending in PUBLISH_PENDING_SWEEP]
    best = max(rate for _, rate in rates)
    figures = ", ".join(f"{pending:,} pending {rate:,.0f} msg/s" for pending, rate in rates)
    return best, f"JetStream the best of {figures}"


async def _pull_consumer(js: Any, stream: str, attempts: int = 20) -> Any:
    """The stream's durable pull consumer, asked again while a replicated one is still being
    placed ("service unavailable")."""
    from nats.js.errors import ServiceUnavailableError

    for attempt in range(attempts):
        try:
            return await js.pull_subscribe(f"{stream}.>", durable="bench")
        except ServiceUnavailableError:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(0.5)
    raise AssertionError("unreachable")


async def nats_pull_ack_rate(url: str, messages: int, stream: str = "BENCHPULL",
                             replicas: int = 1) -> float:
    """JetStream pull consumer: fetch batches of 500 and ack every message; msg/s for ``messages``
    prefilled (``replicas`` copies of the stream and of its consumer's state)."""
    import nats

    connection, js = await _jetstream(url, stream, replicas)
    try:
        for start in range(0, messages, 1000):
            for _ in range(min(1000, messages - start)):
                await js.publish_async(f"{stream}.k", VALUE)
        await js.publish_async_completed()
        subscription = await _pull_consumer(js, stream)
        acked = 0
        started = time.perf_counter()
        deadline = time.monotonic() + 120
        while acked < messages:
            try:
                batch = await subscription.fetch(batch=500, timeout=5)
            except nats.errors.TimeoutError:
                # a replicated consumer may be electing a leader on a loaded host: a slow fetch
                # is part of its rate, not a failure, until the deadline
                if time.monotonic() > deadline:
                    raise
                continue
            for message in batch:
                await message.ack()
                acked += 1
        await connection.flush()
        return acked / (time.perf_counter() - started)
    finally:
        await js.delete_stream(stream)
        await connection.close()


async def raw_group_ack_rate(cluster: RedisClusterProcess, keys: list[str], count: int = 500,
                             group: str = "raw-anchor") -> tuple[float, int]:
    """Raw XREADGROUP COUNT ``count`` + XACK of what came, one loop per stream over its primary
    (redis-py with hiredis), from a new group at the start of each stream until every stream is
    drained: (msg/s, messages acked). The group is destroyed afterwards."""
    from redis.asyncio import Redis

    clients = {}
    for key in keys:
        host, port = cluster.primary_for_key(key).address
        clients[key] = Redis(host=host, port=port)
    try:
        for key, client in clients.items():
            await client.xgroup_create(key, group, id="0")

        async def drain(key: str, client: Redis) -> int:
            acked = 0
            while True:
                reply: Any = await client.xreadgroup(group, "raw", {key: ">"}, count=count)
                entries = reply[0][1] if reply else []
                if not entries:
                    return acked
                acked += await client.xack(key, group, *(entry_id for entry_id, _ in entries))

        started = time.perf_counter()
        acked = sum(await asyncio.gather(*(drain(key, client) for key, client in clients.items())))
        return acked / (time.perf_counter() - started), acked
    finally:
        for key, client in clients.items():
            with contextlib.suppress(redis.RedisError):
                await client.xgroup_destroy(key, group)
            await client.aclose()


def run_async(coroutine):  # type: ignore[no-untyped-def]
    """asyncio.run for the synchronous harness."""
    return asyncio.run(coroutine)
