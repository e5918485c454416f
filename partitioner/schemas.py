"""Topic schema versions in etcd: one key per version of a topic incarnation, registered in order
and mirrored by every gateway through a watch."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from partitioner.errors import ConcurrentModification
from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import DEFAULT_PREFIX, WatchEvent
from partitioner.prefix_mirror import PrefixMirror
from partitioner.tasks import cancel_until_done

log = logging.getLogger(__name__)

COMPATIBILITY_MODES = ("backward", "backward_transitive", "forward", "forward_transitive", "full",
                       "full_transitive", "none")
MAX_REGISTER_ATTEMPTS = 16  # registrations racing this one, each winning a version first


@dataclass(frozen=True, slots=True)
class SchemaRecord:
    """One registered version of a topic's schema: ``version`` counts from 1 per topic incarnation
    (``topic_created_at_ms``); ``fingerprint`` is the SHA-256 of the schema's canonical JSON;
    ``migrations`` holds the declared ``upgrade`` (previous version to this one) and ``downgrade``
    (this one to the previous) operations, each direction absent when it cannot be done;
    ``event_types`` maps a CloudEvents ``type`` to a JSON pointer at its subschema (empty: every
    value is checked against the whole schema)."""

    topic: str
    topic_created_at_ms: int
    version: int
    schema: Mapping[str, Any]
    compatibility: str
    fingerprint: str
    created_at_ms: int
    created_by: str
    migrations: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    event_types: Mapping[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        """The stored JSON document."""
        return orjson.dumps({"topic": self.topic, "topic_created_at_ms": self.topic_created_at_ms,
                             "version": self.version, "schema": self.schema,
                             "compatibility": self.compatibility,
                             "fingerprint": self.fingerprint,
                             "created_at_ms": self.created_at_ms, "created_by": self.created_by,
                             "migrations": self.migrations, "event_types": self.event_types})

    @classmethod
    def decode(cls, raw: bytes) -> SchemaRecord | None:
        """The record in a stored document; None when it is not one (logged, never fatal)."""
        try:
            doc = orjson.loads(raw)
            return cls(str(doc["topic"]), int(doc["topic_created_at_ms"]), int(doc["version"]),
                       dict(doc["schema"]), str(doc["compatibility"]), str(doc["fingerprint"]),
                       int(doc["created_at_ms"]), str(doc["created_by"]),
                       dict(doc.get("migrations") or {}),
                       {str(name): str(pointer)
                        for name, pointer in (doc.get("event_types") or {}).items()})
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            log.warning("ignoring a malformed schema record: %r", raw[:200])
            return None


def fingerprint_of(schema: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the schema's canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)).hexdigest()


# raises when ``schema`` may not follow the earlier versions (oldest first) under the mode
CompatibilityCheck = Callable[[Sequence[SchemaRecord], str], None]
Incarnation = tuple[str, int]  # (topic, its created_at_ms)


def schemas_prefix(prefix: str) -> bytes:
    """Where every topic's schemas live under the key prefix ``prefix``."""
    return f"{prefix.rstrip('/')}/schemas/".encode()


def _incarnation_prefix(root: bytes, topic: str, created_at_ms: int) -> bytes:
    return root + f"{topic}/{created_at_ms}/".encode()


def _same_version(latest: SchemaRecord, fingerprint: str,
                  migrations: Mapping[str, Sequence[Mapping[str, Any]]],
                  event_types: Mapping[str, str]) -> bool:
    return (latest.fingerprint, latest.migrations, latest.event_types) == (
        fingerprint, migrations, event_types)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class SchemaRegistry:
    """Registers versions in etcd: ``<prefix>schemas/<topic>/<created_at_ms>/<version>``, each
    created only if absent, so two gateways registering at once get successive versions."""

    def __init__(self, conn: EtcdConnection, prefix: str = DEFAULT_PREFIX) -> None:
        self._conn = conn
        self._root = schemas_prefix(prefix)

    async def versions(self, topic: str, created_at_ms: int) -> list[SchemaRecord]:
        """Every version of the topic incarnation in etcd, oldest first."""
        snapshot = await self._conn.get_prefix(_incarnation_prefix(self._root, topic,
                                                                   created_at_ms))
        records = [r for kv in snapshot.values if (r := SchemaRecord.decode(kv.value))]
        return sorted(records, key=lambda record: record.version)

    async def register(self, topic: str, topic_created_at_ms: int, schema: Mapping[str, Any],
                       compatibility: str | None, created_by: str, check: CompatibilityCheck,
                       migrations: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
                       event_types: Mapping[str, str] | None = None,
                       ) -> tuple[SchemaRecord, bool]:
        """Register ``schema`` (with its ``migrations`` from the previous version and its
        ``event_types``) as the next version: (the record, whether it is new). A schema,
        migrations and event types identical to the latest's return the latest.
        ``compatibility`` None keeps the latest's mode (else backward). ``check`` sees every
        earlier version (none for a first one) and its error propagates; ConcurrentModification
        when other registrations kept winning the race."""
        fingerprint, migrations = fingerprint_of(schema), dict(migrations or {})
        types = dict(event_types or {})
        for _ in range(MAX_REGISTER_ATTEMPTS):
            previous = await self.versions(topic, topic_created_at_ms)
            if previous and _same_version(previous[-1], fingerprint, migrations, types):
                return previous[-1], False
            mode = compatibility or (previous[-1].compatibility if previous else "backward")
            if mode not in COMPATIBILITY_MODES:
                raise ValueError(f"unknown compatibility mode {mode!r}")
            check(previous, mode)
            record = SchemaRecord(topic, topic_created_at_ms, len(previous) + 1, schema, mode,
                                  fingerprint, _now_ms(), created_by, migrations, types)
            key = _incarnation_prefix(self._root, topic, topic_created_at_ms) + \
                f"{record.version:08d}".encode()
            # absent only while no other registration took this version number meanwhile
            if await self._conn.put_if_absent(key, record.encode()) is not None:
                return record, True
        raise ConcurrentModification(topic)

    async def forget_topic(self, topic: str) -> None:
        """Remove every schema of a deleted topic (each incarnation)."""
        await self._conn.delete_prefix(self._root + f"{topic}/".encode())


class SchemaMirror:
    """Every registered version, mirrored through a watch (async context manager: loads, then
    follows)."""

    def __init__(self, conn: EtcdConnection, prefix: str = DEFAULT_PREFIX) -> None:
        self._root = schemas_prefix(prefix)
        self._mirror = PrefixMirror(conn, self._root, self._changed)
        self._records: dict[Incarnation, dict[int, SchemaRecord]] = {}
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> SchemaMirror:
        await self._mirror.load()
        self._task = asyncio.create_task(self._mirror.follow(), name="schema-watch")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_until_done([task])

    @property
    def healthy(self) -> bool:
        """Whether the watch is established."""
        return self._mirror.healthy

    def latest(self, topic: str, created_at_ms: int) -> SchemaRecord | None:
        """The newest version of the topic incarnation; None: it has no schema."""
        versions = self._records.get((topic, created_at_ms))
        return versions[max(versions)] if versions else None

    def get(self, topic: str, created_at_ms: int, version: int) -> SchemaRecord | None:
        """One version; None when there is no such version."""
        return self._records.get((topic, created_at_ms), {}).get(version)

    def versions(self, topic: str, created_at_ms: int) -> list[SchemaRecord]:
        """Every version of the topic incarnation, oldest first."""
        versions = self._records.get((topic, created_at_ms), {})
        return [versions[number] for number in sorted(versions)]

    def remember(self, record: SchemaRecord) -> None:
        """Take a version this gateway just registered before the watch brings it."""
        key = (record.topic, record.topic_created_at_ms)
        self._records.setdefault(key, {})[record.version] = record

    def _changed(self, event: WatchEvent | None) -> None:
        if event is None:
            self._records = {}
            for stored in self._mirror.values.values():
                if (record := SchemaRecord.decode(stored.value)) is not None:
                    self.remember(record)
        elif event.kind == "delete":
            self._forget(event.key)
        elif (record := SchemaRecord.decode(event.value)) is not None:
            self.remember(record)

    def _forget(self, key: bytes) -> None:
        topic, _, rest = key[len(self._root):].decode(errors="replace").partition("/")
        created, _, version = rest.partition("/")
        if not (created.isdigit() and version.isdigit()):
            return
        versions = self._records.get((topic, int(created)), {})
        versions.pop(int(version), None)
        if not versions:
            self._records.pop((topic, int(created)), None)
