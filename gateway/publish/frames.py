"""Publish frames of a WebSocket: a ``publish`` frame read into what HTTP publish takes (its body's
fields, the ``Idempotency-Key`` and trace headers as fields of the frame), and the ``published`` and
``problem`` frames that answer it with what HTTP would answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import Problem, invalid_field, too_large
from gateway.observe.tracing import TRACEPARENT, TRACESTATE, incoming_context
from gateway.publish.flow import PublishAnswer
from gateway.publish.validation import (
    BODY_FIELDS,
    MAX_IDEMPOTENCY_KEY_CHARS,
    PublishBatch,
    PublishLimits,
    parse_publish_doc,
    reject_unknown_fields,
)

PUBLISH = "publish"
MAX_ID_CHARS = 64
FRAME_FIELDS = BODY_FIELDS | {"type", "id", "topic", "idempotency_key", TRACEPARENT, TRACESTATE}
# a frame up to this much over the batch limit is answered (413); a larger one closes the socket
ENVELOPE_BYTES = 64 * 1024


class BadFrame(ValueError):
    """A frame that cannot be answered by id: not JSON, not a publish, or without a valid id."""


@dataclass(frozen=True, slots=True)
class PublishFrame:
    """A publish frame's request: its id, topic, body fields and headers' values, checked later
    (by ``batch``) in the order HTTP checks them: the ACL and the topic first."""

    id: str
    topic: str
    doc: dict[str, Any]
    size: int

    def batch(self, limits: PublishLimits) -> PublishBatch:
        """The body's batch as HTTP validates it; Problem (400/413/422) on the first bad field."""
        if self.size > limits.max_batch_bytes:
            raise too_large(f"a publish frame of {self.size} bytes is over the limit of "
                            f"{limits.max_batch_bytes} bytes", pointer="/messages")
        reject_unknown_fields(self.doc, FRAME_FIELDS)
        return parse_publish_doc(self.doc, limits, _idempotency_key(self.doc))

    def incoming(self) -> dict[str, str] | None:
        """The trace context the frame carries, as HTTP reads it from its headers."""
        parent, state = self.doc.get(TRACEPARENT), self.doc.get(TRACESTATE)
        if not isinstance(parent, str):
            return None
        headers = {TRACEPARENT: parent} | ({TRACESTATE: state} if isinstance(state, str) else {})
        return incoming_context(headers)


def publish_frame_of(doc: Any, size: int) -> PublishFrame:
    """A parsed client frame of ``size`` bytes whose type is ``publish``; BadFrame unless it has an
    id to answer and a topic."""
    frame_id = doc.get("id")
    if not (isinstance(frame_id, str) and 0 < len(frame_id) <= MAX_ID_CHARS
            and frame_id.isprintable()):
        raise BadFrame(f"a publish frame needs an 'id' of 1 to {MAX_ID_CHARS} printable "
                       "characters")
    topic = doc.get("topic")
    if not isinstance(topic, str) or not topic:
        raise BadFrame("a publish frame needs its 'topic'")
    return PublishFrame(frame_id, topic, doc, size)


def _idempotency_key(doc: dict[str, Any]) -> str | None:
    raw = doc.get("idempotency_key")
    if raw is None:
        return None
    if not (isinstance(raw, str) and 0 < len(raw) <= MAX_IDEMPOTENCY_KEY_CHARS
            and raw.isprintable()):
        raise invalid_field("/idempotency_key", "'idempotency_key' must be 1 to "
                            f"{MAX_IDEMPOTENCY_KEY_CHARS} printable characters")
    return raw


def published_frame(frame_id: str, answer: PublishAnswer) -> bytes:
    """``{"type": "published", "id": ..., <HTTP's body fields>}``, the body spliced in as it was
    encoded."""
    return b'{"type":"published","id":' + orjson.dumps(frame_id) + b"," + answer.body[1:]


def problem_frame(frame_id: str, problem: Problem, instance: str) -> bytes:
    """``{"type": "problem", "id": ..., "problem": <problem+json>, "retry_after_s": ...}`` (the
    last only where HTTP would send Retry-After)."""
    frame: dict[str, Any] = {"type": "problem", "id": frame_id,
                             "problem": problem.body(instance)}
    if problem.retry_after_s is not None:
        frame["retry_after_s"] = max(1, round(problem.retry_after_s))
    return orjson.dumps(frame)
