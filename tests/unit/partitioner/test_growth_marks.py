"""A growth's mark names the gateway growing the topic, survives etcd's JSON, and goes with the
growth; a mark written before names existed still reads."""

from __future__ import annotations

import orjson

from partitioner.topics import TopicMetadata

TOPIC = TopicMetadata(name="orders", partitions=2, retention_ms=1000, max_length=None,
                      created_at_ms=1_700_000_000_000, owner="alice", version=7)


def test_a_growth_mark_names_its_gateway_through_etcd_json() -> None:
    growing = TOPIC.growing(4, now_ms=1234, by="gw-a")
    stored = TopicMetadata.from_json(growing.to_json(), growing.version)
    assert (stored.growing_to, stored.growth_since_ms, stored.growth_by) == (4, 1234, "gw-a")


def test_the_gateways_name_goes_with_the_growth() -> None:
    growing = TOPIC.growing(4, now_ms=1234, by="gw-a")
    assert growing.growth_abandoned().growth_by is None
    assert growing.with_fences(["1-0", "2-0"]).grown().growth_by is None


def test_a_mark_without_a_gateway_reads_as_unnamed() -> None:
    doc = orjson.loads(TOPIC.growing(4, now_ms=1234).to_json())
    doc["growth"] = {"to": 4, "since_ms": 1234}
    stored = TopicMetadata.from_json(orjson.dumps(doc), 7)
    assert (stored.growing_to, stored.growth_by) == (4, None)
