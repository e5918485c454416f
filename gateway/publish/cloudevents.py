"""CloudEvents 1.0 publish bodies (structured, batched and binary HTTP modes) as a publish batch:
each attribute a ``ce-<name>`` header, the data the value, ``partitionkey`` the key."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from enum import Enum
from typing import Any
from urllib.parse import unquote

import orjson

from gateway.cloudevents import (
    BATCH,
    HEADER_PREFIX,
    PARTITION_KEY,
    SPECVERSION,
    STRUCTURED,
    is_attribute_name,
)
from gateway.errors import bad_request, invalid_field, too_large
from gateway.publish.headers import header_size, pointer_token
from gateway.publish.validation import (
    MAX_IDEMPOTENCY_KEY_CHARS,
    IncomingMessage,
    PublishBatch,
    PublishLimits,
    _columns,
    json_value_bytes,
)
from storage.models import ValueFormat

REQUIRED = ("specversion", "id", "source", "type")
# context attributes whose type is String, URI, URI-reference or Timestamp (never empty)
STRING_ATTRIBUTES = frozenset({"specversion", "id", "source", "type", "subject",
                               "datacontenttype", "dataschema", "time"})
URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
NOT_IN_URI = re.compile(r"[\x00-\x20\x7f]")
RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)")
INT32 = range(-(2**31), 2**31)
# what the value's stored form takes for an event without data
NO_DATA = b"null"
HASHED_KEY_PREFIX = "ce-sha256:"
MESSAGE_POINTER = re.compile(r"/messages/(\d+)(/value_b64|/value|/headers)?(.*)")


class Mode(Enum):
    """How a request carries its events (the HTTP protocol binding's content modes)."""

    STRUCTURED = "structured"
    BATCH = "batch"
    BINARY = "binary"


def mode_of(headers: Mapping[str, str]) -> Mode | None:
    """The request's CloudEvents mode, None for a publish body of the gateway's own."""
    media = media_type(headers.get("Content-Type", ""))
    if media == STRUCTURED:
        return Mode.STRUCTURED
    if media == BATCH:
        return Mode.BATCH
    if any(name[:3].lower() == HEADER_PREFIX for name in headers):
        return Mode.BINARY
    return None


def media_type(content_type: str) -> str:
    """A Content-Type's media type, lower-case, without parameters."""
    return content_type.split(";", 1)[0].strip().lower()


def parse_events(mode: Mode, body: bytes, headers: Mapping[str, str],
                 limits: PublishLimits) -> PublishBatch:
    """The batch of a CloudEvents publish (acks 1); 400/413/422 on the first bad event, nothing
    of it written."""
    if mode is Mode.BINARY:
        return _columns("1", [_binary_event(headers, body, limits)])
    doc = _json_body(body)
    if mode is Mode.STRUCTURED:
        if not isinstance(doc, dict):
            raise invalid_field("", "a structured event must be a JSON object")
        return _columns("1", [_structured_event(doc, "", limits)])
    if not isinstance(doc, list) or not doc:
        raise invalid_field("", "a batch must be a non-empty JSON array of events")
    if len(doc) > limits.max_batch_messages:
        raise too_large(f"batch of {len(doc)} events is over the limit of "
                        f"{limits.max_batch_messages}")
    return _columns("1", [_batch_member(raw, f"/{index}", limits)
                          for index, raw in enumerate(doc)])


def event_pointer(pointer: str | None, mode: Mode) -> str | None:
    """A pointer into the gateway's publish body (``/messages/3/value/total``) as the pointer
    into the events sent (``/3/data/total``, or ``/data/total`` for one event; an attribute's
    header ``/messages/3/headers/ce-type`` as ``/3/type``, or the header ``ce-type`` in binary
    mode)."""
    found = None if pointer is None else MESSAGE_POINTER.fullmatch(pointer)
    if found is None:
        return pointer
    index, member, rest = found.groups()
    prefix = f"/{index}" if mode is Mode.BATCH else ""
    if member == "/value":
        return f"{prefix}/data{rest}"
    if member == "/value_b64":
        return f"{prefix}/data_base64{rest}"
    if member == "/headers" and rest.startswith("/" + HEADER_PREFIX):
        # an attribute's header: the header itself in binary mode, else the event's member
        attribute = rest[1 + len(HEADER_PREFIX):]
        return rest[1:] if mode is Mode.BINARY else f"{prefix}/{attribute}"
    return prefix


def _json_body(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"body is not valid JSON: {exc}") from None


def _batch_member(raw: Any, pointer: str, limits: PublishLimits) -> IncomingMessage:
    if not isinstance(raw, dict):
        raise invalid_field(pointer, "each event of a batch must be a JSON object")
    return _structured_event(raw, pointer, limits)


def _structured_event(doc: dict[str, Any], pointer: str,
                      limits: PublishLimits) -> IncomingMessage:
    """One event in the JSON format: ``data`` or ``data_base64`` (not both), attributes."""
    if "data" in doc and "data_base64" in doc:
        raise invalid_field(pointer, "an event has at most one of 'data' and 'data_base64'")
    attributes = {name: value for name, value in doc.items()
                  if name not in ("data", "data_base64")}
    headers, key = _stored_attributes(attributes, lambda name: f"{pointer}/{pointer_token(name)}",
                                      limits)
    if "data_base64" in doc:
        value, value_format = _base64_data(doc["data_base64"], f"{pointer}/data_base64")
        member = "data_base64"
    else:
        value, value_format = _json_data(doc.get("data"), f"{pointer}/data"), ValueFormat.JSON
        member = "data"
    _check_value_size(value, f"{pointer}/{member}", limits)
    header_size(headers, pointer, limits, "attributes")
    return IncomingMessage(value, value_format, key, headers, None, idempotency_key(headers))


def _binary_event(headers: Mapping[str, str], body: bytes,
                  limits: PublishLimits) -> IncomingMessage:
    """One event in binary mode: attributes in ``ce-*`` headers (percent-encoded), the data as
    the body, its Content-Type the ``datacontenttype``."""
    attributes = _header_attributes(headers.items())
    content_type = headers.get("Content-Type")
    if body and content_type:
        attributes["datacontenttype"] = content_type
    stored, key = _stored_attributes(attributes, lambda name: f"{HEADER_PREFIX}{name}", limits)
    if not body:
        value, value_format = NO_DATA, ValueFormat.JSON
    elif content_type is not None and _is_json(media_type(content_type)):
        value, value_format = _json_data(_json_body(body), ""), ValueFormat.JSON
    else:
        value, value_format = body, ValueFormat.BINARY
    _check_value_size(value, "", limits)
    header_size(stored, "", limits, "attributes")
    return IncomingMessage(value, value_format, key, stored, None, idempotency_key(stored))


def _header_attributes(headers: Iterable[tuple[str, str]]) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for raw_name, raw_value in headers:
        name = raw_name.lower()
        if not name.startswith(HEADER_PREFIX):
            continue
        attribute = name[len(HEADER_PREFIX):]
        if attribute in attributes:
            raise invalid_field(name, f"header {name!r} is given more than once")
        try:
            attributes[attribute] = unquote(raw_value, errors="strict")
        except UnicodeDecodeError:
            raise invalid_field(name, f"header {name!r} is not percent-encoded UTF-8") from None
    return attributes


def _stored_attributes(attributes: dict[str, Any], pointer: Callable[[str], str],
                       limits: PublishLimits) -> tuple[dict[str, str], bytes | None]:
    """The attributes as ``ce-*`` headers (in their string form) and the partition key."""
    for name in REQUIRED:
        if attributes.get(name) is None:
            raise invalid_field(pointer(name), f"'{name}' is required")
    headers: dict[str, str] = {}
    key = None
    for name, value in attributes.items():
        if not is_attribute_name(name):
            raise invalid_field(pointer(name), f"{name!r} is not an attribute name: 1 to 20 "
                                               "lower-case ASCII letters or digits")
        if value is None:  # an optional attribute set to null is absent
            continue
        text = _attribute_text(name, value, pointer(name))
        if name == PARTITION_KEY:
            key = text.encode()
            if len(key) > limits.max_key_bytes:
                raise too_large(f"partitionkey of {len(key)} bytes is over the limit of "
                                f"{limits.max_key_bytes}", pointer=pointer(name))
        else:
            headers[HEADER_PREFIX + name] = text
    return headers, key


def _attribute_text(name: str, value: Any, pointer: str) -> str:
    """An attribute's canonical string form, checked against its type."""
    if name in STRING_ATTRIBUTES:
        if not isinstance(value, str) or not value:
            raise invalid_field(pointer, f"{name!r} must be a non-empty string")
        _check_string_attribute(name, value, pointer)
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and value in INT32:
        return str(value)
    if isinstance(value, str):
        return value
    raise invalid_field(pointer, f"extension {name!r} must be a string, a boolean or a 32-bit "
                                 "integer")


def _check_string_attribute(name: str, value: str, pointer: str) -> None:
    if name == "specversion" and value != SPECVERSION:
        raise invalid_field(pointer, f"'specversion' must be {SPECVERSION!r}, not {value!r}")
    if name in ("source", "dataschema") and NOT_IN_URI.search(value):
        raise invalid_field(pointer, f"{name!r} must be a URI reference (no spaces or controls)")
    if name == "dataschema" and not URI_SCHEME.match(value):
        raise invalid_field(pointer, "'dataschema' must be an absolute URI")
    if name == "time" and not _is_timestamp(value):
        raise invalid_field(pointer, "'time' must be an RFC 3339 timestamp")


def _is_timestamp(value: str) -> bool:
    if not RFC3339.fullmatch(value):
        return False
    try:
        datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _is_json(media: str) -> bool:
    return media in ("application/json", "text/json") or media.endswith("+json")


def _json_data(data: Any, pointer: str) -> bytes:
    try:
        return json_value_bytes(data)
    except orjson.JSONEncodeError as exc:
        raise invalid_field(pointer, f"'data' cannot be stored as JSON ({exc})") from None


def _base64_data(raw: Any, pointer: str) -> tuple[bytes, ValueFormat]:
    if not isinstance(raw, str):
        raise invalid_field(pointer, "'data_base64' must be a base64 string")
    try:
        return base64.b64decode(raw, validate=True), ValueFormat.BINARY
    except (binascii.Error, ValueError):
        raise invalid_field(pointer, "'data_base64' is not valid base64") from None


def _check_value_size(value: bytes, pointer: str, limits: PublishLimits) -> None:
    if len(value) > limits.max_value_bytes:
        raise too_large(f"data of {len(value)} bytes is over the limit of "
                        f"{limits.max_value_bytes}", pointer=pointer)


def idempotency_key(headers: dict[str, str]) -> str:
    """``<source>/<id>`` (source and id identify an event, so a producer's retry is stored once);
    hashed when too long to be a key."""
    key = f"{headers[HEADER_PREFIX + 'source']}/{headers[HEADER_PREFIX + 'id']}"
    if len(key) <= MAX_IDEMPOTENCY_KEY_CHARS:
        return key
    return HASHED_KEY_PREFIX + hashlib.sha256(key.encode()).hexdigest()
