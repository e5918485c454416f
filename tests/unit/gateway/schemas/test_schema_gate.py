"""Validation at the door (SchemaGate) against a fake schema source: where a refusal points, values
that are not JSON, the version header, and the bound on compiled validators."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import pytest

from gateway.errors import Problem
from gateway.publish.headers import SCHEMA_VERSION_HEADER, parse_headers
from gateway.publish.validation import PublishBatch, PublishLimits, parse_publish_body
from gateway.schemas.validation import SchemaGate
from partitioner.schemas import SchemaRecord
from partitioner.topics import TopicMetadata
from storage.models import ValueFormat

ORDER = {"type": "object", "required": ["total"],
         "properties": {"total": {"type": "integer"},
                        "lines": {"type": "array", "items": {"type": "object", "properties": {
                            "sku/code": {"type": "string"}}}}}}
LIMITS = PublishLimits(1024, 256, 16, 4096, 1000, 1 << 20)


def topic_named(name: str) -> TopicMetadata:
    return TopicMetadata(name=name, partitions=3, retention_ms=60_000, max_length=None,
                         created_at_ms=1, owner="admin")


TOPIC = topic_named("orders")


class FakeSchemas:
    """A schema source that answers from a dict and counts its lookups."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, int], SchemaRecord] = {}

    def register(self, topic: TopicMetadata, schema: dict[str, Any], version: int = 1) -> None:
        fingerprint = hashlib.sha256(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)).hexdigest()
        self.records[topic.name, topic.created_at_ms] = SchemaRecord(
            topic.name, topic.created_at_ms, version, schema, "backward", fingerprint, 0, "admin")

    def latest(self, topic: str, created_at_ms: int) -> SchemaRecord | None:
        return self.records.get((topic, created_at_ms))


def batch_of(*messages: dict[str, Any]) -> PublishBatch:
    return parse_publish_body(orjson.dumps({"messages": list(messages)}), LIMITS, None)


def gate_with(schema: dict[str, Any] = ORDER, version: int = 1) -> SchemaGate:
    schemas = FakeSchemas()
    schemas.register(TOPIC, schema, version)
    return SchemaGate(schemas)


def refusal(gate: SchemaGate, batch: PublishBatch) -> Problem:
    with pytest.raises(Problem) as caught:
        gate.check(TOPIC, batch)
    return caught.value


def test_a_topic_without_a_schema_leaves_the_batch_untouched() -> None:
    batch = batch_of({"value": "anything"})
    assert SchemaGate(FakeSchemas()).check(TOPIC, batch) is None
    assert batch.headers is None


@pytest.mark.parametrize(("values", "pointer"), [
    ([{"total": 1}] * 3 + [{"total": "ten"}, {"total": 5}], "/messages/3/value/total"),
    ([{"total": 1}, {}], "/messages/1/value"),
    ([{"total": 1, "lines": [{"sku/code": "A"}, {"sku/code": 7}]}],
     "/messages/0/value/lines/1/sku~1code"),
    ([[1, 2]], "/messages/0/value"),
])
def test_the_first_failing_message_is_refused_with_a_pointer_into_its_value(
        values: list[Any], pointer: str) -> None:
    problem = refusal(gate_with(version=4), batch_of(*({"value": v} for v in values)))
    assert (problem.status, problem.slug, problem.pointer) == (422, "schema-mismatch", pointer)
    assert problem.extra["schema_version"] == 4
    assert problem.extra["schema_error"]


def test_a_refused_batch_gets_no_version_header() -> None:
    batch = batch_of({"value": {"total": 1}}, {"value": {"total": None}})
    refusal(gate_with(), batch)
    assert batch.headers is None


def test_a_value_b64_message_on_a_schema_topic_is_refused_at_its_value_b64() -> None:
    batch = batch_of({"value": {"total": 1}}, {"value_b64": "eyJ0b3RhbCI6IDF9"})
    assert isinstance(batch.formats, list)
    assert batch.formats[1] is ValueFormat.BINARY
    problem = refusal(gate_with(), batch)
    assert (problem.status, problem.pointer) == (422, "/messages/1/value_b64")


def test_every_message_of_a_valid_batch_carries_the_version_it_matched() -> None:
    plain = batch_of({"value": {"total": 1}}, {"value": {"total": 2}, "key": "k"})
    assert gate_with(version=7).check(TOPIC, plain) == 7
    assert plain.headers == [{SCHEMA_VERSION_HEADER: "7"}] * 2
    with_headers = batch_of({"value": {"total": 1}, "headers": {"a": "1"}}, {"value": {"total": 2}})
    gate_with(version=7).check(TOPIC, with_headers)
    assert with_headers.headers == [{"a": "1", SCHEMA_VERSION_HEADER: "7"},
                                    {SCHEMA_VERSION_HEADER: "7"}]


@pytest.mark.parametrize("name", [SCHEMA_VERSION_HEADER, "SG-Schema-Version"])
def test_a_publisher_may_not_set_the_schema_version_header_itself(name: str) -> None:
    with pytest.raises(Problem) as caught:
        parse_headers({name: "1"}, "/messages/0", LIMITS)
    assert (caught.value.status, caught.value.pointer) == (422, f"/messages/0/headers/{name}")


def test_compiled_validators_are_bounded_and_the_oldest_goes_first() -> None:
    schemas = FakeSchemas()
    gate = SchemaGate(schemas, max_compiled=2)
    topics = [topic_named(f"t{i}") for i in range(3)]
    for index, topic in enumerate(topics):
        schemas.register(topic, {"type": "object", "required": [f"f{index}"]})
    batch = batch_of({"value": {"f0": 1, "f1": 1, "f2": 1}})
    for topic in topics:
        gate.check(topic, batch)
    assert len(gate) == 2
    gate.check(topics[2], batch)  # already compiled: nothing is evicted
    assert len(gate) == 2
