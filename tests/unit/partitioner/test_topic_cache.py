"""TopicCache ordering rules: newer versions win, late watch events never roll the cache back."""

from __future__ import annotations

from partitioner.cache import TopicCache
from partitioner.topics import TopicMetadata


def _topic(name: str, version: int, partitions: int = 3) -> TopicMetadata:
    return TopicMetadata(name, partitions, 1000, None, 0, "alice", version)


def test_remember_stores_topic_and_advances_revision() -> None:
    cache = TopicCache()
    cache.remember(_topic("orders", 5))
    assert cache.get("orders") == _topic("orders", 5)
    assert cache.revision == 5


def test_late_older_version_never_rolls_back_a_newer_one() -> None:
    cache = TopicCache()
    cache.remember(_topic("orders", 9, partitions=6))
    cache.remember(_topic("orders", 5, partitions=3))
    assert cache.get("orders") == _topic("orders", 9, partitions=6)
    assert cache.revision == 9


def test_same_version_is_idempotent() -> None:
    cache = TopicCache()
    cache.remember(_topic("orders", 5, partitions=3))
    cache.remember(_topic("orders", 5, partitions=99))
    assert cache.get("orders") == _topic("orders", 5, partitions=3)


def test_forget_removes_topic_and_advances_revision() -> None:
    cache = TopicCache()
    cache.remember(_topic("orders", 5))
    cache.forget("orders", 8)
    assert cache.get("orders") is None
    assert cache.revision == 8


def test_late_put_after_delete_does_not_resurrect_topic() -> None:
    cache = TopicCache()
    cache.remember(_topic("orders", 5))
    cache.forget("orders", 8)
    cache.remember(_topic("orders", 6))
    assert cache.get("orders") is None


def test_recreate_after_delete_is_applied() -> None:
    cache = TopicCache()
    cache.forget("orders", 8)
    cache.remember(_topic("orders", 10))
    assert cache.get("orders") == _topic("orders", 10)


def test_late_delete_does_not_remove_newer_version() -> None:
    cache = TopicCache()
    cache.remember(_topic("orders", 10))
    cache.forget("orders", 8)
    assert cache.get("orders") == _topic("orders", 10)


def test_replace_all_loads_snapshot_sorted_by_name() -> None:
    cache = TopicCache()
    cache.remember(_topic("stale", 2))
    cache.replace_all([_topic("zeta", 3), _topic("alpha", 4)], revision=20)
    assert [t.name for t in cache.all()] == ["alpha", "zeta"]
    assert cache.get("stale") is None
    assert cache.revision == 20


def test_replace_all_never_moves_revision_backwards() -> None:
    cache = TopicCache()
    cache.remember(_topic("orders", 30))
    cache.replace_all([_topic("orders", 30)], revision=25)
    assert cache.revision == 30


def test_unknown_topic_is_none() -> None:
    assert TopicCache().get("missing") is None
    assert TopicCache().all() == []


def test_growth_watchers_hear_own_topics_growth_until_unwatch() -> None:
    cache = TopicCache()
    cache.remember(_topic("orders", 1, partitions=2))
    cache.remember(_topic("audit", 2, partitions=1))
    heard: list[int] = []
    unwatch = cache.watch_growth("orders", heard.append)
    cache.remember(_topic("orders", 3, partitions=2))  # retention change: same partition count
    cache.remember(_topic("audit", 4, partitions=5))  # another topic
    cache.remember(_topic("orders", 5, partitions=4))
    # after a lost watch
    cache.replace_all([_topic("orders", 7, partitions=6), _topic("audit", 4, partitions=5)], 7)
    cache.remember(_topic("orders", 6, partitions=9))  # stale event: ignored
    unwatch()
    cache.remember(_topic("orders", 8, partitions=10))
    assert heard == [4, 6]
