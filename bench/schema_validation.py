"""What validation at the door costs publish, in the same run: batch 100 of realistic orders to a
topic with a schema against a topic without one, alternated over rounds; and validation alone per
message, jsonschema-rs (the gateway's engine) against fastjsonschema.

    python bench/schema_validation.py --seconds 3 --rounds 3   # alone: starts its own stack
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import timeit
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import fastjsonschema
import orjson
from publish import http_publish_for, wait_ready
from services import GatewayProcess
from table import Row, at_least, render_text

from gateway.publish.validation import PublishBatch
from gateway.schemas.engine import DRAFT_2020_12, compile_schema
from gateway.schemas.validation import SchemaGate
from partitioner.schemas import SchemaRecord
from partitioner.topics import TopicMetadata
from streamgate_devstack import DevStack, DevStackConfig

PARTITIONS = 6
WORKERS = 32
BATCH = 100
COST_RATIO = 0.85
PLAIN_TOPIC, SCHEMA_TOPIC = "schema-off", "schema-on"
WAIT_S = 10.0
# ten fields: formats (email, date-time), enums, a pattern, bounds and a nested object
ORDER_SCHEMA: dict[str, Any] = {
    "$schema": DRAFT_2020_12, "type": "object", "additionalProperties": False,
    "required": ["order_id", "email", "created_at", "currency", "status", "total", "quantity",
                 "address"],
    "properties": {
        "order_id": {"type": "string", "pattern": "^ord-[0-9]{6}$"},
        "email": {"type": "string", "format": "email"},
        "created_at": {"type": "string", "format": "date-time"},
        "currency": {"enum": ["EUR", "USD", "GBP"]},
        "status": {"enum": ["new", "paid", "shipped", "cancelled"]},
        "channel": {"enum": ["web", "app", "store"]},
        "total": {"type": "number", "minimum": 0},
        "quantity": {"type": "integer", "minimum": 1, "maximum": 99},
        "note": {"type": "string", "maxLength": 200},
        "address": {"type": "object", "additionalProperties": False,
                    "required": ["street", "city", "country"],
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                                   "postcode": {"type": "string", "maxLength": 10},
                                   "country": {"type": "string", "pattern": "^[A-Z]{2}$"}}},
    },
}
CITIES = ("Lyon", "Porto", "Leeds", "Graz", "Turku", "Gent")


def order(index: int) -> dict[str, Any]:
    """A ~300-byte order matching ORDER_SCHEMA that differs per message."""
    rng = random.Random(index)
    return {"order_id": f"ord-{index % 1_000_000:06d}",
            "email": f"cust{rng.randrange(10_000)}@example.com",
            "created_at": f"2026-12-{rng.randrange(1, 29):02d}T{rng.randrange(24):02d}:"
                          f"{rng.randrange(60):02d}:{rng.randrange(60):02d}Z",
            "currency": rng.choice(("EUR", "USD", "GBP")),
            "status": rng.choice(("new", "paid", "shipped", "cancelled")),
            "channel": rng.choice(("web", "app", "store")),
            "total": round(rng.uniform(1, 5000), 2), "quantity": rng.randrange(1, 99),
            "note": "leave at the back door, ring twice",
            "address": {"street": f"{rng.randrange(1, 200)} Harbour Road",
                        "city": rng.choice(CITIES), "postcode": f"{rng.randrange(99999):05d}",
                        "country": rng.choice(("FR", "PT", "GB", "AT", "FI", "BE"))}}


def order_body() -> bytes:
    """A publish body of BATCH distinct orders, acks=1."""
    return orjson.dumps({"acks": "1", "messages": [{"key": f"k{i}", "value": order(i)}
                                                   for i in range(BATCH)]})


class _NoRemoteRefs(Mapping[str, Callable[[str], Any]]):
    """fastjsonschema's handlers for every URI scheme: each refuses (its default fetches)."""

    def __getitem__(self, scheme: str) -> Callable[[str], Any]:
        def refuse(uri: str) -> Any:
            raise fastjsonschema.JsonSchemaDefinitionException(f"remote $ref {uri!r} refused")
        return refuse

    def __contains__(self, scheme: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _fast_validator() -> Callable[[Any], bool]:
    # fastjsonschema knows drafts 4-7: the same keywords mean the same there
    draft07 = {k: v for k, v in ORDER_SCHEMA.items() if k != "$schema"}
    validate = fastjsonschema.compile(draft07, handlers=_NoRemoteRefs())

    def is_valid(instance: Any) -> bool:
        try:
            validate(instance)
        except fastjsonschema.JsonSchemaValueException:
            return False
        return True
    return is_valid


class _OneSchema:
    def __init__(self) -> None:
        self.record = SchemaRecord(SCHEMA_TOPIC, 1, 1, ORDER_SCHEMA, "backward", "f", 0, "bench")

    def latest(self, topic: str, created_at_ms: int) -> SchemaRecord | None:
        return self.record


def _us_per_message(check: Callable[[], object], rounds: int) -> list[float]:
    """Microseconds per message of ``check`` (one pass over BATCH values): the best of five
    repeats, per round."""
    runs = 200
    return [min(timeit.repeat(check, number=runs, repeat=5)) / runs / BATCH * 1e6
            for _ in range(rounds)]


def validation_micro_rows(rounds: int) -> list[Row]:
    """Validation alone (parse + check), per message, for both engines and the gateway's gate."""
    values = [orjson.dumps(order(i)) for i in range(BATCH)]
    rust, fast = compile_schema(ORDER_SCHEMA), _fast_validator()
    assert all(rust.is_valid(orjson.loads(v)) and fast(orjson.loads(v)) for v in values)
    gate = SchemaGate(_OneSchema())
    topic = TopicMetadata(SCHEMA_TOPIC, PARTITIONS, 60_000, None, 1, "bench")

    def through_gate() -> None:
        gate.check(topic, PublishBatch("1", [None] * BATCH, list(values), 0))

    def with_engine(is_valid: Callable[[Any], bool]) -> Callable[[], None]:
        def check() -> None:
            loads = orjson.loads
            for value in values:
                is_valid(loads(value))
        return check

    rust_us = _us_per_message(with_engine(rust.is_valid), rounds)
    fast_us = _us_per_message(with_engine(fast), rounds)
    gate_us = _us_per_message(through_gate, rounds)
    return [
        Row("s1", "validation per message, jsonschema-rs (parse + check)",
            statistics.median(rust_us), "us", statistics.median(fast_us),
            "fastjsonschema, parse + check", "information", note=_spread(rust_us, fast_us)),
        Row("s1", "validation per message, the gateway's SchemaGate (parse + check + header)",
            statistics.median(gate_us), "us", statistics.median(rust_us),
            "jsonschema-rs alone", "information", note=_spread(gate_us, rust_us)),
    ]


def _spread(values: list[float], anchors: list[float]) -> str:
    ratios = [v / a for v, a in zip(values, anchors, strict=True)]
    return (f"{len(values)} rounds: {min(values):.2f}-{max(values):.2f} against "
            f"{min(anchors):.2f}-{max(anchors):.2f}; ratio {min(ratios):.2f}-{max(ratios):.2f}")


async def prepare(base: str) -> None:
    """The two topics; the schema on one, live once this gateway refuses a bad order."""
    async with aiohttp.ClientSession() as http:
        for name in (PLAIN_TOPIC, SCHEMA_TOPIC):
            async with http.post(f"{base}/v1/topics",
                                 json={"name": name, "partitions": PARTITIONS}) as created:
                assert created.status == 201, await created.text()
        async with http.post(f"{base}/v1/topics/{SCHEMA_TOPIC}/schemas",
                             json={"schema": ORDER_SCHEMA}) as registered:
            assert registered.status in (200, 201), await registered.text()
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while True:
            bad = {"messages": [{"value": {**order(0), "currency": "XXX"}}]}
            async with http.post(f"{base}/v1/topics/{SCHEMA_TOPIC}/messages", json=bad) as answer:
                if answer.status == 422:
                    return
            assert asyncio.get_running_loop().time() < deadline, "the schema never took effect"
            await asyncio.sleep(0.1)


async def publish_rows(base: str, seconds: float, rounds: int) -> list[Row]:
    """Batch 100 with the schema against without, alternated: the medians and the ratios' spread."""
    await prepare(base)
    body = order_body()
    plain: list[float] = []
    checked: list[float] = []
    for _ in range(rounds):
        for topic, rates in ((PLAIN_TOPIC, plain), (SCHEMA_TOPIC, checked)):
            run = await http_publish_for(base, topic, body, BATCH, seconds, WORKERS)
            rates.append(run.rate)
    row = Row("s1", "publish with a schema / without, batch 100, acks=1",
              statistics.median(checked), "msg/s", statistics.median(plain),
              "the same orders to a topic without a schema", f">= {COST_RATIO}x without",
              note=_spread(checked, plain))
    return [at_least(row, COST_RATIO, on_ratio=True)]


async def schema_rows(base: str, seconds: float, rounds: int) -> list[Row]:
    """Every row of this script against a running gateway."""
    return [*await publish_rows(base, seconds, rounds), *validation_micro_rows(rounds)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    return run_alone(lambda base: schema_rows(base, args.seconds, args.rounds))


def run_alone(rows_of: Callable[[str], Awaitable[list[Row]]]) -> int:
    """Print the rows ``rows_of`` takes against a gateway of a stack of its own, and their
    notes."""
    async def run(stack: DevStack) -> list[Row]:
        with GatewayProcess(stack) as gateway:
            await wait_ready(gateway.base)
            return await rows_of(gateway.base)

    with tempfile.TemporaryDirectory(prefix="sg-bench-") as tmp, \
            DevStack(DevStackConfig(data_dir=Path(tmp))) as stack:
        rows = asyncio.run(run(stack))
    print(f"{os.cpu_count()} cores")
    print(render_text(rows))
    for row in rows:
        print(f"{row.figure}: {row.note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
