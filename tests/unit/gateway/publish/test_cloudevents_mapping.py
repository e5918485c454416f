"""The CloudEvents mapping both ways: events to stored columns (attributes as ``ce-*`` headers,
data as the value, partitionkey as the key, source/id as the idempotency key) and stored messages
back to events."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from multidict import CIMultiDict

from gateway.cloudevents import event_document, rfc3339
from gateway.errors import Problem
from gateway.publish.cloudevents import Mode, event_pointer, mode_of, parse_events
from gateway.publish.validation import PublishLimits
from storage.models import StoredEntry, ValueFormat

LIMITS = PublishLimits(max_value_bytes=1024, max_key_bytes=16, max_headers=16,
                       max_header_bytes=1024, max_batch_messages=3, max_batch_bytes=1 << 16)
EVENT = {"specversion": "1.0", "id": "1", "source": "/s", "type": "t"}
NO_HEADERS: CIMultiDict[str] = CIMultiDict()


def structured(doc: Any) -> Any:
    return parse_events(Mode.STRUCTURED, orjson.dumps(doc), NO_HEADERS, LIMITS)


def refusal(mode: Mode, body: bytes, headers: CIMultiDict[str] = NO_HEADERS) -> Problem:
    with pytest.raises(Problem) as refused:
        parse_events(mode, body, headers, LIMITS)
    return refused.value


def test_each_attribute_becomes_a_header_in_its_string_form() -> None:
    batch = structured({**EVENT, "count": 7, "flag": False, "partitionkey": "k", "data": [1]})
    assert batch.headers == [{"ce-specversion": "1.0", "ce-id": "1", "ce-source": "/s",
                              "ce-type": "t", "ce-count": "7", "ce-flag": "false"}]
    assert batch.keys == [b"k"]
    assert batch.values == [b"[1]"]
    assert batch.idempotency_keys == ["/s/1"]


def test_data_base64_is_stored_as_bytes() -> None:
    batch = structured({**EVENT, "data_base64": "AAE="})
    assert batch.values == [b"\x00\x01"]
    assert batch.formats == [ValueFormat.BINARY]


def test_a_long_source_and_id_are_hashed_into_a_bounded_idempotency_key() -> None:
    batch = structured({**EVENT, "source": "/" + "s" * 300})
    [key] = batch.idempotency_keys or [None]
    assert key is not None
    assert key.startswith("ce-sha256:")
    assert len(key) < 100


@pytest.mark.parametrize(("event", "pointer"), [
    ({**EVENT, "specversion": "0.3"}, "/specversion"),
    ({**EVENT, "id": ""}, "/id"),
    ({**EVENT, "type": None}, "/type"),
    ({**EVENT, "averyveryverylongname1": "x"}, "/averyveryverylongname1"),
    ({**EVENT, "time": "yesterday"}, "/time"),
    ({**EVENT, "time": "2024-13-01T00:00:00Z"}, "/time"),
    ({**EVENT, "dataschema": "relative/path"}, "/dataschema"),
    ({**EVENT, "big": 2**31}, "/big"),
    ({**EVENT, "nested": {"a": 1}}, "/nested"),
    ({**EVENT, "data": 1, "data_base64": "AA=="}, ""),
    ({**EVENT, "data_base64": "not base64!"}, "/data_base64"),
])
def test_an_invalid_event_is_refused_at_its_pointer(event: dict[str, Any], pointer: str) -> None:
    problem = refusal(Mode.STRUCTURED, orjson.dumps(event))
    assert (problem.status, problem.pointer) == (422, pointer)


def test_a_batch_over_the_message_limit_is_too_large() -> None:
    assert refusal(Mode.BATCH, orjson.dumps([EVENT] * 4)).status == 413


def test_binary_mode_reads_percent_encoded_headers_and_the_content_type() -> None:
    headers = CIMultiDict({"Ce-Specversion": "1.0", "ce-id": "1", "ce-source": "/s",
                           "ce-type": "t", "ce-subject": "a%20b", "Content-Type": "text/plain"})
    batch = parse_events(Mode.BINARY, b"hello", headers, LIMITS)
    assert batch.headers is not None
    assert batch.headers[0]["ce-subject"] == "a b"
    assert batch.headers[0]["ce-datacontenttype"] == "text/plain"
    assert batch.values == [b"hello"]
    assert batch.formats == [ValueFormat.BINARY]


def test_the_mode_follows_the_content_type_or_the_ce_headers() -> None:
    assert mode_of(CIMultiDict({"Content-Type": "application/cloudevents+json; charset=utf-8"})) \
        is Mode.STRUCTURED
    assert mode_of(CIMultiDict({"Content-Type": "application/cloudevents-batch+json"})) \
        is Mode.BATCH
    assert mode_of(CIMultiDict({"CE-ID": "1"})) is Mode.BINARY
    assert mode_of(CIMultiDict({"Content-Type": "application/json"})) is None


def test_publish_pointers_are_translated_into_the_events_sent() -> None:
    assert event_pointer("/messages/2/value/total", Mode.BATCH) == "/2/data/total"
    assert event_pointer("/messages/0/value", Mode.STRUCTURED) == "/data"
    assert event_pointer("/messages/0/headers", Mode.BATCH) == "/0"
    assert event_pointer("/acks", Mode.BATCH) == "/acks"


def test_a_plain_message_reads_as_an_event_made_from_it() -> None:
    entry = StoredEntry(partition=2, offset="1700000000000-0", key=b"k", value=b'{"a":1}',
                        headers={"tenant": "acme", "sg-schema-version": "1"},
                        timestamp_ms=1_700_000_000_000, value_format=ValueFormat.JSON)
    event = orjson.loads(orjson.dumps(event_document("orders", entry)))
    assert event == {"specversion": "1.0", "id": "1700000000000-0",
                     "source": "/v1/topics/orders/partitions/2", "type": "streamgate.message",
                     "time": "2023-11-14T22:13:20.000Z", "partitionkey": "k", "tenant": "acme",
                     "data": {"a": 1}, "sgpartition": 2, "sgoffset": "1700000000000-0"}


def test_timestamps_are_rfc3339_utc_with_milliseconds() -> None:
    assert rfc3339(1) == "1970-01-01T00:00:00.001Z"
