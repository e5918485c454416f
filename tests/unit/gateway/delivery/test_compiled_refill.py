"""The compiled refill of a pinned page makes the same deliveries as the Python reference, and
declines (the page untouched) whatever it is not written for."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import gateway._speedups
from gateway.delivery import pinning
from gateway.delivery.pinning import PinnedVersion
from gateway.schemas.errors import ConversionFailed
from gateway.schemas.migrate import ValueConverter
from partitioner.schemas import SchemaRecord
from storage.models import Delivery, StoredEntry, ValueFormat

frames = pytest.importorskip("gateway._speedups._frames")

V1 = {"type": "object", "properties": {"qty": {"type": "integer"}}}
V2 = {"type": "object", "properties": {"quantity": {"type": "integer"}}}
RENAME = {"upgrade": [{"op": "rename", "from": "/qty", "to": "/quantity"}]}


class Versions:
    records = {1: SchemaRecord("t", 1, 1, V1, "none", "f1", 0, "test"),
               2: SchemaRecord("t", 1, 2, V2, "none", "f2", 0, "test", RENAME)}

    def get(self, topic: str, created_at_ms: int, version: int) -> SchemaRecord | None:
        return self.records.get(version)


def delivery(offset: int, headers: dict[str, str], key: bytes | None, count: int) -> Delivery:
    entry = StoredEntry(offset % 3, f"1-{offset}", orjson.dumps({"qty": offset}),
                        ValueFormat.JSON, key, headers, 1000 + offset)
    return Delivery(entry, count)


def page() -> list[Delivery]:
    return [delivery(0, {"sg-schema-version": "1"}, None, 1),
            delivery(1, {"sg-schema-version": "1", "ce-type": "a"}, b"k", 2),
            delivery(2, {}, b"", 3),
            delivery(3, {"sg-schema-version": "2"}, None, 1),
            delivery(4, {"sg-schema-version": "1", "trace": "x"}, b"\xff", 5)]


def split(monkeypatch: pytest.MonkeyPatch, compiled: bool) -> list[Delivery]:
    if not compiled:
        monkeypatch.setattr(pinning, "refilled_or_declined", lambda *_: False)
    converted, failed = PinnedVersion(2, "t", 1, ValueConverter(Versions())).split(page())
    assert not failed
    return converted


def fields(each: Delivery) -> tuple[Any, ...]:
    entry = each.entry
    return (type(each), type(entry), entry.partition, entry.offset, entry.value,
            entry.value_format, entry.key, dict(entry.headers), entry.timestamp_ms,
            each.delivery_count)


def test_the_compiled_refill_makes_the_deliveries_the_reference_makes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    if gateway._speedups.refilled_or_declined is not frames.refill:
        pytest.skip("the compiled parts are switched off")
    compiled = split(monkeypatch, True)
    reference = split(monkeypatch, False)
    assert compiled == reference
    assert list(map(fields, compiled)) == list(map(fields, reference))
    assert orjson.loads(compiled[4].entry.value) == {"quantity": 4}
    assert compiled[4].entry.headers == {"sg-schema-version": "2", "trace": "x"}


def test_a_page_with_a_failed_conversion_is_declined_and_left_as_it_was() -> None:
    deliveries = page()[:2]
    before = list(deliveries)
    layout = pinning._REFILL_LAYOUT
    refilled = frames.refill(deliveries, [0, 1], [b"{}", ConversionFailed("no")],
                             {"sg-schema-version": "2"}, 1, layout)
    assert refilled is False
    assert all(now is then for now, then in zip(deliveries, before, strict=True))
    assert frames.refill(deliveries, [0, 1], [b"{}"], {}, 1, layout) is False
    assert frames.refill(deliveries, [0, 1], [b"{}", b"[]"], {}, 1, layout) is True
    assert [d.entry.value for d in deliveries] == [b"{}", b"[]"]
