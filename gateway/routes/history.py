"""Reads served by key indexes: a key's history (oldest or newest first, paged), and a compacted
partition's snapshot (the newest value of every key as of one offset, paged)."""

from __future__ import annotations

import base64
import binascii

from aiohttp import web

from gateway.auth.gatekeeper import gatekeeper_of, principal_of
from gateway.documents import entry_document
from gateway.errors import invalid_field
from gateway.offsets import parse_offset, predecessor, successor
from gateway.responses import json_response
from gateway.routes.messages import DEFAULT_REPLAY_LIMIT, int_param, partition_param, reader_of
from gateway.routes.schema_reads import message_documents, reading_version
from gateway.routes.tenancy import key_space_of
from partitioner.hashing import partition_for
from partitioner.topics import TopicMetadata
from storage.models import StoredEntry

ORDERS = ("asc", "desc")


async def key_history(request: web.Request) -> web.Response:
    """GET /v1/topics/{topic}/history?key=|key_b64=&from=&from_time_ms=&limit=&order=&partition=
    &schema_version= -> the key's messages (at the schema version, if asked) and the offset to
    continue from (the key of the caller's key space: another tenant's reads as a key nobody
    wrote)."""
    services, topic, visible, limited = await reader_of(request)
    key = _key_param(request)
    reading = reading_version(request, services, topic)
    if not topic.key_index:
        raise invalid_field("/key", f"topic {topic.name!r} keeps no key index (create it with "
                                    "\"key_index\": true)")
    space = _caller_space(request, topic, "key history")
    raw_partition = request.query.get("partition")
    partition = (partition_for(key, topic.partitions) if raw_partition is None
                 else partition_param(raw_partition, topic))
    limit = int_param(request, "limit", 1,
                      services.settings.max_replay_limit) or DEFAULT_REPLAY_LIMIT
    order = request.query.get("order", "asc")
    if order not in ORDERS:
        raise invalid_field("/order", "'order' must be 'asc' or 'desc'")
    newest_first = order == "desc"
    low, high = _bounds(request, newest_first)
    entries = await services.store.key_history(topic.name, partition, key, low=low, high=high,
                                               limit=limit, newest_first=newest_first,
                                               key_space=space)
    return json_response({"partition": partition,
                          "messages": message_documents(
                              [e for e in entries if visible.matches(e.headers)], topic, reading),
                          "next_offset": _next_offset(entries, low, limit, newest_first)},
                         headers=limited)


def _caller_space(request: web.Request, topic: TopicMetadata, action: str) -> bytes:
    return key_space_of(gatekeeper_of(request), principal_of(request), topic, action)


def _key_param(request: web.Request) -> bytes:
    text, b64 = request.query.get("key"), request.query.get("key_b64")
    if (text is None) == (b64 is None):
        raise invalid_field("/key", "give exactly one of 'key' and 'key_b64'")
    if text is not None:
        return text.encode()
    try:
        return base64.b64decode(b64 or "", validate=True)
    except (binascii.Error, ValueError):
        raise invalid_field("/key_b64", "'key_b64' is not valid base64") from None


def _bounds(request: web.Request, newest_first: bool) -> tuple[str, str]:
    """The offsets to read between: ``from`` (inclusive) or ``from_time_ms`` start the page, in
    the page's direction."""
    start = request.query.get("from", "latest" if newest_first else "earliest")
    from_time_ms = int_param(request, "from_time_ms", 0, 2**63 - 1)
    if from_time_ms is not None:
        if "from" in request.query:
            raise invalid_field("/from_time_ms", "'from_time_ms' cannot be combined with 'from'")
        return ("-", f"({from_time_ms + 1}-0") if newest_first else (f"{from_time_ms}-0", "+")
    if start in ("earliest", "latest"):
        if (start == "latest") != newest_first:
            raise invalid_field("/from", f"'{start}' starts a page only with order="
                                         f"{'desc' if start == 'latest' else 'asc'}")
        return "-", "+"
    ms, seq = parse_offset(start, "/from")
    return ("-", f"{ms}-{seq}") if newest_first else (f"{ms}-{seq}", "+")


def _next_offset(entries: list[StoredEntry], low: str, limit: int,
                 newest_first: bool) -> str | None:
    """Where the next page starts: after the last entry (oldest first, always, to follow the key),
    or before it (newest first; None once the history is exhausted)."""
    if newest_first:
        return predecessor(entries[-1].offset) if len(entries) == limit else None
    if entries:
        return successor(entries[-1].offset)
    return "0-0" if low == "-" else low


async def snapshot(request: web.Request) -> web.Response:
    """GET /v1/topics/{topic}/partitions/{p}/snapshot?as_of=&after=&limit= -> the newest value of
    every key of a compacted partition as of one offset, a page at a time (the keys of the
    caller's key space; every space's for an unfiltered caller)."""
    services, topic, visible, limited = await reader_of(request)
    partition = partition_param(request.match_info["partition"], topic)
    if not topic.compact:
        raise invalid_field("/topic", f"topic {topic.name!r} is not compacted (create it with "
                                      "\"compact\": true): replay reads it instead")
    space = _caller_space(request, topic, "a snapshot")
    limit = int_param(request, "limit", 1,
                      services.settings.max_replay_limit) or DEFAULT_REPLAY_LIMIT
    as_of = request.query.get("as_of")
    if as_of is None:
        as_of = await services.store.snapshot_offset(topic.name, partition)
    else:
        ms, seq = parse_offset(as_of, "/as_of")
        as_of = f"{ms}-{seq}"
    try:
        after, entries = await services.store.snapshot_page(
            topic.name, partition, as_of=as_of, after=request.query.get("after"), limit=limit,
            lag_ms=topic.retention_ms, key_space=space)
    except ValueError:
        raise invalid_field("/after", "'after' is not a cursor this route gave") from None
    return json_response({"partition": partition, "as_of": as_of,
                          "messages": [entry_document(e) for e in entries
                                       if visible.matches(e.headers)],
                          "after": after}, headers=limited)


def add_routes(app: web.Application) -> None:
    """Register the key history and snapshot routes."""
    app.router.add_get("/v1/topics/{topic}/history", key_history)
    app.router.add_get("/v1/topics/{topic}/partitions/{partition}/snapshot", snapshot)
