"""What conversion on delivery costs a consumer group: the same orders (written under v1) drained
by a group pinned to v2 and by an unpinned group, alternated over rounds (a fresh group each); and
the conversion alone per message, split into parse, migrate, check and encode.

    python bench/schema_pinned.py --messages 50000 --rounds 3   # alone: starts its own stack
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import timeit
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
from deliver import lean_group_drain_window
from schema_validation import BATCH, ORDER_SCHEMA, _spread, order, order_body, run_alone
from table import Row, at_least

from gateway.delivery.pinning import PinnedVersion
from gateway.publish.headers import SCHEMA_VERSION_HEADER
from gateway.schemas.engine import compile_schema
from gateway.schemas.migrate import ValueConverter, compile_operations
from partitioner.schemas import SchemaRecord
from storage.models import Delivery, StoredEntry, ValueFormat

TOPIC = "schema-pinned"
PARTITIONS = 6
PINNED_RATIO = 0.8
WAIT_S = 10.0
PUBLISHERS = 8
# v2 renames the order's note (both ways): every v1 value is parsed, migrated, checked, re-encoded
V2_SCHEMA: dict[str, Any] = {**ORDER_SCHEMA, "properties": {
    ("remark" if name == "note" else name): rule
    for name, rule in ORDER_SCHEMA["properties"].items()}}
V2_MIGRATIONS = {"upgrade": [{"op": "rename", "from": "/note", "to": "/remark"}],
                 "downgrade": [{"op": "rename", "from": "/remark", "to": "/note"}]}


async def prepare(base: str, messages: int) -> None:
    """The topic with v1, ``messages`` orders published under it, then v2 (live on this
    gateway once a pinned read is served)."""
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/v1/topics",
                             json={"name": TOPIC, "partitions": PARTITIONS}) as created:
            assert created.status == 201, await created.text()
        await _register(http, base, {"schema": ORDER_SCHEMA})
        await _until_ok(http, f"{base}/v1/topics/{TOPIC}/partitions/0/messages?schema_version=1")
        body = order_body()

        async def publisher(count: int) -> None:
            for _ in range(count):
                async with http.post(f"{base}/v1/topics/{TOPIC}/messages", data=body,
                                     headers={"Content-Type": "application/json"}) as answer:
                    assert answer.status == 200, await answer.text()

        batches = -(-messages // BATCH)
        await asyncio.gather(*(publisher(len(range(i, batches, PUBLISHERS)))
                               for i in range(PUBLISHERS)))
        await _register(http, base, {"schema": V2_SCHEMA, "compatibility": "none",
                                     "migrations": V2_MIGRATIONS})
        await _until_ok(http, f"{base}/v1/topics/{TOPIC}/partitions/0/messages?schema_version=2")


async def _register(http: aiohttp.ClientSession, base: str, body: dict[str, Any]) -> None:
    async with http.post(f"{base}/v1/topics/{TOPIC}/schemas", json=body) as registered:
        assert registered.status in (200, 201), await registered.text()


async def _until_ok(http: aiohttp.ClientSession, url: str) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        async with http.get(url) as answer:
            if answer.status == 200:
                return
        assert asyncio.get_running_loop().time() < deadline, f"{url} never answered 200"
        await asyncio.sleep(0.1)


async def drain_rate(base: str, group: str, messages: int, pinned: bool) -> float:
    """A fresh group's drain of the whole topic by the lean client (bench/group_drain.py), msg/s."""
    pin = ["--schema-version", "2"] if pinned else []
    acked, first, last = await lean_group_drain_window(base, TOPIC, group, messages, 1, 2, pin)
    assert acked >= messages, f"{group} acked {acked} of {messages}"
    return acked / max(last - first, 1e-9)


async def delivery_rows(base: str, messages: int, rounds: int) -> list[Row]:
    """Pinned against unpinned drains, alternated: the medians and the ratios' spread."""
    await prepare(base, messages)
    plain: list[float] = []
    pinned: list[float] = []
    for round_ in range(rounds):
        plain.append(await drain_rate(base, f"plain-{round_}", messages, False))
        pinned.append(await drain_rate(base, f"pinned-{round_}", messages, True))
    row = Row("s1", "group delivery pinned to another schema version / unpinned",
              statistics.median(pinned), "msg/s", statistics.median(plain),
              "the same orders to an unpinned group", f">= {PINNED_RATIO}x unpinned",
              note=_spread(pinned, plain))
    return [at_least(row, PINNED_RATIO, on_ratio=True)]


class _TwoVersions:
    def __init__(self) -> None:
        self.records = {
            1: SchemaRecord(TOPIC, 1, 1, ORDER_SCHEMA, "none", "f1", 0, "bench"),
            2: SchemaRecord(TOPIC, 1, 2, V2_SCHEMA, "none", "f2", 0, "bench", V2_MIGRATIONS)}

    def get(self, topic: str, created_at_ms: int, version: int) -> SchemaRecord | None:
        return self.records.get(version)


def _us_per_message(step: Callable[[], object], rounds: int) -> float:
    """Microseconds per message of ``step`` (one pass over BATCH values), best of five, median
    over rounds."""
    runs = 100
    return statistics.median(min(timeit.repeat(step, number=runs, repeat=5)) / runs / BATCH * 1e6
                             for _ in range(rounds))


def conversion_rows(rounds: int) -> list[Row]:
    """Conversion alone per message (``PinnedVersion.split`` over a page of v1 orders) and where
    its time goes."""
    values = [orjson.dumps(order(i)) for i in range(BATCH)]
    page = [Delivery(StoredEntry(0, f"1-{i}", value, ValueFormat.JSON, None,
                                 {SCHEMA_VERSION_HEADER: "1"}, 1), 1)
            for i, value in enumerate(values)]
    pin = PinnedVersion(2, TOPIC, 1, ValueConverter(_TwoVersions()))
    assert not pin.split(page)[1]
    upgrade = compile_operations(V2_MIGRATIONS["upgrade"])
    migrated = list(map(orjson.loads, values))
    for instance in migrated:
        upgrade(instance)
    v2 = compile_schema(V2_SCHEMA)
    steps = {
        "parse": lambda: list(map(orjson.loads, values)),
        "parse + migrate": lambda: [upgrade(instance)
                                    for instance in map(orjson.loads, values)],
        "check v2": lambda: v2.all_valid(migrated),
        "encode": lambda: list(map(orjson.dumps, migrated)),
    }
    split_us = _us_per_message(lambda: pin.split(page), rounds)
    parts = {name: _us_per_message(step, rounds) for name, step in steps.items()}
    note = ", ".join(f"{name} {us:.2f}" for name, us in parts.items())
    return [Row("s1", "conversion per message v1 -> v2 (PinnedVersion.split)", split_us, "us",
                None, "", "information", note=f"us per message: {note}")]


async def pinned_rows(base: str, messages: int, rounds: int) -> list[Row]:
    """Every row of this script against a running gateway."""
    return [*await delivery_rows(base, messages, rounds), *conversion_rows(rounds)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    return run_alone(lambda base: pinned_rows(base, args.messages, args.rounds))


if __name__ == "__main__":
    sys.exit(main())
