"""The HTTP request a push sends for a batch of deliveries: a JSON envelope of messages, or one
message as a CloudEvent in binary mode; signed the Standard Webhooks way in both."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson

from gateway.cloudevents import HEADER_PREFIX, event_document
from gateway.delivery.wire import message_frames
from gateway.observe.version import installed_version
from gateway.push.signing import webhook_headers
from storage.models import Delivery, ValueFormat

JSON = "application/json"
OCTET_STREAM = "application/octet-stream"
# the HTTP binding percent-encodes attribute values outside printable ASCII, and space, '"', '%'
_CE_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '"%')
_UNSENDABLE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # a line break would split the header
# the event's own attributes that binary mode carries elsewhere: its data and the data's type
_NOT_HEADERS = frozenset({"data", "data_base64", "datacontenttype"})


@dataclass(frozen=True, slots=True)
class PushRequest:
    """One POST: its body and headers (signatures included)."""

    body: bytes
    headers: dict[str, str]
    message_id: str


def message_id(topic: str, deliveries: list[Delivery]) -> str:
    """The ``webhook-id``, the same on every retry of the same messages: a receiver's
    idempotency key."""
    first = deliveries[0].entry
    suffix = "" if len(deliveries) == 1 else f"+{len(deliveries)}"
    return f"{topic}:{first.partition}:{first.offset}{suffix}"


def json_body(topic: str, group: str, deliveries: list[Delivery]) -> bytes:
    """The JSON envelope: the subscription and its messages, each the WebSocket message frame (the
    compiled framing writes them)."""
    return b"".join((b'{"subscription":', orjson.dumps({"topic": topic, "group": group}),
                     b',"messages":[', b",".join(message_frames(topic, deliveries)), b"]}"))


def cloudevent_parts(topic: str, delivery: Delivery) -> tuple[bytes, dict[str, str]]:
    """One message as a binary-mode CloudEvent: its data as the body, its attributes as ``ce-``
    headers, percent-encoded as the HTTP binding says (the message's own when it was published as
    an event; where it is stored and its delivery count as the extensions a pull's structured
    events carry)."""
    entry = delivery.entry
    event = event_document(topic, entry) | {"sgtopic": topic,
                                            "sgdeliverycount": delivery.delivery_count}
    headers = {HEADER_PREFIX + name: quote(_text(value), safe=_CE_SAFE)
               for name, value in event.items() if name not in _NOT_HEADERS}
    content_type = event.get("datacontenttype") or entry.headers.get("content-type")
    if content_type is None:
        content_type = JSON if entry.value_format is ValueFormat.JSON else OCTET_STREAM
    headers["Content-Type"] = str(content_type)
    return entry.value, headers


def build_request(topic: str, group: str, fmt: str, deliveries: list[Delivery],
                  keys: list[bytes], extra_headers: dict[str, str]) -> PushRequest:
    """The signed request for ``deliveries`` (one partition's, in order); ValueError when a
    message's attribute cannot be an HTTP header (a control character in it)."""
    msg_id = message_id(topic, deliveries)
    if fmt == "cloudevents":
        body, headers = cloudevent_parts(topic, deliveries[0])
    else:
        body, headers = json_body(topic, group, deliveries), {"Content-Type": JSON}
    headers = {**extra_headers, **headers, "User-Agent": USER_AGENT,
               **webhook_headers(keys, msg_id, body)}
    if any(_UNSENDABLE.search(value) for value in headers.values()):
        raise ValueError("a header value holds a control character")
    return PushRequest(body, headers, msg_id)


def body_size(topic: str, delivery: Delivery) -> int:
    """About what a message adds to a JSON envelope (for the batch byte bound): its value (base64
    a third larger), key and headers, with room for the fields around them."""
    entry = delivery.entry
    size = len(entry.value)
    if entry.value_format is not ValueFormat.JSON:
        size += size // 3 + 4
    if entry.headers:
        size += sum(len(name) + len(value) + 6 for name, value in entry.headers.items())
    return size + len(entry.key or b"") + len(topic) + 160


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


USER_AGENT = f"streamgate-push/{installed_version()}"
