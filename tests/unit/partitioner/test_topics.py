"""Topic validation rules, JSON round trip and PATCH semantics of TopicMetadata."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from partitioner.errors import InvalidTopic
from partitioner.topics import (
    DEFAULT_RETENTION_MS,
    MAX_PARTITIONS,
    Epoch,
    TopicMetadata,
    TopicSettings,
    validate_settings,
    validate_topic_name,
)


def _metadata(**changes: object) -> TopicMetadata:
    fields: dict[str, object] = {
        "name": "orders", "partitions": 3, "retention_ms": 1000, "max_length": None,
        "created_at_ms": 1_700_000_000_000, "owner": "alice", "version": 7
    }
    fields.update(changes)
    return TopicMetadata(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["orders", "a", "A.b_c-9", "x" * 200, "orders.dlq"])
def test_valid_topic_names_are_accepted(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize(
    "name", ["", "x" * 201, "has space", "slash/name", "uni-é", "star*", "{tag}"]
)
def test_invalid_topic_names_raise_invalid_topic_on_name(name: str) -> None:
    with pytest.raises(InvalidTopic) as excinfo:
        validate_topic_name(name)
    assert excinfo.value.field == "name"


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        (TopicSettings("ok", 0), "partitions"),
        (TopicSettings("ok", MAX_PARTITIONS + 1), "partitions"),
        (TopicSettings("ok", 1, retention_ms=0), "retention_ms"),
        (TopicSettings("ok", 1, max_length=0), "max_length"),
        (TopicSettings("bad name", 0), "name"),
    ],
)
def test_invalid_settings_name_the_first_offending_field(
    settings: TopicSettings, field: str
) -> None:
    with pytest.raises(InvalidTopic) as excinfo:
        validate_settings(settings)
    assert excinfo.value.field == field
    assert not excinfo.value.retriable


def test_defaults_are_14_days_retention_and_no_max_length() -> None:
    settings = TopicSettings("orders", 3)
    assert settings.retention_ms == DEFAULT_RETENTION_MS == 14 * 24 * 3600 * 1000
    assert settings.max_length is None
    validate_settings(settings)
    validate_settings(TopicSettings("orders", MAX_PARTITIONS, max_length=1))


def test_json_round_trip_keeps_fields_and_etcd_version() -> None:
    metadata = _metadata(max_length=500)
    restored = TopicMetadata.from_json(metadata.to_json(), version=42)
    assert restored == _metadata(max_length=500, version=42)
    assert b"version" not in metadata.to_json()


def test_with_changes_changes_retention() -> None:
    updated = _metadata().with_changes(retention_ms=5, max_length=None)
    assert (updated.retention_ms, updated.max_length) == (5, None)
    assert (updated.name, updated.owner, updated.version) == ("orders", "alice", 7)


def test_with_changes_keeps_unspecified_fields() -> None:
    original = _metadata(max_length=10)
    assert original.with_changes(retention_ms=None, max_length=None) == original


def test_growing_refuses_to_shrink_or_keep_partitions() -> None:
    for asked in (3, 4, MAX_PARTITIONS + 1):
        with pytest.raises(InvalidTopic) as excinfo:
            _metadata(partitions=4).growing(asked, now_ms=1)
        assert excinfo.value.field == "partitions"


def test_growth_pauses_records_old_partitions_fences_then_grows() -> None:
    growing = _metadata(partitions=2).growing(6, now_ms=1234)
    assert (growing.partitions, growing.growing_to, growing.growth_since_ms) == (2, 6, 1234)
    assert TopicMetadata.from_json(growing.to_json(), version=7) == growing
    fenced = growing.with_fences(["5-1", "0-0"])
    assert fenced.fenced
    assert not growing.fenced
    assert (fenced.partitions, fenced.epochs) == (2, (Epoch(2, 6, ("5-1", "0-0")),))
    assert TopicMetadata.from_json(fenced.to_json(), version=7) == fenced
    grown = fenced.grown()
    assert (grown.partitions, grown.growing_to, grown.growth_since_ms) == (6, None, None)
    assert not grown.fenced
    assert grown.epochs == fenced.epochs
    assert growing.growth_abandoned() == fenced.growth_abandoned() == _metadata(partitions=2)
    with pytest.raises(ValueError, match="fence per old partition"):
        growing.with_fences(["5-1"])
    with pytest.raises(ValueError, match="fenced growth"):
        growing.grown()


def test_epoch_names_old_partitions_whose_keys_may_move_in() -> None:
    doubled = Epoch(3, 6, ("1-0", "2-0", "3-0"))
    assert [doubled.sources(q) for q in range(6)] == [[], [], [], [0], [1], [2]]
    assert [doubled.fence(q) for q in (0, 2, 3, 5)] == ["1-0", "3-0", "0-0", "0-0"]
    uneven = Epoch(3, 4, ("1-0", "2-0", "3-0"))
    assert [uneven.sources(q) for q in range(4)] == [[1, 2], [0, 2], [0, 1], [0, 1, 2]]
    assert doubled.sources(6) == []


@given(st.integers(1, 40), st.integers(1, 40), st.integers(0, 10_000))
def test_every_key_that_moves_comes_from_a_named_source(before: int, extra: int, h: int) -> None:
    epoch = Epoch(before, before + extra, ("0-0",) * before)
    old, new = h % before, h % (before + extra)
    assert old == new or old in epoch.sources(new)


def test_with_changes_can_set_and_clear_max_length() -> None:
    with_limit = _metadata().with_changes(retention_ms=None, max_length=100)
    assert with_limit.max_length == 100
    cleared = with_limit.with_changes(retention_ms=None, max_length=None,
                                      clear_max_length=True)
    assert cleared.max_length is None


def test_with_changes_validates_the_result() -> None:
    with pytest.raises(InvalidTopic) as excinfo:
        _metadata().with_changes(retention_ms=0, max_length=None)
    assert excinfo.value.field == "retention_ms"
