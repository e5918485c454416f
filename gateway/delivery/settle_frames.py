"""Client settle frames of a group subscription (``ack``, ``nack``, ``extend``, ``reject``): parsed
and checked before anything reaches the store."""

from __future__ import annotations

from itertools import repeat
from operator import itemgetter
from typing import Any

from gateway.delivery.session import MessageRef

SETTLE_ACTIONS = ("ack", "nack", "extend", "reject")
MAX_REASON_CHARS = 500
DEFAULT_REJECT_REASON = "rejected by the consumer"
MAX_REFS_PER_FRAME = 10_000
_PARTITION, _OFFSET = itemgetter("partition"), itemgetter("offset")
SettleFrame = tuple[str, list[MessageRef], int, str]  # action, messages, delay_ms, reason


def parse_settle(frame: Any) -> SettleFrame:
    """An ``ack``/``nack``/``extend``/``reject`` frame's action, messages, delay and reason;
    ValueError says what is wrong."""
    if not isinstance(frame, dict) or frame.get("type") not in SETTLE_ACTIONS:
        raise ValueError("expected {\"type\": \"ack\"|\"nack\"|\"extend\"|\"reject\", "
                         "\"messages\": [...]}")
    raw = frame.get("messages")
    if not isinstance(raw, list) or not raw or len(raw) > MAX_REFS_PER_FRAME:
        raise ValueError(f"'messages' must be a list of 1 to {MAX_REFS_PER_FRAME} "
                         "{partition, offset}")
    refs = _message_refs(raw)
    delay_ms = frame.get("delay_ms", 0)
    if (not isinstance(delay_ms, int) or isinstance(delay_ms, bool)
            or not 0 <= delay_ms <= 86_400_000):
        raise ValueError("'delay_ms' must be an integer between 0 and 86400000")
    return str(frame["type"]), refs, delay_ms, reject_reason(frame.get("reason"))


def reject_reason(raw: Any) -> str:
    """A ``reject``'s reason (absent: a default), checked: a string of at most
    ``MAX_REASON_CHARS`` printable characters."""
    if raw is None:
        return DEFAULT_REJECT_REASON
    if not isinstance(raw, str) or not 0 < len(raw) <= MAX_REASON_CHARS or not raw.isprintable():
        raise ValueError(f"'reason' must be 1 to {MAX_REASON_CHARS} printable characters")
    return raw


def _message_refs(items: list[Any]) -> list[MessageRef]:
    """``[(item["partition"], item["offset"]) ...]`` of a frame's messages, checked: every item an
    object with an integer partition (not a boolean) and a string offset. Taken column by column
    (C-level loops: an ack frame carries hundreds)."""
    try:
        if all(map(isinstance, items, repeat(dict))):
            partitions = list(map(_PARTITION, items))
            offsets = list(map(_OFFSET, items))
            if set(map(type, partitions)) == {int} and set(map(type, offsets)) == {str}:
                return list(zip(partitions, offsets, strict=True))
    except KeyError:
        pass
    raise ValueError("each message must be {\"partition\": int, \"offset\": str}")
