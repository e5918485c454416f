"""Redis key layout of a partition (docs/architecture.md, Storage layout)."""

from __future__ import annotations

import functools

from redis.crc import key_slot

# Every key of one partition carries the same hash tag ``{<topic>/<p>}`` so that all of them live in
# one cluster slot: the append script can then touch the stream and its idempotency keys atomically
# in one call.

PREFIX = "sg"


def partition_tag(topic: str, partition: int) -> str:
    """The hash tag shared by every key of a partition, braces included."""
    return f"{{{topic}/{partition}}}"


def log_key(topic: str, partition: int) -> str:
    """The stream holding a partition's entries."""
    return f"{PREFIX}:{partition_tag(topic, partition)}:log"


def dedup_key(topic: str, partition: int, idempotency_key: str) -> str:
    """The idempotency marker of one message; its value is the offset of the first write."""
    return f"{PREFIX}:{partition_tag(topic, partition)}:dedup:{idempotency_key}"


def batch_dedup_key(topic: str, partition: int, batch_key: str) -> str:
    """The idempotency marker of a batch's records in one partition; its value is their offsets,
    space-separated. Apart from every per-message key (those start with a principal's scope)."""
    return f"{PREFIX}:{partition_tag(topic, partition)}:dedup:b:{batch_key}"


def dedup_prefix(topic: str, partition: int) -> str:
    """The common prefix of a partition's idempotency keys (dedup_prefix + key == dedup_key)."""
    return f"{PREFIX}:{partition_tag(topic, partition)}:dedup:"


def key_index_key(topic: str, partition: int, key: bytes) -> bytes:
    """A key's index: a stream of the offsets of the key's entries in the partition (same IDs)."""
    return b"%s:key:%s" % (_tagged(topic, partition), key)


# A key's identity within its key space (docs/security.md, "Key spaces"): the key itself in the
# empty space (unfiltered writers; data stored before spaces existed), else the marker, the space
# and the separator before the key. Published keys are UTF-8, which never holds the marker byte, so
# no key of the empty space can pass for a spaced one; a space holds no separator byte, so one
# space's identities never fall inside another's range, even where one space prefixes the other.
KEY_SPACE_MARKER = b"\xff"
KEY_SPACE_SEPARATOR = b"\x00"


def key_identity(space: bytes, key: bytes) -> bytes:
    """What a key's state (index, compaction, snapshot page) is kept under in ``space``."""
    if not space:
        return key
    if KEY_SPACE_SEPARATOR in space:
        raise ValueError("a key space holds no separator byte")
    return KEY_SPACE_MARKER + space + KEY_SPACE_SEPARATOR + key


def key_space_range(topic: str, partition: int, space: bytes) -> tuple[bytes, bytes]:
    """ZRANGEBYLEX bounds of the registry members (index names) of ``space``: every index for the
    empty space, else from the space's first identity (inclusive) to the next byte string after
    all of them (exclusive)."""
    if not space:
        return b"-", b"+"
    prefix = key_index_key(topic, partition, key_identity(space, b""))
    return b"[" + prefix, b"(" + prefix[:-1] + bytes([prefix[-1] + 1])


def key_registry_key(topic: str, partition: int) -> str:
    """The sorted set of a partition's key indexes, scored by the ms of each one's newest entry."""
    return f"{PREFIX}:{partition_tag(topic, partition)}:keys"


def compaction_key(topic: str, partition: int) -> str:
    """The set of a compacted partition's key indexes holding superseded offsets or a tombstone."""
    return f"{PREFIX}:{partition_tag(topic, partition)}:compact"


@functools.lru_cache(maxsize=16_384)
def _tagged(topic: str, partition: int) -> bytes:
    return f"{PREFIX}:{partition_tag(topic, partition)}".encode()


def parked_keys_key(topic: str, partition: int, group: str) -> str:
    """The hash of a key_shared group's parked keys on a partition: key -> "<offset> <since ms>"."""
    return f"{PREFIX}:{partition_tag(topic, partition)}:parked:{group}"


def delayed_key(topic: str, partition: int) -> str:
    """The sorted set of delayed messages' schedule ids (score = due time in ms)."""
    return f"{PREFIX}:{partition_tag(topic, partition)}:delayed"


def delayed_data_key(topic: str, partition: int) -> str:
    """The hash of delayed messages' encoded entries, keyed by schedule id."""
    return f"{PREFIX}:{partition_tag(topic, partition)}:delayed:data"


def delayed_seq_key(topic: str, partition: int) -> str:
    """The counter that numbers a partition's schedule ids."""
    return f"{PREFIX}:{partition_tag(topic, partition)}:delayed:seq"


def partition_keys_pattern(topic: str, partition: int) -> str:
    """A SCAN MATCH pattern for every key of a partition (glob metacharacters in the topic
    escaped)."""
    return f"{PREFIX}:{_glob_escape(partition_tag(topic, partition))}:*"


@functools.lru_cache(maxsize=16_384)
def slot_of(topic: str, partition: int) -> int:
    """The cluster slot that owns every key of a partition (memoized: every write and promote tick
    asks)."""
    return key_slot(log_key(topic, partition).encode())


def slot_of_key(key: str) -> int:
    """The cluster slot of any key (its hash tag decides, as Redis reads it)."""
    return key_slot(key.encode())


def _glob_escape(text: str) -> str:
    # SCAN MATCH uses glob syntax; a topic may legally contain these characters.
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)
