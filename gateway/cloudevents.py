"""CloudEvents 1.0: the media types and attribute rules, and stored messages read back as
structured events (a published event's ``ce-*`` headers back to its attributes)."""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson
from aiohttp import web

from gateway.publish.headers import SCHEMA_VERSION_HEADER
from storage.models import Delivery, StoredEntry, ValueFormat

SPECVERSION = "1.0"
STRUCTURED = "application/cloudevents+json"
BATCH = "application/cloudevents-batch+json"
HEADER_PREFIX = "ce-"
ATTRIBUTE_NAME = re.compile(r"[a-z0-9]{1,20}")
# the partitioning extension: the event's key
PARTITION_KEY = "partitionkey"
MESSAGE_TYPE = "streamgate.message"
NULL_VALUE = b"null"
# the event's data members, never attributes
DATA_MEMBERS = frozenset({"data", "data_base64"})
# a read at a schema version: the version of an event's data, and why it could not be converted
SCHEMA_VERSION_ATTRIBUTE = "sgschemaversion"
SCHEMA_ERROR_ATTRIBUTE = "sgschemaerror"


def accepts_batch(request: web.Request) -> bool:
    """Whether the request's ``Accept`` asks for a CloudEvents batch (and does not refuse it with
    ``q=0``)."""
    for item in request.headers.get("Accept", "").split(","):
        media, *params = (part.strip() for part in item.split(";"))
        if media.lower() == BATCH:
            return not any(p.replace(" ", "") in ("q=0", "q=0.0", "q=0.00", "q=0.000")
                           for p in params)
    return False


def batch_response(events: list[dict[str, Any]], headers: dict[str, str]) -> web.Response:
    """A JSON batch of structured events."""
    return web.Response(body=orjson.dumps(events), content_type=BATCH, headers=headers)


def event_document(topic: str, entry: StoredEntry) -> dict[str, Any]:
    """A stored message as a structured event: its own attributes when it was published as one,
    else made from the message (offset as id, partition as source, timestamp as time); other
    headers as extensions where their names are attribute names; where it is stored as
    ``sgpartition`` and ``sgoffset``."""
    event = _attributes(entry.headers)
    if "specversion" not in event:
        event.update(specversion=SPECVERSION, id=entry.offset,
                     source=f"/v1/topics/{topic}/partitions/{entry.partition}",
                     type=MESSAGE_TYPE, time=rfc3339(entry.timestamp_ms))
    if entry.key is not None:
        event.setdefault(PARTITION_KEY, entry.key.decode(errors="replace"))
    event.update(sgpartition=entry.partition, sgoffset=entry.offset)
    if entry.value_format is ValueFormat.BINARY:
        event["data_base64"] = base64.b64encode(entry.value).decode()
    elif entry.value != NULL_VALUE:  # an event without data is stored as null
        event["data"] = orjson.Fragment(entry.value)
    return event


def versioned_event(topic: str, entry: StoredEntry,
                    schema_error: str | None = None) -> dict[str, Any]:
    """``event_document`` of a read at a schema version: its data's version as
    ``sgschemaversion`` (none for a value written before the topic had a schema) and, for data
    that could not be converted (then as written), why as ``sgschemaerror``."""
    event = event_document(topic, entry)
    version = entry.headers.get(SCHEMA_VERSION_HEADER)
    if version is not None and version.isascii() and version.isdigit() and len(version) <= 9:
        event[SCHEMA_VERSION_ATTRIBUTE] = int(version)
    if schema_error is not None:
        event[SCHEMA_ERROR_ATTRIBUTE] = schema_error
    return event


def pulled_events(topic: str, deliveries: list[Delivery], receipts: list[str],
                  versioned: bool = False) -> list[dict[str, Any]]:
    """Pulled messages as events, each with its receipt (``sgreceipt``, to ack it by), delivery
    count and topic as extensions; ``versioned`` for a pull pinned to a schema version."""
    document = versioned_event if versioned else event_document
    return [document(topic, d.entry) | {"sgtopic": topic, "sgreceipt": receipt,
                                         "sgdeliverycount": d.delivery_count}
            for d, receipt in zip(deliveries, receipts, strict=True)]


def _attributes(headers: Mapping[str, str]) -> dict[str, Any]:
    """Attributes from headers: ``ce-<name>`` first, then other headers named like attributes
    (where no attribute of that name came first)."""
    event: dict[str, Any] = {}
    for name, value in headers.items():
        if name.startswith(HEADER_PREFIX) and is_attribute_name(name[len(HEADER_PREFIX):]):
            event[name[len(HEADER_PREFIX):]] = value
    for name, value in headers.items():
        if is_attribute_name(name) and name not in event:
            event[name] = value
    return event


def is_attribute_name(name: str) -> bool:
    """Lower-case ASCII letters and digits, at most 20 (and not a data member)."""
    return ATTRIBUTE_NAME.fullmatch(name) is not None and name not in DATA_MEMBERS


def rfc3339(epoch_ms: int) -> str:
    """Epoch milliseconds as an RFC 3339 UTC timestamp."""
    stamp = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")
