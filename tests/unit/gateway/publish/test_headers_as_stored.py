"""Publish headers: the dead letters' ``sg-dlq-*`` headers and a lone ``tracestate`` are refused
with a pointer, and the limits hold for the headers as stored, with what the gateway adds."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.errors import Problem
from gateway.publish.headers import stored_header_bytes
from gateway.publish.validation import PublishLimits, parse_publish_body

LIMITS = PublishLimits(max_value_bytes=1024, max_key_bytes=64, max_headers=3,
                       max_header_bytes=100, max_batch_messages=10, max_batch_bytes=1 << 20)
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def refusal(message: dict[str, Any]) -> Problem:
    body = orjson.dumps({"messages": [{"value": 0}, message]})
    with pytest.raises(Problem) as raised:
        parse_publish_body(body, LIMITS, None)
    return raised.value


@pytest.mark.parametrize("name", ["sg-dlq-reason", "SG-DLQ-Topic", "sg-dlq-"])
def test_dead_letter_headers_cannot_be_forged(name: str) -> None:
    problem = refusal({"value": 1, "headers": {name: "x"}})
    assert (problem.status, problem.pointer) == (422, f"/messages/1/headers/{name}")


def test_a_tracestate_needs_the_messages_own_traceparent() -> None:
    problem = refusal({"value": 1, "headers": {"tracestate": "vendor=1"}})
    assert (problem.status, problem.pointer) == (422, "/messages/1/headers/tracestate")
    body = orjson.dumps({"messages": [{"value": 1, "headers": {
        "traceparent": TRACEPARENT, "tracestate": "vendor=1"}}]})
    assert parse_publish_body(body, LIMITS, None).headers is not None


def test_the_expiry_counts_inside_the_header_count() -> None:
    body = orjson.dumps({"messages": [{"value": 1, "ttl_ms": 5,
                                       "headers": {"a": "1", "b": "2", "c": "3"}}]})
    batch = parse_publish_body(body, LIMITS, None)
    with pytest.raises(Problem) as raised:
        stored_header_bytes(batch, LIMITS)
    assert (raised.value.status, raised.value.pointer) == (413, "/messages/0/headers")


def test_one_context_shared_by_every_message_is_charged_to_each() -> None:
    batch = parse_publish_body(orjson.dumps({"messages": [{"value": i} for i in range(4)]}),
                               LIMITS, None)
    assert stored_header_bytes(batch, LIMITS) == 0
    batch.headers = [{"trace": "x" * 10}] * len(batch)
    assert stored_header_bytes(batch, LIMITS) == 4 * 15
    batch.headers = [{"trace": "x" * 96}] * len(batch)
    with pytest.raises(Problem):
        stored_header_bytes(batch, LIMITS)
