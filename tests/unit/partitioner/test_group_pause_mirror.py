"""Group pauses as the watch reports them: decoded once per change, deletes and malformed
documents clearing the pause, each change named to the listeners."""

from __future__ import annotations

from typing import cast

from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import WatchEvent
from partitioner.group_pause import GroupPause, GroupPauses


def pauses_and_changes() -> tuple[GroupPauses, list[tuple[str, str] | None]]:
    pauses = GroupPauses(cast(EtcdConnection, None), prefix="/sg/")
    changes: list[tuple[str, str] | None] = []
    pauses.listen(changes.append)
    return pauses, changes


def event(pauses: GroupPauses, kind: str, value: bytes, revision: int) -> WatchEvent:
    return WatchEvent("put" if kind == "put" else "delete", pauses.key("orders", "billing"), value,
                      revision)


def test_a_put_pauses_and_a_delete_resumes_the_named_group() -> None:
    pauses, changes = pauses_and_changes()
    pause = GroupPause(1000, 5000, 42)
    pauses._mirror.apply(event(pauses, "put", pause.encode(), 2))
    assert pauses.of("orders", "billing") == pause
    assert pauses.of("orders", "other") is None
    pauses._mirror.apply(event(pauses, "delete", b"", 3))
    assert pauses.of("orders", "billing") is None
    assert changes == [("orders", "billing"), ("orders", "billing")]


def test_a_malformed_document_pauses_nothing() -> None:
    pauses, _ = pauses_and_changes()
    pauses._mirror.apply(event(pauses, "put", GroupPause(1000).encode(), 2))
    pauses._mirror.apply(event(pauses, "put", b'{"until_ms": "soon"}', 3))
    assert pauses.of("orders", "billing") is None


def test_a_document_without_the_topic_creation_time_reads_as_zero() -> None:
    assert GroupPause.decode(b'{"paused_at_ms": 7, "until_ms": null}') == GroupPause(7, None, 0)


def test_a_pause_holds_until_its_deadline() -> None:
    assert GroupPause(0, 100).active(99)
    assert not GroupPause(0, 100).active(100)
    assert GroupPause(0).active(10**15)
