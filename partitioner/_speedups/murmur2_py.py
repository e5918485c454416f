"""Kafka's partitioner hash in Python, the reference of the compiled ``_murmur2``: exactly
``org.apache.kafka.common.utils.Utils.murmur2`` and the default partitioner's placement
(partitioner.hashing says why it must never change; test_hashing.py pins the two together)."""

from __future__ import annotations

import struct

__all__ = ["murmur2", "partition_for", "partitions_of", "to_positive"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK_32 = 0xFFFFFFFF
# Precompiled unpackers of n little-endian 32-bit words (keys up to 256 bytes skip the format
# string).
_UNPACK_WORDS = [struct.Struct(f"<{n}I").unpack_from for n in range(65)]


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data`` as a signed 32-bit int (Java ``int``)."""
    length = len(data)
    word_count = length >> 2
    h = (_SEED ^ length) & _MASK_32
    # One struct call unpacks every full word; the loop below is the hot path per keyed message.
    words = _UNPACK_WORDS[word_count](data) if word_count < len(_UNPACK_WORDS) \
        else struct.unpack_from(f"<{word_count}I", data)
    m, mask = _M, _MASK_32
    for k in words:
        k = (k * m) & mask
        k ^= k >> _R
        h = ((h * m) & mask) ^ ((k * m) & mask)
    h = _mix_tail(h, data, word_count << 2, length & 3)
    h ^= h >> 13
    h = (h * _M) & _MASK_32
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def _mix_tail(h: int, data: bytes, tail_start: int, tail_length: int) -> int:
    """Mix the last 1-3 bytes in, as Java's ``switch`` with fallthrough does."""
    if tail_length == 0:
        return h
    if tail_length == 3:
        h ^= data[tail_start + 2] << 16
    if tail_length >= 2:
        h ^= data[tail_start + 1] << 8
    h ^= data[tail_start]
    return (h * _M) & _MASK_32


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit of a 32-bit int (not ``abs``)."""
    return n & 0x7FFFFFFF


def partition_for(key: bytes, partitions: int) -> int:
    """The partition index Kafka's default partitioner picks for a keyed record."""
    if partitions < 1:
        raise ValueError(f"partitions must be positive, got {partitions}")
    return to_positive(murmur2(key)) % partitions


def partitions_of(keys: list[bytes | None], partitions: int, keyless: int) -> list[int]:
    """``partition_for(key, partitions)`` of each key, ``keyless`` for a None key."""
    place = partition_for
    return [keyless if key is None else place(key, partitions) for key in keys]
