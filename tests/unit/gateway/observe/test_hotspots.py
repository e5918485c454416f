"""Heavy-hitter keys and hot-partition flags."""

from __future__ import annotations

import random
import sys
from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import _speedups
from gateway._speedups import sketch_py

# the compiled sketch itself, also when switched off
from gateway._speedups._sketch import SpaceSaving, count_batch
from gateway._speedups.sketch_py import Sketch
from gateway._speedups.sketch_py import SpaceSaving as SpaceSavingPython
from gateway.observe import hotspots
from gateway.observe.hotspots import PublishStats, top_keys

SKETCHES = [
    pytest.param(SpaceSaving, id="installed"),
    pytest.param(SpaceSavingPython, id="python-reference"),
]


@pytest.mark.parametrize("make", SKETCHES)
def test_space_saving_finds_every_key_above_one_kth_of_traffic(
    make: Callable[[int], Sketch],
) -> None:
    sketch = make(8)
    rng = random.Random(7)
    stream = (
        [b"heavy-a"] * 3000
        + [b"heavy-b"] * 2000
        + [f"k{rng.randrange(5000)}".encode() for _ in range(5000)]
    )
    rng.shuffle(stream)
    for key in stream:
        sketch.add(key)
    top = dict(top_keys(sketch, 2))
    assert set(top) == {b"heavy-a", b"heavy-b"}
    assert top[b"heavy-a"] >= 3000
    assert top[b"heavy-a"] - 3000 <= min(sketch.counts().values())


@pytest.mark.parametrize("make", SKETCHES)
@settings(max_examples=300, deadline=None)
@given(
    stream=st.lists(st.sampled_from([b"k%d" % i for i in range(30)]), max_size=400),
    size=st.integers(1, 10),
)
def test_space_saving_keeps_its_guarantees_on_any_stream(
    make: Callable[[int], Sketch], stream: list[bytes], size: int
) -> None:
    sketch = make(size)
    for key in stream:
        sketch.add(key)
    true, counts = Counter(stream), sketch.counts()
    assert len(counts) <= size
    assert sum(counts.values()) == len(stream)  # every occurrence is counted somewhere
    floor = min(counts.values(), default=0)
    for key, count in counts.items():
        # over-estimates by at most the smallest counter
        assert true[key] <= count <= true[key] + floor
    for key, frequency in true.items():
        if frequency > len(stream) / size:
            assert key in counts


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


def test_one_partition_batch_counts_rate_and_keys() -> None:
    one, spread = PublishStats(), PublishStats()
    one.record("t", [2] * 5, [b"a", None, b"a", b"b", None])
    spread.record("t", [2] * 5 + [0], [b"a", None, b"a", b"b", None, b"z"])
    assert one.heat("t", 3)[2] == spread.heat("t", 3)[2]
    assert one.heat("t", 3)[2].top_keys == [("a", 2), ("b", 1)]
    assert one.heat("t", 3)[2].rate_per_s == 5 / 60
    one.record("t", [], [])  # an empty batch counts nothing
    assert one.heat("t", 3)[2].rate_per_s == 5 / 60


def test_the_compiled_sketch_is_chosen_unless_switched_off() -> None:
    assert _speedups.SpaceSaving is (SpaceSavingPython if _speedups.OFF else SpaceSaving)
    assert _speedups.count_batch is (
        sketch_py.count_batch if _speedups.OFF else count_batch
    )


_KEYS = st.sampled_from([b"k%d" % i for i in range(25)] + [b"", b"k", b"k1\x00", b"\xff" * 3])


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 2), st.none() | _KEYS), max_size=300),
    size=st.integers(1, 8), chunk=st.integers(1, 50)
)
def test_compiled_batch_counting_equals_the_reference(
    rows: list[tuple[int, bytes | None]], size: int, chunk: int
) -> None:
    compiled = [SpaceSaving(size) for _ in range(3)]
    reference: list[Sketch] = [SpaceSavingPython(size) for _ in range(3)]
    for start in range(0, len(rows), chunk):  # batch by batch, as publishes arrive
        partitions, keys = (
            [p for p, _ in rows[start : start + chunk]],
            [k for _, k in rows[start : start + chunk]],
        )
        assert (
            count_batch(compiled, partitions, keys)
            == sketch_py.count_batch(reference, partitions, keys)
            == [partitions.count(p) for p in range(3)]
        )
    assert [s.counts() for s in compiled] == [s.counts() for s in reference]


@given(adds=st.lists(st.tuples(_KEYS, st.integers(1, 2**62)), max_size=40), size=st.integers(1, 4))
def test_compiled_weighted_add_matches_the_reference(
    adds: list[tuple[bytes, int]], size: int
) -> None:
    compiled, reference = SpaceSaving(size), SpaceSavingPython(size)
    for key, weight in adds:
        compiled.add(key, weight)
        reference.add(key, weight)
    assert compiled.counts() == reference.counts()
    assert all(count <= sketch_py.MAX_COUNT for count in compiled.counts().values())


@pytest.mark.parametrize(
    "count", [count_batch, sketch_py.count_batch], ids=["installed", "reference"]
)
def test_batch_without_a_sketch_counts_nothing(
    count: Callable[[list[Sketch], list[int], list[bytes | None]], list[int]],
) -> None:
    sketches = [SpaceSaving(4), SpaceSaving(4)]
    for partitions in ([0, 2], [0, -1]):
        with pytest.raises(IndexError):
            count(sketches, partitions, [b"a", b"b"])
    assert [s.counts() for s in sketches] == [{}, {}]
    assert count([], [], []) == []


@pytest.mark.parametrize("make", SKETCHES)
@pytest.mark.parametrize("bad", [0, -1, 4097])
def test_sketch_refuses_bad_sizes_and_weights(make: Callable[[int], Sketch], bad: int) -> None:
    with pytest.raises(ValueError, match="counters"):
        make(bad)
    sketch = make(2)
    with pytest.raises(ValueError, match="weight"):
        sketch.add(b"k", min(bad, 0))


def test_compiled_batch_counting_refuses_non_bytes() -> None:
    sketches = [SpaceSaving(4)]
    with pytest.raises(TypeError):
        count_batch(sketches, [0, 0], [b"a", "b"])  # type: ignore[list-item]
    assert sketches[0].counts() == {}


def test_a_new_partition_grows_the_topics_statistics() -> None:
    stats = PublishStats()
    stats.record("t", [0], [b"a"])
    stats.record("t", [5, 0], [b"b", b"a"])
    heat = stats.heat("t", 8)
    assert [h.top_keys for h in heat] == [[("a", 2)], [], [], [], [], [("b", 1)], [], []]
    stats.forget("t")
    assert [h.rate_per_s for h in stats.heat("t", 2)] == [0.0, 0.0]


def test_compiled_sketch_holds_its_keys_until_evicted_or_freed() -> None:
    # built at run time: not shared constants
    evicted, kept = b"evicted-" + bytes(8), b"kept-" + bytes(8)
    before = sys.getrefcount(evicted), sys.getrefcount(kept)
    sketch = SpaceSaving(1)
    sketch.add(evicted)
    assert sys.getrefcount(evicted) == before[0] + 1
    sketch.add(kept, 5)
    assert (sys.getrefcount(evicted), sys.getrefcount(kept)) == (before[0], before[1] + 1)
    assert sketch.counts() == {kept: 6}  # the floor (1) plus its weight
    del sketch
    assert sys.getrefcount(kept) == before[1]


def test_rates_sum_a_minute_of_batches_and_forget_older_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.2]
    monkeypatch.setattr(hotspots.time, "monotonic", lambda: clock[0])
    stats = PublishStats()
    stats.record("t", [0, 0, 1], [None] * 3)
    stats.record("t", [0, 3], [None] * 2)  # the topic grows within the same second
    clock[0] = 1030.9
    stats.record("t", [1] * 6, [None] * 6)
    assert [h.rate_per_s for h in stats.heat("t", 4)] == [3 / 60, 7 / 60, 0.0, 1 / 60]
    clock[0] = 1060.0  # the first second has left the 60 s window
    assert [h.rate_per_s for h in stats.heat("t", 4)] == [0.0, 6 / 60, 0.0, 0.0]
    clock[0] = 1091.0
    assert [h.rate_per_s for h in stats.heat("t", 5)] == [0.0] * 5
