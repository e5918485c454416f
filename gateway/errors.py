"""The one place where errors become HTTP: RFC 9457 problem+json with the right status.

Handlers raise ``Problem`` (or let storage/partitioner errors through); ``problem_for`` renders them
(called by the gateway's one middleware, ``gateway.app.gateway_middleware``).
A request that fails validation never reaches storage, so nothing partial is written.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from gateway.auth.errors import (
    AuthError,
    Forbidden,
    GroupsLimitReached,
    QuotaExceeded,
    Unauthenticated,
)
from gateway.schemas.errors import SchemaError, SchemaIncompatible, SchemaRejected
from partitioner.errors import (
    ConcurrentModification,
    CoordinationUnavailable,
    InvalidTopic,
    PartitionerError,
    TopicExists,
    TopicNotFound,
)
from storage.errors import (
    ConditionFailed,
    IdempotencyConflict,
    InvalidOffset,
    NotEnoughReplicas,
    SnapshotExpired,
    StorageError,
    StorageFull,
    StorageUnavailable,
)

log = logging.getLogger(__name__)

PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_TYPE_BASE = "https://streamgate.dev/problems/"


class Problem(Exception):
    """An error response: status, a stable type slug, a title and a detail for humans."""

    def __init__(
        self,
        status: int,
        slug: str,
        title: str,
        detail: str,
        *,
        pointer: str | None = None,
        retry_after_s: float | None = None,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.title = title
        self.detail = detail
        self.pointer = pointer
        self.retry_after_s = retry_after_s
        self.extra = extra or {}
        self.headers = headers or {}

    def body(self, instance: str) -> dict[str, Any]:
        """The problem document."""
        doc: dict[str, Any] = {
            "type": PROBLEM_TYPE_BASE + self.slug,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "instance": instance,
        }
        if self.pointer is not None:
            doc["pointer"] = self.pointer
        doc.update(self.extra)
        return doc


def bad_request(detail: str) -> Problem:
    """400: the body is not valid JSON or the request is malformed."""
    return Problem(400, "malformed-request", "Malformed request", detail)


def invalid_field(pointer: str, detail: str) -> Problem:
    """422: a field has the wrong type or value; ``pointer`` is an RFC 6901 JSON pointer to it."""
    return Problem(422, "invalid-field", "Invalid field", detail, pointer=pointer)


def receipt_expired(pointer: str, detail: str) -> Problem:
    """410: a pull receipt is older than its ack timeout (plus slack); the message must be pulled
    again."""
    return Problem(410, "receipt-expired", "Receipt expired", detail, pointer=pointer)


def too_large(detail: str, pointer: str | None = None) -> Problem:
    """413: a value, a batch or the body is over its configured limit."""
    return Problem(413, "too-large", "Payload too large", detail, pointer=pointer)


def body_timeout(detail: str) -> Problem:
    """408: the request body did not arrive in time; the connection is closed
    (``problem_response``)."""
    return Problem(408, "request-timeout", "Request timeout", detail,
                   headers={"Connection": "close"})


def undecodable_body(detail: str) -> Problem:
    """400: the body's Content-Encoding says gzip or zstd but the bytes do not decode (corrupt or
    truncated)."""
    return Problem(400, "undecodable-body", "Body does not decode", detail)


def unsupported_encoding(coding: str, accepted: str) -> Problem:
    """415 + Accept-Encoding: the body uses a content coding the gateway does not decode."""
    return Problem(415, "unsupported-encoding", "Unsupported content encoding",
                   f"Content-Encoding {coding!r} is not supported; use one of: {accepted} "
                   "(or none)", headers={"Accept-Encoding": accepted})


def rate_limited(detail: str, retry_after_s: float, headers: dict[str, str]) -> Problem:
    """429 + Retry-After and RateLimit headers: a rate limit refused the request; retry later."""
    return Problem(429, "rate-limited", "Too many requests", detail, retry_after_s=retry_after_s,
                   headers=headers)


def too_many_connections(detail: str, retry_after_s: float) -> Problem:
    """429: the principal already holds as many subscriptions as it may on this gateway."""
    return Problem(429, "too-many-connections", "Too many connections", detail,
                   retry_after_s=retry_after_s)


def unavailable(detail: str, retry_after_s: float) -> Problem:
    """503 + Retry-After: a backend is unavailable; the request may be retried."""
    return Problem(503, "unavailable", "Service unavailable", detail, retry_after_s=retry_after_s)


AUTH_REALM = 'realm="streamgate"'


def unauthorized(exc: Unauthenticated) -> Problem:
    """401 + WWW-Authenticate (RFC 6750 ``invalid_token`` when credentials were given but
    rejected)."""
    challenge = f"Bearer {AUTH_REALM}"
    if exc.credentials_given:
        description = exc.message.replace('"', "'")
        challenge += f', error="invalid_token", error_description="{description}"'
    return Problem(401, "unauthorized", "Unauthorized", exc.message,
                   headers={"WWW-Authenticate": f"{challenge}, ApiKey {AUTH_REALM}"})


def problem_from(exc: Exception) -> Problem:
    """Translate an auth, storage or partitioner error into a Problem."""
    if isinstance(exc, Problem):
        return exc
    if isinstance(exc, Unauthenticated):
        return unauthorized(exc)
    if isinstance(exc, GroupsLimitReached):
        return Problem(403, "groups-limit", "Too many consumer groups", exc.message,
                       extra={"limit": exc.limit})
    if isinstance(exc, Forbidden):
        return Problem(403, "forbidden", "Forbidden", exc.message)
    if isinstance(exc, QuotaExceeded):
        return quota_exceeded(exc)
    if isinstance(exc, NotEnoughReplicas):
        return Problem(503, "not-enough-replicas", "Not enough in-sync replicas", exc.message,
                       retry_after_s=exc.retry_after_s,
                       extra={"required": exc.required, "acknowledged": exc.acknowledged})
    if isinstance(exc, StorageFull):
        return storage_full(exc)
    if isinstance(exc, StorageUnavailable | CoordinationUnavailable):
        return unavailable(exc.message, exc.retry_after_s)
    if isinstance(exc, InvalidOffset):
        return invalid_field("/from", exc.message)
    if isinstance(exc, SnapshotExpired):
        return Problem(410, "snapshot-expired", "Snapshot expired",
                       f"{exc.message}: start the snapshot again (without as_of)")
    if isinstance(exc, ConditionFailed):
        return condition_failed(exc)
    if isinstance(exc, IdempotencyConflict):
        return Problem(422, "idempotency-key-reused", "Idempotency-Key reused",
                       f"{exc.message}: a retry must send the same messages")
    if isinstance(exc, SchemaError):
        return schema_problem(exc)
    if isinstance(exc, TopicNotFound):
        return Problem(404, "topic-not-found", "Topic not found", exc.message)
    if isinstance(exc, TopicExists):
        return Problem(409, "topic-exists", "Topic already exists", exc.message)
    if isinstance(exc, ConcurrentModification):
        return Problem(409, "concurrent-modification", "Concurrent modification", exc.message)
    if isinstance(exc, InvalidTopic):
        return invalid_field("/" + exc.field, exc.message)
    if isinstance(exc, StorageError | PartitionerError):
        return Problem(500, "internal", "Internal error", exc.message)
    return Problem(500, "internal", "Internal error", "an unexpected error occurred")


def schema_problem(exc: SchemaError) -> Problem:
    """409 naming each incompatible change (path in the schema, its name, why), or 422 pointing
    at what was refused in the schema."""
    if isinstance(exc, SchemaIncompatible):
        return Problem(409, "schema-incompatible", "Schema incompatible", exc.message,
                       extra={"compatibility": exc.mode, "changes": [
                           {"path": c.path, "change": c.change, "detail": c.detail}
                           for c in exc.changes]})
    pointer = exc.pointer if isinstance(exc, SchemaRejected) else "/schema"
    return Problem(422, "schema-refused", "Schema refused", exc.message, pointer=pointer)


def storage_full(exc: StorageFull) -> Problem:
    """507 + Retry-After: a Redis node has no room for the write (past the publish watermark, or
    at its maxmemory); nothing of it was written. Reads, acks and group reads go on."""
    extra: dict[str, Any] = {"reason": exc.reason}
    if exc.node is not None:
        extra["node"] = exc.node
    return Problem(507, "storage-full", "Insufficient storage", exc.message,
                   retry_after_s=exc.retry_after_s, extra=extra)


def quota_exceeded(exc: QuotaExceeded) -> Problem:
    """507 (bytes retained) or 429 (messages in flight) + Retry-After: the caller's quota has no
    room for the request; nothing of it was done."""
    status, slug, title = ((507, "quota-retained-bytes", "Retained bytes quota exceeded")
                           if exc.kind == "retained_bytes" else
                           (429, "quota-in-flight", "In-flight messages quota exceeded"))
    return Problem(status, slug, title, exc.message, retry_after_s=exc.retry_after_s,
                   extra={"quota": exc.kind, "subject": exc.subject, "limit": exc.limit,
                          "used": exc.used})


def condition_failed(exc: ConditionFailed, reveal_current: bool = True) -> Problem:
    """409 for a conditional append whose expectation did not hold, pointing at it; the current
    position only when ``reveal_current`` (a caller that may read the topic)."""
    pointer = ("/expected_last_offset" if exc.index is None
               else f"/messages/{exc.index}/expected_offset")
    extra = {"partition": exc.partition, "index": exc.index, "expected": exc.expected}
    if reveal_current:
        extra["current"] = exc.current
    detail = exc.message if reveal_current else (
        f"partition {exc.partition}: the expected offset {exc.expected} does not match (the "
        "current one is told only to a caller that may read the topic)")
    return Problem(409, "unexpected-offset", "Expected offset does not match", detail,
                   pointer=pointer, extra=extra)


def problem_response(problem: Problem, instance: str) -> web.Response:
    """Render a Problem as application/problem+json."""
    headers = dict(problem.headers)
    if problem.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, round(problem.retry_after_s)))
    response = web.Response(
        status=problem.status,
        body=orjson.dumps(problem.body(instance)),
        content_type=PROBLEM_CONTENT_TYPE,
        headers=headers,
    )
    if headers.get("Connection") == "close":
        # the rest of a late body is never read: the connection cannot carry another request
        response.force_close()
    return response


def _from_http_exception(exc: web.HTTPException) -> Problem:
    if exc.status == 413:
        return too_large(exc.text or "request body too large")
    slug = exc.reason.lower().replace(" ", "-")
    return Problem(exc.status, slug, exc.reason, exc.text or exc.reason)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def problem_for(request: web.Request, exc: Exception) -> web.StreamResponse:
    """The problem+json response for an error a handler raised (called in the ``except`` that caught
    it).

    An ``HTTPException`` under 400 (a redirect, say) is not an error: it is raised again for
    aiohttp.
    """
    if isinstance(exc, web.HTTPException):
        if exc.status < 400:
            raise exc
        return problem_response(_from_http_exception(exc), request.path)
    if isinstance(exc, Problem | AuthError | StorageError | PartitionerError | SchemaError):
        problem = problem_from(exc)
        if problem.status >= 500 and problem.status not in (503, 507):
            log.exception("request failed: %s %s", request.method, request.path)
        return problem_response(problem, request.path)
    log.exception("unhandled error: %s %s", request.method, request.path)
    return problem_response(problem_from(RuntimeError()), request.path)


# WebSocket close codes (4000-4999 are the application's own; docs/websocket.md lists them).
WS_CLOSE_GOING_AWAY = 1001  # the gateway is shutting down: reconnect (to any gateway) and resume
# the client did not drain its buffer in time; reason carries the resume cursor
WS_CLOSE_SLOW_CONSUMER = 4008
# no/invalid credentials (no auth frame in time), or the token expired
WS_CLOSE_UNAUTHENTICATED = 4401
WS_CLOSE_FORBIDDEN = 4403  # authenticated, but not allowed to subscribe to this topic/group
WS_CLOSE_TOPIC_GONE = 4404  # the topic was deleted
# the group is already served with another mode or filter on this gateway
WS_CLOSE_GROUP_CONFLICT = 4409
# max_connections_per_principal reached, or the subscribe rate limit refused
WS_CLOSE_TOO_MANY_CONNECTIONS = 4429
# a backend failed or group membership was lost: reconnect after a pause
WS_CLOSE_UNAVAILABLE = 4503


def close_code_for(exc: BaseException) -> int:
    """The WebSocket close code for an error that ends a subscription."""
    if isinstance(exc, TopicNotFound):
        return WS_CLOSE_TOPIC_GONE
    if isinstance(exc, Unauthenticated):
        return WS_CLOSE_UNAUTHENTICATED
    if isinstance(exc, Forbidden):
        return WS_CLOSE_FORBIDDEN
    return WS_CLOSE_UNAVAILABLE
