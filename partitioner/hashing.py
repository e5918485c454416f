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

``murmur2``, ``partition_for`` and ``partitions_of`` are the ones ``partitioner._speedups`` picks:
the C implementation (an order of magnitude cheaper per key) unless it is not built or switched off,
then the Python reference (``partitioner._speedups.murmur2_py``).

Keyless messages are spread by ``KeylessSpreader``: round-robin, sticky for a whole request batch.
"""

from __future__ import annotations

from partitioner._speedups import murmur2, partition_for, partitions_of

__all__ = ["KeylessSpreader", "murmur2", "partition_for", "partitions_of"]


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
