"""How a consumer group is stored in etcd, parsed into typed values; the read-only admin helpers.

Layout under the prefix (default ``/streamgate/``), one directory per (topic, group):

- ``groups/<topic>/<group>/members/<member_id>``: leased by the member;
  ``{member_id, node, joined_at_ms}``.
- ``groups/<topic>/<group>/coordinator``: leased election key, created with
  ``create_revision == 0``; ``{member_id, lease_id}``.
- ``groups/<topic>/<group>/assignment``: ``{generation, owners: {member_id: [partitions]}, released:
  {partition: [member_id, generation]}}``; written only by the coordinator, in a transaction guarded
  on the coordinator key's create_revision. ``released`` names, for each partition taken from a live
  member and not handed on yet, that member and the generation that took it away.
- ``groups/<topic>/<group>/confirmed/<member_id>``: leased by the member; ``{generation}``, the
  newest generation whose assignment bounds what the member serves.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from partitioner.errors import InvalidGroup
from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import DEFAULT_PREFIX, Snapshot

__all__ = ["GroupKeys", "GroupState", "GroupView", "MemberInfo", "group_view", "list_groups",
           "validate_name"]

log = logging.getLogger(__name__)

MAX_NAME_LENGTH = 200
# partition -> (the member it was taken from, the generation that did)
Released = dict[int, tuple[str, int]]


def validate_name(value: str, field_name: str) -> None:
    """Topic, group and member names become key segments: non-empty, no ``/``, at most 200
    characters."""
    if not value or "/" in value or len(value) > MAX_NAME_LENGTH or not value.isprintable():
        raise InvalidGroup(f"{field_name} must be 1-{MAX_NAME_LENGTH} printable characters without "
                           "'/'", field_name)


def _groups_root(prefix: str) -> str:
    return prefix.rstrip("/") + "/groups/"


class GroupKeys:
    """The etcd keys of one group."""

    def __init__(self, prefix: str, topic: str, group: str) -> None:
        validate_name(topic, "topic")
        validate_name(group, "group")
        self.topic, self.group = topic, group
        self.root = f"{_groups_root(prefix)}{topic}/{group}/".encode()
        self.members = self.root + b"members/"
        self.confirmed_dir = self.root + b"confirmed/"
        self.coordinator = self.root + b"coordinator"
        self.assignment = self.root + b"assignment"

    def member(self, member_id: str) -> bytes:
        """The leased key announcing ``member_id``."""
        return self.members + member_id.encode()

    def confirmed(self, member_id: str) -> bytes:
        """The leased key holding the generation ``member_id`` has applied."""
        return self.confirmed_dir + member_id.encode()


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """A live member as it announced itself."""

    member_id: str
    node: str
    joined_at_ms: int

    def to_json(self) -> bytes:
        """The value of the member key."""
        return orjson.dumps({"member_id": self.member_id, "node": self.node,
                             "joined_at_ms": self.joined_at_ms})


@dataclass(frozen=True, slots=True)
class GroupState:
    """Everything stored for one group, read at one etcd ``revision``."""

    revision: int
    members: dict[str, MemberInfo] = field(default_factory=dict)
    generation: int = 0  # 0: no assignment written yet
    owners: dict[str, tuple[int, ...]] = field(default_factory=dict)
    assignment_mod_revision: int = 0  # 0: absent (a guard on "still absent")
    confirmed: dict[str, int] = field(default_factory=dict)
    coordinator: str | None = None
    coordinator_lease_id: int = 0
    coordinator_create_revision: int = 0
    released: Released | None = None  # None: written by a version that did not record releases


@dataclass(frozen=True, slots=True)
class GroupView:
    """A read-only picture of a group for admin endpoints."""

    topic: str
    group: str
    members: tuple[MemberInfo, ...]
    generation: int
    owners: Mapping[str, tuple[int, ...]]
    coordinator: str | None
    confirmed: Mapping[str, int]


def assignment_json(generation: int, owners: Mapping[str, tuple[int, ...]],
                    released: Released | None = None) -> bytes:
    """The value of the assignment key."""
    return orjson.dumps({"generation": generation,
                         "owners": {m: list(p) for m, p in owners.items()},
                         "released": {str(p): [m, g] for p, (m, g) in (released or {}).items()}},
                        option=orjson.OPT_SORT_KEYS)


def parse_released(raw: bytes) -> Released | None:
    """The ``released`` map of an assignment value (None when it has none)."""
    data = orjson.loads(raw).get("released")
    if data is None:
        return None
    return {int(p): (str(member), int(generation)) for p, (member, generation) in data.items()}


def parse_assignment(raw: bytes) -> tuple[int, dict[str, tuple[int, ...]]]:
    """(generation, owners) from an assignment value; ValueError/KeyError/TypeError when
    malformed."""
    data = orjson.loads(raw)
    owners = {str(member): tuple(sorted(int(p) for p in parts))
              for member, parts in data["owners"].items()}
    return int(data["generation"]), owners


def parse_state(keys: GroupKeys, snapshot: Snapshot) -> GroupState:
    """Type the raw keys of one group; unreadable values are logged and skipped."""
    fields: dict[str, Any] = {"members": {}, "confirmed": {}, "owners": {}}
    for stored in snapshot.values:
        try:
            _parse_one(keys, stored.key, stored.value, stored.mod_revision, stored.create_revision,
                       fields)
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring unreadable group value at %r", stored.key)
    return GroupState(revision=snapshot.revision, **fields)


def _parse_one(keys: GroupKeys, key: bytes, value: bytes, mod_revision: int, create_revision: int,
               fields: dict[str, Any]) -> None:
    if key.startswith(keys.members):
        data = orjson.loads(value)
        member_id = key[len(keys.members):].decode()
        fields["members"][member_id] = MemberInfo(member_id, str(data["node"]),
                                                  int(data["joined_at_ms"]))
    elif key.startswith(keys.confirmed_dir):
        fields["confirmed"][key[len(keys.confirmed_dir):].decode()] = int(
            orjson.loads(value)["generation"])
    elif key == keys.assignment:
        fields["generation"], fields["owners"] = parse_assignment(value)
        fields["released"] = parse_released(value)
        fields["assignment_mod_revision"] = mod_revision
    elif key == keys.coordinator:
        data = orjson.loads(value)
        fields["coordinator"] = str(data["member_id"])
        fields["coordinator_lease_id"] = int(data["lease_id"])
        fields["coordinator_create_revision"] = create_revision


async def read_state(conn: EtcdConnection, keys: GroupKeys) -> GroupState:
    """One consistent read of a group's keys."""
    return parse_state(keys, await conn.get_prefix(keys.root))


async def group_view(conn: EtcdConnection, *, topic: str, group: str,
                     prefix: str = DEFAULT_PREFIX) -> GroupView:
    """Members, current assignment, confirmations and coordinator of one group (empty if it never
    existed)."""
    state = await read_state(conn, GroupKeys(prefix, topic, group))
    members = tuple(state.members[name] for name in sorted(state.members))
    return GroupView(topic, group, members, state.generation, state.owners, state.coordinator,
                     state.confirmed)


async def list_groups(conn: EtcdConnection, *,
                      prefix: str = DEFAULT_PREFIX) -> list[tuple[str, str]]:
    """Every (topic, group) with anything stored, sorted."""
    root = _groups_root(prefix).encode()
    snapshot = await conn.get_prefix(root)
    found: set[tuple[str, str]] = set()
    for stored in snapshot.values:
        parts = stored.key[len(root):].decode(errors="replace").split("/")
        if len(parts) >= 3:
            found.add((parts[0], parts[1]))
    return sorted(found)
