"""Subscription parameters, validated before the WebSocket upgrade (bad ones get a problem+json
4xx)."""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from multidict import MultiMapping

from gateway.delivery.filters import HeaderFilter, parse_filters
from gateway.errors import invalid_field
from gateway.offsets import parse_offset
from partitioner.group_policy import NO_BACKOFF, RetryBackoff

if TYPE_CHECKING:
    from gateway.delivery.pinning import PinnedVersion

GROUP_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
DEFAULT_MAX_IN_FLIGHT = 100
MAX_MAX_IN_FLIGHT = 10_000
DEFAULT_ACK_TIMEOUT_MS = 30_000
DEFAULT_MAX_DELIVERIES = 5
MAX_BACKOFF_MS = 3_600_000
MAX_SCHEMA_VERSION = 999_999_999
RETRY_BACKOFF_FIELDS = ("retry_backoff_ms", "retry_backoff_multiplier", "retry_backoff_max_ms")


class Mode(enum.Enum):
    """How a subscription shares a topic with others."""

    # one live member per partition per group (Kafka-like), order kept per partition
    EXCLUSIVE = "exclusive"
    SHARED = "shared"  # any member gets any entry (SQS-like)
    # members share partitions by key, one message of a key in flight (Pulsar's Key_Shared)
    KEY_SHARED = "key_shared"
    BROADCAST = "broadcast"  # no group: every subscriber sees everything from its own cursor


@dataclass(frozen=True, slots=True)
class SubscribeParams:
    """A validated ``GET /v1/subscribe`` request."""

    topic: str
    group: str | None
    mode: Mode
    start: str  # "earliest" | "latest" | "cursor"
    cursor: Mapping[int, str]  # partition -> last seen offset (resume strictly after it)
    from_time_ms: int | None
    max_in_flight: int
    ack_timeout_ms: int
    max_deliveries: int
    auto_ack: bool
    filter: HeaderFilter
    batch: bool = False  # message frames sent as ``messages`` frames of many
    retry_backoff: RetryBackoff = NO_BACKOFF  # between a group's failed deliveries
    schema_version: int | None = None  # deliver every value converted to this version
    pinned: PinnedVersion | None = None  # what converts to it, once the topic is known


def parse_subscribe_params(query: MultiMapping[str]) -> SubscribeParams:
    """Parse and validate the query string of a subscription."""
    topic = query.get("topic")
    if not topic:
        raise invalid_field("/topic", "'topic' is required")
    group = query.get("group")
    if group is not None and not GROUP_NAME.fullmatch(group):
        raise invalid_field("/group", "'group' must match [A-Za-z0-9._-]{1,200}")
    mode = _mode(query.get("mode"), group)
    start, cursor = _start(query.get("from", "earliest" if group else "latest"))
    from_time_ms = _int(query, "from_time_ms", None, 0, 2**63 - 1)
    if from_time_ms is not None and mode is not Mode.BROADCAST:
        raise invalid_field("/from_time_ms", "'from_time_ms' is for broadcast subscriptions")
    auto_ack = _bool(query.get("auto_ack", "false"), "auto_ack")
    if auto_ack and mode is Mode.KEY_SHARED:
        raise invalid_field("/auto_ack", "key_shared hands a key's next message out once the last "
                                         "one is acked: it takes no auto_ack")
    return SubscribeParams(
        topic=topic, group=group, mode=mode, start=start, cursor=cursor, from_time_ms=from_time_ms,
        max_in_flight=_int(query, "max_in_flight", DEFAULT_MAX_IN_FLIGHT, 1,
                           MAX_MAX_IN_FLIGHT) or 1,
        ack_timeout_ms=_int(query, "ack_timeout_ms", DEFAULT_ACK_TIMEOUT_MS, 100, 3_600_000) or 1,
        max_deliveries=_int(query, "max_deliveries", DEFAULT_MAX_DELIVERIES, 1, 1000) or 1,
        auto_ack=auto_ack,
        filter=parse_filters(query.getall("filter", [])),
        batch=_bool(query.get("batch", "false"), "batch"),
        retry_backoff=parse_retry_backoff(query),
        schema_version=_int(query, "schema_version", None, 1, MAX_SCHEMA_VERSION),
    )


def parse_retry_backoff(values: Mapping[str, object]) -> RetryBackoff:
    """``retry_backoff_ms`` (0: off), ``retry_backoff_multiplier`` and ``retry_backoff_max_ms``
    from a query or a JSON body (strings or numbers)."""
    initial = _number(values, "retry_backoff_ms", 0, 0, MAX_BACKOFF_MS)
    multiplier = _number(values, "retry_backoff_multiplier", 2, 1, 100)
    maximum = _number(values, "retry_backoff_max_ms", NO_BACKOFF.max_ms, 0, MAX_BACKOFF_MS)
    return RetryBackoff(int(initial), float(multiplier), int(max(maximum, initial)))


def _number(values: Mapping[str, object], name: str, default: float, low: float,
            high: float) -> float:
    raw = values.get(name)
    if raw is None:
        return default
    try:
        number = float(raw) if isinstance(raw, str | int | float) and not isinstance(raw, bool) \
            else float("nan")
    except ValueError:
        number = float("nan")
    if not low <= number <= high:  # NaN fails too
        raise invalid_field(f"/{name}", f"'{name}' must be a number between {low:g} and {high:g}")
    return number


def _mode(raw: str | None, group: str | None) -> Mode:
    if raw is None:
        return Mode.EXCLUSIVE if group else Mode.BROADCAST
    try:
        mode = Mode(raw)
    except ValueError:
        raise invalid_field("/mode", "'mode' must be exclusive, shared, key_shared or "
                                     "broadcast") from None
    if (mode is Mode.BROADCAST) != (group is None):
        raise invalid_field("/group", "exclusive, shared and key_shared need a 'group'; "
                                      "broadcast takes none")
    return mode


def _start(raw: str) -> tuple[str, dict[int, str]]:
    """``earliest``, ``latest`` or a cursor ``<partition>:<offset>[,<partition>:<offset>...]``."""
    if raw in ("earliest", "latest"):
        return raw, {}
    cursor: dict[int, str] = {}
    for part in raw.split(","):
        partition, sep, offset = part.partition(":")
        if not sep or not (partition.isascii() and partition.isdigit()):
            raise invalid_field("/from",
                                "'from' must be earliest, latest or <partition>:<offset>[,...]")
        parse_offset(offset, "/from")
        cursor[int(partition)] = offset
    return "cursor", cursor


def _int(query: Mapping[str, str], name: str, default: int | None, low: int,
         high: int) -> int | None:
    raw = query.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or not low <= int(raw) <= high:
        raise invalid_field(f"/{name}", f"'{name}' must be an integer between {low} and {high}")
    return int(raw)


def _bool(raw: str, name: str) -> bool:
    if raw not in ("true", "false", "1", "0"):
        raise invalid_field(f"/{name}", f"'{name}' must be true or false")
    return raw in ("true", "1")


def format_cursor(cursor: Mapping[int, str]) -> str:
    """The ``from`` value that resumes right after ``cursor``."""
    return ",".join(f"{partition}:{offset}" for partition, offset in sorted(cursor.items()))
