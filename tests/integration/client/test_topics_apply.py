"""``streamgate topics apply -f FILE`` (what the chart's topics Job runs) as a user runs it: a
subprocess against a gateway process (conftest's ``served_gateway``), the topics read back through
the admin API."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
from served import json_lines, streamgate

from streamgate_client import Admin


def apply(base_url: str, path: Path, document: Any, *flags: str) -> tuple[int, list[Any], str]:
    """Write ``document`` to ``path`` and run ``topics apply`` on it: exit code, JSON lines,
    stderr."""
    path.write_bytes(orjson.dumps(document))
    done = streamgate("topics", "apply", "-f", str(path), *flags, "--url", base_url)
    return done.returncode, json_lines(done.stdout), done.stderr


def actions(lines: list[Any]) -> dict[str, list[str]]:
    """Topic -> the actions printed for it, in order."""
    found: dict[str, list[str]] = {}
    for line in lines:
        found.setdefault(line["topic"], []).append(line["action"])
    return found


def topics(base_url: str) -> dict[str, dict[str, Any]]:
    async def listed() -> dict[str, dict[str, Any]]:
        async with Admin(base_url) as admin:
            return {t.name: t.to_dict() for t in await admin.list_topics()}
    return asyncio.run(listed())


def test_apply_creates_grows_and_changes_retention_then_does_nothing_again(
        served_gateway: str, topic_name: str, tmp_path: Path) -> None:
    file = tmp_path / "topics.json"
    orders, ledger = f"{topic_name}-orders", f"{topic_name}-ledger"
    declared = [{"name": orders, "partitions": 2, "retention_ms": 60_000},
                {"name": ledger, "partitions": 1, "compact": True}]
    code, lines, err = apply(served_gateway, file, {"topics": declared})
    assert code == 0, err
    assert actions(lines) == {orders: ["create"], ledger: ["create"]}
    created = topics(served_gateway)
    assert (created[orders]["partitions"], created[orders]["retention_ms"]) == (2, 60_000)
    assert (created[ledger]["compact"], created[ledger]["key_index"]) == (True, True)

    declared[0] |= {"partitions": 4, "retention_ms": 120_000, "max_length": 500}
    code, lines, err = apply(served_gateway, file, {"topics": declared})
    assert code == 0, err
    assert actions(lines) == {orders: ["grow", "change"], ledger: ["unchanged"]}
    changed = topics(served_gateway)[orders]
    assert (changed["partitions"], changed["retention_ms"], changed["max_length"]) == (
        4, 120_000, 500)

    code, lines, err = apply(served_gateway, file, {"topics": declared})
    assert code == 0, err
    assert actions(lines) == {orders: ["unchanged"], ledger: ["unchanged"]}
    assert topics(served_gateway)[orders] == changed


def test_apply_refuses_to_shrink_or_unset_a_fixed_setting_and_applies_the_rest(
        served_gateway: str, topic_name: str, tmp_path: Path) -> None:
    file = tmp_path / "topics.json"
    code, _, err = apply(served_gateway, file, [{"name": topic_name, "partitions": 3}])
    assert code == 0, err
    shrink = [{"name": topic_name, "partitions": 1, "key_index": True, "retention_ms": 90_000}]
    code, lines, err = apply(served_gateway, file, shrink)
    assert code == 1
    assert actions(lines) == {topic_name: ["refused", "refused", "change"]}
    assert "partitions never shrink (declared 1, has 3)" in err
    assert "'key_index' is fixed when a topic is created" in err
    kept = topics(served_gateway)[topic_name]
    assert (kept["partitions"], kept["key_index"], kept["retention_ms"]) == (3, False, 90_000)


def test_apply_deletes_only_what_is_declared_absent_unless_asked(
        served_gateway: str, topic_name: str, tmp_path: Path) -> None:
    file = tmp_path / "topics.json"
    kept, gone, stray = (f"{topic_name}-{n}" for n in ("kept", "gone", "stray"))
    listed = [{"name": kept, "partitions": 1}, {"name": f"{kept}.dlq", "partitions": 1},
              {"name": gone, "partitions": 1}, {"name": stray, "partitions": 1}]
    assert apply(served_gateway, file, listed)[0] == 0

    declared = [{"name": kept, "partitions": 1}, {"name": gone, "state": "absent"}]
    code, lines, err = apply(served_gateway, file, declared)
    assert code == 0, err
    assert actions(lines) == {kept: ["unchanged"], gone: ["delete"]}
    after = topics(served_gateway)
    assert gone not in after
    assert {kept, f"{kept}.dlq", stray} <= set(after)

    code, lines, err = apply(served_gateway, file, {"topics": declared, "delete_unlisted": True},
                             "--dry-run")
    assert code == 0, err
    planned = actions(lines)
    assert planned[stray] == ["delete"]
    assert f"{kept}.dlq" not in planned
    assert all(line["dry_run"] for line in lines)
    assert {kept, f"{kept}.dlq", stray} <= set(topics(served_gateway))


def test_apply_rejects_a_file_with_an_unknown_field_before_changing_anything(
        served_gateway: str, topic_name: str, tmp_path: Path) -> None:
    file = tmp_path / "topics.json"
    code, lines, err = apply(served_gateway, file,
                             [{"name": topic_name, "partitions": 1, "retention": 5}])
    assert (code, lines) == (1, [])
    assert "unknown fields ['retention']" in err
    assert topic_name not in topics(served_gateway)
