"""Key -> partition placement, byte-for-byte compatible with Kafka's default partitioner.

A keyed message goes to ``partition_for(key, partitions)``::

    to_positive(murmur2(key)) % partitions

where ``murmur2`` is exactly ``org.apache.kafka.common.utils.Utils.murmur2``: MurmurHash2 with seed
``0x9747b28c``, ``m = 0x5bd1e995``, ``r = 24``, the key read as little-endian 4-byte words, the 1-3
byte tail mixed in with switch fallthrough, and Java's wrapping 32-bit ``int`` arithmetic (``>>>``
is an unsigned shift). The result is returned as a signed 32-bit int, as Java returns it, and
``to_positive`` clears the sign bit (``n & 0x7fffffff``), as Kafka does.

Compatibility guarantee: for the same key bytes and partition count, streamgate picks the same
partition as a Kafka producer does. Placement is part of the data format: changing it would move
keys to other partitions and break per-key ordering for data already written. This module must
therefore never change behaviour; golden vectors from Kafka's own ``UtilsTest`` pin it
(tests/unit/partitioner/test_hashing.py).

``murmur2`` and ``partition_for`` are the C implementation in ``partitioner._murmur2`` (built by
setup.py; an order of magnitude cheaper per key) when it is installed, and ``murmur2_python``, the
reference, otherwise.

Keyless messages are spread by ``KeylessSpreader``: round-robin, sticky for a whole request batch.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from partitioner.native import refuse_if_off

__all__ = ["NATIVE", "KeylessSpreader", "murmur2", "murmur2_python", "partition_for",
           "partition_for_python", "partitions_of", "partitions_of_python", "to_positive"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK_32 = 0xFFFFFFFF
# Precompiled unpackers of n little-endian 32-bit words (keys up to 256 bytes skip the format
# string).
_UNPACK_WORDS = [struct.Struct(f"<{n}I").unpack_from for n in range(65)]


def murmur2_python(data: bytes) -> int:
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


def partition_for_python(key: bytes, partitions: int) -> int:
    """The partition index Kafka's default partitioner picks for a keyed record."""
    if partitions < 1:
        raise ValueError(f"partitions must be positive, got {partitions}")
    return to_positive(murmur2_python(key)) % partitions


def partitions_of_python(keys: list[bytes | None], partitions: int, keyless: int) -> list[int]:
    """``partition_for(key, partitions)`` of each key, ``keyless`` for a None key."""
    place = partition_for_python
    return [keyless if key is None else place(key, partitions) for key in keys]


try:
    refuse_if_off()
    from partitioner import _murmur2
except ImportError:  # built without a C compiler: the reference, same results
    NATIVE = False
    murmur2: Callable[[bytes], int] = murmur2_python
    partition_for: Callable[[bytes, int], int] = partition_for_python
    partitions_of: Callable[[list[bytes | None], int, int], list[int]] = partitions_of_python
else:
    NATIVE = True
    murmur2 = _murmur2.murmur2
    partition_for = _murmur2.partition_of
    partitions_of = _murmur2.partitions_of


class KeylessSpreader:
    """Round-robin placement for messages without a key.

    Sticky per batch: ``for_batch`` returns one partition for a whole request batch (one write per
    batch instead of one per partition) and advances per batch, so keyless traffic spreads evenly
    across partitions over many batches. Not thread-safe; one instance per event loop.
    """

    def __init__(self, start: int = 0) -> None:
        self._counter = start

    def next_partition(self, partitions: int) -> int:
        """The next partition in round-robin order, advancing the counter."""
        if partitions < 1:
            raise ValueError(f"partitions must be positive, got {partitions}")
        partition = self._counter % partitions
        self._counter += 1
        return partition

    def for_batch(self, partitions: int) -> int:
        """The one partition for every keyless message of a request batch."""
        return self.next_partition(partitions)
