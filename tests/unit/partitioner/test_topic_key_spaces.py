"""Whether a topic keeps tenants' keys in key spaces: every topic created now does, one stored
before them (its metadata without the field) does not, and the flag survives every change."""

from __future__ import annotations

import orjson

from partitioner.registry import InMemoryTopicRegistry
from partitioner.topics import TopicMetadata, TopicSettings


async def test_a_topic_created_now_keeps_key_spaces() -> None:
    created = await InMemoryTopicRegistry().create(TopicSettings("t", 2, compact=True,
                                                                 key_index=True), "me")
    assert created.key_spaces
    assert TopicMetadata.from_json(created.to_json(), 1).key_spaces


def test_a_topic_stored_before_key_spaces_has_none() -> None:
    stored = orjson.loads(TopicMetadata("t", 1, 1000, None, 0, "me", key_index=True,
                                        key_spaces=True).to_json())
    del stored["key_spaces"]
    assert not TopicMetadata.from_json(orjson.dumps(stored), 3).key_spaces


async def test_changes_and_growth_keep_the_flag() -> None:
    created = await InMemoryTopicRegistry().create(TopicSettings("t", 2), "me")
    changed = created.with_changes(retention_ms=5000, max_length=None).growing(4, 0)
    assert changed.key_spaces
    assert TopicMetadata.from_json(changed.to_json(), 2).key_spaces
