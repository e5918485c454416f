"""``topics apply -f FILE``: bring the gateway's topics to a declared list, idempotently (what the
chart's topics Job runs): create missing topics, grow partitions, change retention and length;
never shrink, and delete only what is marked absent or, when asked, what is unlisted."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from streamgate_client.admin import Admin
from streamgate_client.admin_types import Topic
from streamgate_client.cli_contexts import connection
from streamgate_client.errors import ClientError
from streamgate_client.output import emit

SPEC_FIELDS = frozenset({"name", "partitions", "retention_ms", "max_length", "key_index",
                         "compact", "state"})
CHANGEABLE = ("retention_ms", "max_length")
FIXED = ("key_index", "compact")
DEAD_LETTERS = ".dlq"


@dataclass(frozen=True)
class TopicSpec:
    """One declared topic; a setting left out (absent from ``settings``) is not managed."""

    name: str
    partitions: int | None
    settings: Mapping[str, Any] = field(default_factory=dict)
    absent: bool = False


@dataclass(frozen=True)
class Step:
    """One thing ``apply`` does (or refuses) to one topic; ``changes`` is the request's body."""

    topic: str
    action: str  # create, grow, change, delete, unchanged or refused
    changes: Mapping[str, Any] = field(default_factory=dict)
    reason: str = ""

    def document(self) -> dict[str, Any]:
        """The JSON line printed for this step."""
        found: dict[str, Any] = {"topic": self.topic, "action": self.action}
        if self.changes:
            found["changes"] = dict(self.changes)
        if self.reason:
            found["reason"] = self.reason
        return found


def parse_specs(document: Any) -> tuple[list[TopicSpec], bool]:
    """The declared topics and ``delete_unlisted`` of a topics file: ``{"topics": [...],
    "delete_unlisted": false}`` or a bare list; ValueError names the first bad entry."""
    if isinstance(document, list):
        document = {"topics": document}
    if not isinstance(document, dict) or not isinstance(document.get("topics", []), list):
        raise ValueError("a topics file holds a list of topics or {\"topics\": [...]}")
    delete_unlisted = document.get("delete_unlisted", False)
    if not isinstance(delete_unlisted, bool):
        raise ValueError("'delete_unlisted' must be true or false")
    specs = [parse_spec(entry) for entry in document.get("topics", [])]
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        twice = sorted({name for name in names if names.count(name) > 1})
        raise ValueError(f"topics declared twice: {twice}")
    return specs, delete_unlisted


def parse_spec(entry: Any) -> TopicSpec:
    """One entry of a topics file, checked field by field (a typo is an error, not a no-op)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
        raise ValueError(f"each topic needs a 'name': {entry!r}")
    name = entry["name"]
    unknown = sorted(set(entry) - SPEC_FIELDS)
    if unknown:
        raise ValueError(f"topic {name}: unknown fields {unknown} (known: {sorted(SPEC_FIELDS)})")
    state = entry.get("state", "present")
    if state not in ("present", "absent"):
        raise ValueError(f"topic {name}: 'state' is present or absent, not {state!r}")
    partitions = entry.get("partitions")
    if partitions is None and state == "present":
        raise ValueError(f"topic {name}: 'partitions' is required")
    for number in ("partitions", "retention_ms", "max_length"):
        _check_count(name, number, entry.get(number))
    for flag in FIXED:
        if not isinstance(entry.get(flag, False), bool):
            raise ValueError(f"topic {name}: '{flag}' must be true or false")
    settings = {key: entry[key] for key in (*CHANGEABLE, *FIXED) if key in entry}
    return TopicSpec(name, partitions, settings, absent=state == "absent")


def _check_count(topic: str, name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"topic {topic}: '{name}' must be a whole number of at least 1")


def plan(specs: Sequence[TopicSpec], existing: Mapping[str, Mapping[str, Any]],
         delete_unlisted: bool = False) -> list[Step]:
    """The steps that bring ``existing`` (name -> the gateway's topic document) to ``specs``."""
    steps = [step for spec in specs for step in _steps_for(spec, existing.get(spec.name))]
    kept = {spec.name for spec in specs if not spec.absent}
    for name in sorted(set(existing) - {spec.name for spec in specs}):
        if name.endswith(DEAD_LETTERS) and name[:-len(DEAD_LETTERS)] in kept:
            continue  # the dead letters of a declared topic belong to it
        if delete_unlisted:
            steps.append(Step(name, "delete", reason="not listed (delete_unlisted)"))
    return steps


def _steps_for(spec: TopicSpec, current: Mapping[str, Any] | None) -> list[Step]:
    if spec.absent:
        return [Step(spec.name, "delete" if current else "unchanged", reason="state: absent")]
    if current is None:
        return [Step(spec.name, "create", {"partitions": spec.partitions, **spec.settings})]
    steps = [Step(spec.name, "refused", reason=f"'{flag}' is fixed when a topic is created "
                  f"(declared {spec.settings[flag]}, is {bool(current.get(flag))}); recreate it "
                  "to change it")
             for flag in FIXED if flag in spec.settings
             and spec.settings[flag] != bool(current.get(flag))]
    steps.extend(_partition_steps(spec, current))
    changes = {key: spec.settings[key] for key in CHANGEABLE
               if key in spec.settings and spec.settings[key] != current.get(key)}
    if changes:
        steps.append(Step(spec.name, "change", changes))
    return steps or [Step(spec.name, "unchanged")]


def _partition_steps(spec: TopicSpec, current: Mapping[str, Any]) -> list[Step]:
    has = int(current.get("growing_to") or current["partitions"])
    if spec.partitions is None or spec.partitions == has:
        return []
    if spec.partitions < has:
        return [Step(spec.name, "refused", reason=f"partitions never shrink (declared "
                     f"{spec.partitions}, has {has}): a key's messages would change partition")]
    return [Step(spec.name, "grow", {"partitions": spec.partitions})]


async def run_step(admin: Admin, step: Step) -> None:
    """Do one planned step through the admin API (refused and unchanged steps do nothing)."""
    changes = dict(step.changes)
    if step.action == "create":
        await admin.create_topic(step.topic, changes.pop("partitions"), **changes)
    elif step.action == "grow":
        await admin.grow_topic(step.topic, changes["partitions"])
    elif step.action == "change":
        await admin.update_topic(step.topic, retention_ms=changes.get("retention_ms"),
                                 max_length=changes.get("max_length"),
                                 clear_max_length="max_length" in changes
                                 and changes["max_length"] is None)
    elif step.action == "delete":
        await admin.delete_topic(step.topic)


async def current_topics(admin: Admin, wait_s: float) -> dict[str, Mapping[str, Any]]:
    """The gateway's topics by name, retrying for up to ``wait_s`` while it cannot answer yet
    (a Job started beside a gateway that is still starting)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            topics: list[Topic] = await admin.list_topics()
            return {topic.name: topic for topic in topics}
        except ClientError as exc:
            if not exc.retriable or time.monotonic() >= deadline:
                raise
            print(f"streamgate topics apply: waiting for the gateway: {exc}", file=sys.stderr)
            await asyncio.sleep(2)


async def apply(args: argparse.Namespace) -> int:
    """``topics apply -f FILE``: a JSON line per step; 1 when a step was refused (the others are
    still applied), so a Job that cannot reach the declared state fails visibly."""
    text = await asyncio.to_thread(Path(args.file).read_bytes)
    specs, delete_unlisted = parse_specs(orjson.loads(text))
    async with Admin(args.url, **connection(args)) as admin:
        existing = await current_topics(admin, args.wait_s)
        steps = plan(specs, existing, delete_unlisted or args.delete_unlisted)
        for step in steps:
            if step.action == "refused":
                print(f"streamgate topics apply: refused {step.topic}: {step.reason}",
                      file=sys.stderr)
            elif not args.dry_run:
                await run_step(admin, step)
            emit({**step.document(), "dry_run": True} if args.dry_run else step.document())
    return 1 if any(step.action == "refused" for step in steps) else 0
