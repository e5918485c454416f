"""Bytes on the wire: message frames encoded once, the control frames, several WebSocket text frames
coalesced into one write.

The client protocol is unchanged: every message is still its own WebSocket text frame
(docs/websocket.md). What changes is how they reach the socket: ``text_frames`` frames everything a
session has queued for one transport ``write`` (one syscall instead of one per message;
gateway.delivery.websocket sends them).
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import orjson

from gateway._speedups import message_frames_or_none, text_frames_or_none, text_frames_python
from gateway.offsets import successor
from storage.models import Delivery, LostRange, StoredEntry, ValueFormat

Send = Callable[[Sequence[bytes]], Awaitable[None]]

def message_frame(topic: str, entry: StoredEntry, delivery_count: int) -> bytes:
    """The ``message`` frame of an entry (the fields and order of gateway.documents.entry_document).

    Assembled from pieces in one ``join``: the JSON value is embedded as stored, strings that may
    need escaping (topic, key, headers) go through orjson, offsets are stream IDs (digits and a
    dash) and base64 needs no escaping. Byte-for-byte what ``orjson.dumps`` of the document gives
    (tests/unit/gateway/test_wire_frames.py), faster, and sized exactly: orjson's own result keeps
    its growth buffer (several times a small frame's size in RSS), and frames wait in outboxes and
    shared tail pages.
    """
    key = b"null" if entry.key is None else _key_json(entry.key)
    if entry.value_format is ValueFormat.JSON:
        value_field, value = b',"value":', entry.value
    else:
        value_field, value = b',"value_b64":"', base64.b64encode(entry.value) + b'"'
    return b"".join((_frame_prefix(topic), b"%d" % entry.partition, b',"offset":"',
                     entry.offset.encode(), b'","key":', key, b',"headers":',
                     _dumps(entry.headers) if entry.headers else b"{}", b',"timestamp_ms":',
                     b"%d" % entry.timestamp_ms, value_field, value, b',"delivery_count":',
                     b"%d" % delivery_count, b"}"))


_dumps = orjson.dumps


def message_frames(topic: str, deliveries: list[Delivery]) -> list[bytes]:
    """The ``message`` frames of a page of deliveries: the compiled framing writes them (faster,
    the same bytes) unless it is unsure or switched off, then ``message_frame`` does, one by
    one."""
    frames = message_frames_or_none(_frame_prefix(topic), deliveries, _FRAME_LAYOUT)
    if frames is not None:
        return frames
    return [message_frame(topic, delivery.entry, delivery.delivery_count)
            for delivery in deliveries]


def _key_json(key: bytes) -> bytes:
    return _dumps(key.decode(errors="replace"))


# What the compiled framing (gateway/_speedups/_frames.c) reads and calls, in its order: the two
# classes, their slots as the dataclasses declare them, then the reference's helpers.
_FRAME_LAYOUT = (Delivery, StoredEntry,
                 tuple(vars(owner)[slot] for owner in (Delivery, StoredEntry)
                       for slot in owner.__slots__),
                 ValueFormat.JSON, _key_json, _dumps, base64.b64encode)


@functools.lru_cache(maxsize=4096)
def _frame_prefix(topic: str) -> bytes:
    return b'{"type":"message","topic":' + _dumps(topic) + b',"partition":'


_MESSAGE_START = b'{"type":"message",'
_BATCH_HEAD = b'{"type":"messages","messages":['


def batched(frames: list[bytes]) -> list[bytes]:
    """Runs of consecutive ``message`` frames as one ``messages`` frame each (``{"type":
    "messages", "messages": [<message>, ...]}``), the frames between them as they are: a client
    decodes one frame per run instead of one per message."""
    out: list[bytes] = []
    run: list[bytes] = []
    for frame in frames:
        if frame.startswith(_MESSAGE_START):
            run.append(frame)
            continue
        if run:
            out.append(_BATCH_HEAD + b",".join(run) + b"]}")
            run = []
        out.append(frame)
    if run:
        out.append(_BATCH_HEAD + b",".join(run) + b"]}")
    return out


# Control frames: every JSON frame the server sends besides ``message``/``messages`` is built here,
# so that gateway/asyncapi.json can be checked against all of them (tests/unit/gateway).
def assignment_frame(partitions: Iterable[int], generation: int = 0) -> dict[str, Any]:
    """The ``assignment`` frame: the partitions the subscription is served from now on."""
    return {"type": "assignment", "generation": generation, "partitions": list(partitions)}


def gap_frame(lost: LostRange) -> dict[str, Any]:
    """The ``gap`` frame: a resumed subscription's position was passed by retention; the entries
    from ``first_lost`` up to (not including) ``first_kept`` (null: none left) are gone; ``count``
    is null when Redis cannot tell."""
    return {"type": "gap", "partition": lost.partition, "first_lost": successor(lost.after),
            "first_kept": lost.first_kept, "count": lost.count}


def error_frame(code: str, detail: str, **extra: str | int) -> dict[str, Any]:
    """An ``error`` frame (``bad-frame``, ``unavailable`` or ``slow-consumer`` with a cursor)."""
    return {"type": "error", "code": code, "detail": detail, **extra}


def quota_frame(limit: int, used: int) -> dict[str, Any]:
    """A ``quota`` frame: the member's in-flight-messages quota has no room, deliveries wait."""
    return {"type": "quota", "quota": "in_flight_messages", "limit": limit, "used": used}


def authenticated_frame(principal: str, expires_at_s: float | None = None) -> dict[str, Any]:
    """The answer to a valid ``auth`` frame; a later one (a fresh token on an open socket) also
    says when the socket's new token expires (``exp``, epoch s)."""
    if expires_at_s is None:
        return {"type": "authenticated", "principal": principal}
    return {"type": "authenticated", "principal": principal, "expires_at_s": expires_at_s}


def text_frames(payloads: Sequence[bytes]) -> bytes:
    """Several payloads as consecutive WebSocket text frames, ready for one transport write (the
    compiled framing writes a list of bytes in one step; its reference gives the same bytes)."""
    if type(payloads) is list:
        framed = text_frames_or_none(payloads)
        if framed is not None:
            return framed
    return text_frames_python(payloads)

