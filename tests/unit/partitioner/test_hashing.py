"""Kafka-compatible key placement: golden vectors pin the algorithm forever."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioner import _speedups
from partitioner._speedups.murmur2_py import murmur2 as murmur2_python
from partitioner._speedups.murmur2_py import partition_for as partition_for_python
from partitioner._speedups.murmur2_py import partitions_of as partitions_of_python
from partitioner._speedups.murmur2_py import to_positive
from partitioner.hashing import KeylessSpreader, murmur2, partition_for, partitions_of

# From Kafka's UtilsTest.testMurmur2: the UTF-8 bytes of each string and Java's signed result.
KAFKA_MURMUR2_VECTORS = [
    ("21", -973932308),
    ("foobar", -790332482),
    ("a-little-bit-long-string", -985981536),
    ("a-little-bit-longer-string", -1486304829),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    ("abc", 479470107),
]

# Computed once from the verified implementation; a change here moves data between partitions.
PINNED_PARTITIONS = [
    ("", (0, 0, 9)),
    ("a", (0, 1, 4)),
    ("ab", (0, 2, 2)),
    ("abc", (0, 0, 3)),
    ("user-1", (0, 2, 8)),
    ("user-42", (0, 1, 4)),
    ("order:1001", (0, 1, 10)),
    ("0", (0, 2, 8)),
    ("hello world", (0, 1, 7)),
    ("key-with-unicode-é", (0, 2, 8)),
    ("streamgate", (0, 0, 9)),
]
PARTITION_COUNTS = (1, 3, 12)


IMPLEMENTATIONS = [pytest.param((murmur2, partition_for), id="installed"),
                   pytest.param((murmur2_python, partition_for_python), id="python-reference")]


def test_the_compiled_hash_is_chosen_unless_switched_off(
        compiled_part: Callable[[str], ModuleType]) -> None:
    # setup.py builds it (optional, for machines without a compiler); a silent fallback would be
    # slow.
    compiled = compiled_part("partitioner._speedups._murmur2")
    chosen = ((murmur2_python, partition_for_python, partitions_of_python) if _speedups.OFF
              else (compiled.murmur2, compiled.partition_of, compiled.partitions_of))
    assert (murmur2, partition_for, partitions_of) == chosen


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize(("text", "expected"), KAFKA_MURMUR2_VECTORS)
def test_murmur2_matches_kafka_utils_test_vectors(
        text: str, expected: int, implementation: tuple[Callable[[bytes], int], Any]) -> None:
    assert implementation[0](text.encode("utf-8")) == expected


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize(("text", "expected"), PINNED_PARTITIONS)
def test_partition_for_matches_pinned_table(
    text: str, expected: tuple[int, ...], implementation: tuple[Any, Callable[[bytes, int], int]]
) -> None:
    actual = tuple(implementation[1](text.encode("utf-8"), n) for n in PARTITION_COUNTS)
    assert actual == expected


@settings(max_examples=2000, deadline=None)
@given(key=st.binary(max_size=300), partitions=st.integers(1, 100_000))
def test_compiled_hash_and_placement_equal_the_python_reference(
    key: bytes, partitions: int
) -> None:
    assert murmur2(key) == murmur2_python(key)
    assert partition_for(key, partitions) == partition_for_python(key, partitions)


@given(
    keys=st.lists(st.none() | st.binary(max_size=40), max_size=30), partitions=st.integers(1, 1000),
    keyless=st.integers(0, 999)
)
def test_partitions_of_a_key_list_are_each_keys_placement(keys: list[bytes | None], partitions: int,
                                                         keyless: int) -> None:
    expected = [keyless if key is None else partition_for_python(key, partitions) for key in keys]
    assert partitions_of(keys, partitions, keyless) == expected
    assert partitions_of_python(keys, partitions, keyless) == expected


def test_partitions_of_refuses_what_is_not_a_key() -> None:
    with pytest.raises(TypeError):
        partitions_of([b"a", "b"], 3, 0)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="partitions must be positive"):
        partitions_of([b"a"], 0, 0)


def test_murmur2_returns_signed_32_bit_values() -> None:
    results = [murmur2(f"key-{i}".encode()) for i in range(2000)]
    assert all(-(2**31) <= r < 2**31 for r in results)
    assert any(r < 0 for r in results)


def test_to_positive_clears_sign_bit_like_kafka() -> None:
    assert to_positive(-973932308) == -973932308 & 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(2**31 - 1) == 2**31 - 1
    assert to_positive(-1) == 2**31 - 1


def test_partition_for_uses_sign_bit_masking_not_abs() -> None:
    key = b"foobar"  # murmur2 is negative, so abs() would pick another partition
    assert partition_for(key, 7) == (-790332482 & 0x7FFFFFFF) % 7
    assert partition_for(key, 7) != abs(-790332482) % 7


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_partition_for_rejects_non_positive_partition_counts(
        implementation: tuple[Any, Callable[[bytes, int], int]]) -> None:
    with pytest.raises(ValueError, match="positive"):
        implementation[1](b"k", 0)
    with pytest.raises(ValueError, match="positive"):
        implementation[1](b"k", -3)


def test_partition_for_is_stable_across_hash_seeds() -> None:
    code = (
        "from partitioner.hashing import partition_for;"
        "print([partition_for(k.encode(), 12) for k in ('user-1', 'order:1001', 'streamgate')])"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    output = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            check=True).stdout.strip()
    assert output == str(
        [partition_for(k.encode(), 12) for k in ("user-1", "order:1001", "streamgate")]
    )


def test_keyless_batches_spread_evenly_within_five_percent() -> None:
    spreader = KeylessSpreader()
    partitions = 7
    counts = Counter(spreader.for_batch(partitions) for _ in range(1000))
    expected = 1000 / partitions
    assert set(counts) == set(range(partitions))
    assert all(abs(count - expected) <= 0.05 * expected for count in counts.values())


def test_keyless_next_partition_goes_round_robin() -> None:
    spreader = KeylessSpreader()
    assert [spreader.next_partition(3) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_keyless_spreader_follows_partition_count_changes() -> None:
    spreader = KeylessSpreader(start=5)
    assert spreader.for_batch(4) == 1
    assert spreader.for_batch(12) == 6
