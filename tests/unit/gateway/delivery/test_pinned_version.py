"""A pinned schema version converts a page of deliveries: values already at it pass untouched,
others are converted with their header, and those that cannot be come back apart with why."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from gateway.delivery.pinning import PinnedVersion
from gateway.schemas.migrate import ValueConverter
from partitioner.schemas import SchemaRecord
from storage.models import Delivery, StoredEntry, ValueFormat

STR, INT = {"type": "string"}, {"type": "integer"}
V1 = {"type": "object", "required": ["qty"], "properties": {"qty": INT},
      "additionalProperties": False}
V2 = {"type": "object", "required": ["quantity"], "properties": {"quantity": INT, "note": STR},
      "additionalProperties": False}
RENAME = {"upgrade": [{"op": "rename", "from": "/qty", "to": "/quantity"}]}  # no downgrade


class Versions:
    records = {1: SchemaRecord("t", 1, 1, V1, "none", "f1", 0, "test"),
               2: SchemaRecord("t", 1, 2, V2, "none", "f2", 0, "test", RENAME)}

    def get(self, topic: str, created_at_ms: int, version: int) -> SchemaRecord | None:
        return self.records.get(version)


def delivery(offset: int, value: Any, version: str | None,
             value_format: ValueFormat = ValueFormat.JSON) -> Delivery:
    headers = {} if version is None else {"sg-schema-version": version}
    raw = value if isinstance(value, bytes) else orjson.dumps(value)
    return Delivery(StoredEntry(0, f"1-{offset}", raw, value_format, b"k", headers, 7), 2)


def pinned(version: int) -> PinnedVersion:
    return PinnedVersion(version, "t", 1, ValueConverter(Versions()))


def test_a_page_is_converted_and_what_cannot_be_comes_back_with_why() -> None:
    at_v2 = delivery(1, {"quantity": 2}, "2")
    page = [delivery(0, {"qty": 1}, "1"), at_v2, delivery(2, b"not json", "1"),
            delivery(3, {"quantity": 3}, None), delivery(4, {"qty": 4}, None)]
    converted, failed = pinned(2).split(page)
    assert converted[1] is at_v2  # already at the version: untouched
    assert [(orjson.loads(d.entry.value), d.entry.headers["sg-schema-version"], d.delivery_count)
            for d in converted] == [({"quantity": 1}, "2", 2), ({"quantity": 2}, "2", 2),
                                    ({"quantity": 3}, "2", 2)]
    assert converted[0].entry.key == b"k"
    assert converted[0].entry.timestamp_ms == 7
    assert [d.entry.offset for d, _ in failed] == ["1-2", "1-4"]
    assert failed[0][1] == "cannot convert to schema version 2: the value is not JSON"
    assert failed[1][1].startswith("cannot convert to schema version 2: a value written before "
                                   "the topic had a schema does not match schema version 2")


def test_a_version_without_the_way_back_fails_every_value_of_the_newer_one() -> None:
    converted, failed = pinned(1).split([delivery(0, {"quantity": 1}, "2"),
                                         delivery(1, {"qty": 2}, "1")])
    assert [d.entry.offset for d in converted] == ["1-1"]
    assert [(d.entry.offset, "declares no downgrade" in why)
            for d, why in failed] == [("1-0", True)]


def test_a_broadcast_frame_is_the_converted_message_or_an_error_naming_the_offset() -> None:
    pin = pinned(2)
    message = orjson.loads(pin.broadcast_frame("t", delivery(0, {"qty": 1}, "1").entry))
    assert (message["type"], message["value"], message["headers"]) == (
        "message", {"quantity": 1}, {"sg-schema-version": "2"})
    error = orjson.loads(pin.broadcast_frame("t", delivery(5, b"{", "1").entry))
    assert (error["type"], error["code"], error["partition"], error["offset"]) == (
        "error", "schema-conversion-failed", 0, "1-5")


def test_members_agree_on_a_version_whatever_converter_they_hold() -> None:
    assert pinned(2) == pinned(2)
    assert pinned(2) != pinned(1)


def test_a_converted_entry_keeps_every_field_and_header_but_its_value_and_version() -> None:
    traced = Delivery(StoredEntry(3, "1-0", b'{"qty": 1}', ValueFormat.JSON, b"k",
                                  {"sg-schema-version": "1", "trace": "t"}, 7), 1)
    unversioned = Delivery(StoredEntry(3, "1-1", b'{"quantity": 2}', ValueFormat.JSON, None,
                                       {"trace": "u"}, 8), 4)
    converted, failed = pinned(2).split([traced, unversioned])
    assert not failed
    assert [d.delivery_count for d in converted] == [1, 4]
    assert converted[0].entry == dataclasses.replace(
        traced.entry, value=converted[0].entry.value,
        headers={"sg-schema-version": "2", "trace": "t"})
    assert converted[1].entry == dataclasses.replace(
        unversioned.entry, headers={"sg-schema-version": "2", "trace": "u"})


class LooseVersions(Versions):
    """v1 takes a qty of any type: a value valid at v1 may miss v2 once renamed."""

    records = {**Versions.records,
               1: SchemaRecord("t", 1, 1, {**V1, "properties": {"qty": {}}}, "none", "f1l", 0,
                               "test")}


def test_a_value_that_misses_the_target_is_kept_back_alone_from_its_page() -> None:
    page = [delivery(0, {"qty": 1}, "1"), delivery(1, {"qty": "two"}, "1"),
            delivery(2, {"qty": 3}, "1")]
    converted, failed = PinnedVersion(2, "t", 1, ValueConverter(LooseVersions())).split(page)
    assert [orjson.loads(d.entry.value) for d in converted] == [{"quantity": 1},
                                                                {"quantity": 3}]
    assert [(d.entry.offset, "does not match schema version 2 at /quantity" in why)
            for d, why in failed] == [("1-1", True)]
