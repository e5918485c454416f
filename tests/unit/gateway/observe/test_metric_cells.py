"""The cell metrics expose exactly what prometheus_client's Counter and Histogram expose for the
same calls."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from gateway.observe.metric_cells import CellCounter, CellHistogram
from gateway.observe.metrics import LATENCY_BUCKETS_S

LABELS = st.sampled_from([("a", "x"), ("b", "x"), ("a", 'quote " and \\ backslash')])
AMOUNTS = st.one_of(
    st.sampled_from([*LATENCY_BUCKETS_S, 0.0, 11.0, 1e-9]), st.floats(0, 20, allow_nan=False)
)


def exposition(registry: CollectorRegistry) -> list[str]:
    """The text exposition without the ``_created`` samples (the cells do not export them)."""
    return [
        line for line in generate_latest(registry).decode().splitlines() if "_created" not in line
    ]


@given(calls=st.lists(st.tuples(LABELS, AMOUNTS), max_size=40))
def test_cell_counter_exposes_like_prometheus(calls: list[tuple[tuple[str, str], float]]) -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Counter(
        "streamgate_test_things_total", "Things, by a and b", ["a", "b"], registry=theirs
    )
    cells = CellCounter(
        "streamgate_test_things_total", "Things, by a and b", ["a", "b"], registry=ours
    )
    for labels, amount in calls:
        reference.labels(*labels).inc(amount)
        cells.labels(*labels).inc(amount)
    assert exposition(ours) == exposition(theirs)


@given(calls=st.lists(st.tuples(LABELS, AMOUNTS), max_size=40))
def test_cell_histogram_exposes_like_prometheus(calls: list[tuple[tuple[str, str], float]]) -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Histogram(
        "streamgate_test_wait_seconds", "Waits", ["a", "b"], buckets=LATENCY_BUCKETS_S,
        registry=theirs
    )
    cells = CellHistogram(
        "streamgate_test_wait_seconds", "Waits", ["a", "b"], LATENCY_BUCKETS_S, registry=ours
    )
    for labels, amount in calls:
        reference.labels(*labels).observe(amount)
        cells.labels(*labels).observe(amount)
    assert exposition(ours) == exposition(theirs)
