"""A pinned version that declares event types checks each converted value against the subschema
of its ``ce-type`` (the whole schema without one); a type the version lacks cannot be read."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.delivery.pinning import PinnedVersion
from gateway.schemas.errors import ConversionFailed
from gateway.schemas.migrate import ValueConverter
from partitioner.schemas import SchemaRecord
from storage.models import Delivery, StoredEntry, ValueFormat

INT, STR = {"type": "integer"}, {"type": "string"}
V1 = {"type": "object", "required": ["amount"], "properties": {"amount": INT}}
CREATED = {"type": "object", "required": ["total", "items"]}
PAID = {"type": "object", "required": ["paid_at"], "properties": {"paid_at": STR},
        "additionalProperties": False}
V2 = {"$defs": {"created": CREATED, "paid": PAID}, "type": "object", "required": ["total"],
      "properties": {"total": INT}}
TYPES = {"order.created": "/$defs/created", "order.paid": "/$defs/paid"}
RENAME = {"upgrade": [{"op": "rename", "from": "/amount", "to": "/total"}]}


class Versions:
    def __init__(self, event_types: dict[str, str]) -> None:
        self.records = {1: SchemaRecord("t", 1, 1, V1, "none", "f1", 0, "test"),
                        2: SchemaRecord("t", 1, 2, V2, "none", "f2", 0, "test", RENAME,
                                        event_types)}

    def get(self, topic: str, created_at_ms: int, version: int) -> SchemaRecord | None:
        return self.records.get(version)


def delivery(offset: int, value: Any, event_type: str | None) -> Delivery:
    headers = {"sg-schema-version": "1"}
    if event_type is not None:
        headers["ce-type"] = event_type
    return Delivery(StoredEntry(0, f"1-{offset}", orjson.dumps(value), ValueFormat.JSON, None,
                                headers, 7), 1)


def pinned(event_types: dict[str, str] = TYPES) -> PinnedVersion:
    return PinnedVersion(2, "t", 1, ValueConverter(Versions(event_types)))


def test_a_value_its_type_refuses_after_conversion_fails_alone_in_a_page_of_two_types() -> None:
    page = [delivery(0, {"amount": 1, "items": []}, "order.created"),
            delivery(1, {"amount": 2, "paid_at": "noon"}, "order.paid"),
            delivery(2, {"amount": 3, "items": [1]}, "order.created")]
    converted, failed = pinned().split(page)
    assert [(d.entry.offset, orjson.loads(d.entry.value), d.entry.headers) for d in converted] == [
        ("1-0", {"total": 1, "items": []}, {"sg-schema-version": "2", "ce-type": "order.created"}),
        ("1-2", {"total": 3, "items": [1]}, {"sg-schema-version": "2", "ce-type": "order.created"})]
    assert [d.entry.offset for d, _ in failed] == ["1-1"]
    assert failed[0][1].startswith("cannot convert to schema version 2: the converted value does "
                                   "not match the schema of type 'order.paid' in version 2")


def test_a_type_the_target_version_lacks_fails_with_that_reason() -> None:
    page = [delivery(0, {"amount": 1}, "order.refunded"),
            delivery(1, {"amount": 2, "items": []}, "order.created")]
    converted, failed = pinned().split(page)
    assert [d.entry.offset for d in converted] == ["1-1"]
    assert [(d.entry.offset, why) for d, why in failed] == [
        ("1-0", "cannot convert to schema version 2: version 2 has no schema for event type "
                "'order.refunded'")]
    with pytest.raises(ConversionFailed, match=r"no schema for event type 'order\.refunded'"):
        pinned().entry(page[0].entry)


def test_a_value_without_a_type_is_checked_against_the_whole_schema() -> None:
    # the first lacks the created type's items: only the whole schema accepts it
    converted, failed = pinned().split([delivery(0, {"amount": 1}, None),
                                        delivery(1, {"amount": "one"}, None)])
    assert [orjson.loads(d.entry.value) for d in converted] == [{"total": 1}]
    assert [d.entry.offset for d, _ in failed] == ["1-1"]
    assert "does not match schema version 2 at /total" in failed[0][1]


def test_a_step_into_a_version_with_event_types_is_never_proven() -> None:
    def proven(event_types: dict[str, str]) -> bool:
        return ValueConverter(Versions(event_types)).step("t", 1, "1", 2).proven

    assert proven({})
    assert not proven(TYPES)
