"""Topic validation rules, JSON round trip and PATCH semantics of TopicMetadata."""

from __future__ import annotations

import pytest

from partitioner.errors import InvalidTopic
from partitioner.topics import (
    DEFAULT_RETENTION_MS,
    MAX_PARTITIONS,
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


def test_settings_default_to_fourteen_days_retention_and_no_max_length() -> None:
    settings = TopicSettings("orders", 3)
    assert settings.retention_ms == DEFAULT_RETENTION_MS == 14 * 24 * 3600 * 1000
    assert settings.max_length is None
    validate_settings(settings)
    validate_settings(TopicSettings("orders", MAX_PARTITIONS, max_length=1))


def test_json_round_trip_keeps_fields_and_takes_version_from_etcd() -> None:
    metadata = _metadata(max_length=500)
    restored = TopicMetadata.from_json(metadata.to_json(), version=42)
    assert restored == _metadata(max_length=500, version=42)
    assert b"version" not in metadata.to_json()


def test_with_changes_grows_partitions_and_changes_retention() -> None:
    updated = _metadata().with_changes(partitions=6, retention_ms=5, max_length=None)
    assert (updated.partitions, updated.retention_ms, updated.max_length) == (6, 5, None)
    assert (updated.name, updated.owner, updated.version) == ("orders", "alice", 7)


def test_with_changes_keeps_unspecified_fields() -> None:
    original = _metadata(max_length=10)
    assert original.with_changes(partitions=None, retention_ms=None, max_length=None) == original


def test_with_changes_refuses_to_shrink_partitions() -> None:
    with pytest.raises(InvalidTopic) as excinfo:
        _metadata(partitions=4).with_changes(partitions=3, retention_ms=None, max_length=None)
    assert excinfo.value.field == "partitions"


def test_with_changes_can_set_and_clear_max_length() -> None:
    with_limit = _metadata().with_changes(partitions=None, retention_ms=None, max_length=100)
    assert with_limit.max_length == 100
    cleared = with_limit.with_changes(partitions=None, retention_ms=None, max_length=None,
                                      clear_max_length=True)
    assert cleared.max_length is None


def test_with_changes_validates_the_result() -> None:
    with pytest.raises(InvalidTopic) as excinfo:
        _metadata().with_changes(partitions=None, retention_ms=0, max_length=None)
    assert excinfo.value.field == "retention_ms"
