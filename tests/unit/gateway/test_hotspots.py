"""Heavy-hitter keys and hot-partition flags."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import hotspots
from gateway.hotspots import PublishStats, SpaceSaving


def test_space_saving_finds_every_key_above_one_kth_of_traffic() -> None:
    sketch = SpaceSaving(size=8)
    rng = random.Random(7)
    stream = [b"heavy-a"] * 3000 + [b"heavy-b"] * 2000 + [f"k{rng.randrange(5000)}".encode() for _ in range(5000)]
    rng.shuffle(stream)
    for key in stream:
        sketch.add(key)
    top = dict(sketch.top(2))
    assert set(top) == {b"heavy-a", b"heavy-b"}
    assert top[b"heavy-a"] >= 3000
    assert top[b"heavy-a"] - 3000 <= min(sketch.counts.values())


@settings(max_examples=300, deadline=None)
@given(stream=st.lists(st.sampled_from([b"k%d" % i for i in range(30)]), max_size=400), size=st.integers(1, 10))
def test_space_saving_keeps_its_guarantees_on_any_stream(stream: list[bytes], size: int) -> None:
    sketch = SpaceSaving(size=size)
    for key in stream:
        sketch.add(key)
    true = Counter(stream)
    assert len(sketch.counts) <= size
    assert sum(sketch.counts.values()) == len(stream)  # every occurrence is counted somewhere
    floor = min(sketch.counts.values(), default=0)
    for key, count in sketch.counts.items():
        assert true[key] <= count <= true[key] + floor  # over-estimates by at most the smallest counter
    for key, frequency in true.items():
        if frequency > len(stream) / size:
            assert key in sketch.counts


def test_partition_over_three_times_the_mean_is_flagged_hot() -> None:
    stats = PublishStats()
    stats.record("t", [0] * 900 + [1] * 25 + [2] * 25 + [3] * 25,
                 [b"hot-key"] * 900 + [b"x"] * 25 + [None] * 25 + [b"y"] * 25)
    heat = stats.heat("t", 4)
    assert [h.hot for h in heat] == [True, False, False, False]
    assert heat[0].top_keys[0] == ("hot-key", 900)
    assert heat[0].rate_per_s > heat[1].rate_per_s * 3


def test_even_traffic_flags_nothing_and_idle_topics_report_zero() -> None:
    stats = PublishStats()
    stats.record("t", [p for p in range(4) for _ in range(100)], [None] * 400)
    assert not any(h.hot for h in stats.heat("t", 4))
    assert [h.rate_per_s for h in stats.heat("idle", 2)] == [0.0, 0.0]


def test_a_batch_on_one_partition_counts_its_rate_and_keys_like_any_other() -> None:
    one, spread = PublishStats(), PublishStats()
    one.record("t", [2] * 5, [b"a", None, b"a", b"b", None])
    spread.record("t", [2] * 5 + [0], [b"a", None, b"a", b"b", None, b"z"])
    assert one.heat("t", 3)[2] == spread.heat("t", 3)[2]
    assert one.heat("t", 3)[2].top_keys == [("a", 2), ("b", 1)]
    assert one.heat("t", 3)[2].rate_per_s == 5 / 60
    one.record("t", [], [])  # an empty batch counts nothing
    assert one.heat("t", 3)[2].rate_per_s == 5 / 60


def test_the_compiled_sketch_counting_is_installed() -> None:
    assert hotspots.SKETCH_NATIVE, "gateway._sketch is not built: pip install -e . with gcc and the Python headers"
    assert hotspots.count_keys is not hotspots.count_keys_python


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 2), st.none() | st.sampled_from([b"k%d" % i for i in range(25)])),
                     max_size=300), size=st.integers(1, 8), chunk=st.integers(1, 50))
def test_compiled_counting_leaves_exactly_the_sketches_of_the_reference(
        rows: list[tuple[int, bytes | None]], size: int, chunk: int) -> None:
    compiled: dict[int, dict[bytes, int]] = {p: {} for p in range(3)}
    reference: dict[int, dict[bytes, int]] = {p: {} for p in range(3)}
    for start in range(0, len(rows), chunk):  # batch by batch, as publishes arrive
        partitions, keys = [p for p, _ in rows[start:start + chunk]], [k for _, k in rows[start:start + chunk]]
        hotspots.count_keys(compiled, size, partitions, keys)
        hotspots.count_keys_python(reference, size, partitions, keys)
    assert [list(compiled[p].items()) for p in range(3)] == [list(reference[p].items()) for p in range(3)]


@given(adds=st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]), st.integers(1, 2**70)),
                     max_size=40), size=st.integers(1, 4))
def test_compiled_weighted_add_equals_the_reference(adds: list[tuple[bytes, int]], size: int) -> None:
    compiled: dict[bytes, int] = {}
    reference: dict[bytes, int] = {}
    for key, weight in adds:
        hotspots.space_saving_add(compiled, size, key, weight)
        hotspots.space_saving_add_python(reference, size, key, weight)
    assert list(compiled.items()) == list(reference.items())


def test_compiled_counting_refuses_a_partition_without_a_sketch() -> None:
    with pytest.raises(KeyError):
        hotspots.count_keys({}, 4, [1], [b"k"])
    hotspots.count_keys({}, 4, [1], [None])  # no key, nothing to count
