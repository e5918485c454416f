"""Counters and histograms for the request path, kept as plain cells and exported at scrape time.

prometheus_client guards every child with a lock and validates on each call (every increment,
observation and ``labels`` lookup), which the request path pays many times over. A gateway process
changes its metrics on one thread, its event loop's (scrapes included), so the hot metrics here are
plain Python cells: an increment is an attribute add, a labelled child one dict lookup. Each is a
registry collector that yields the same families, names, help texts, labels and buckets as the
prometheus_client metric it replaces; only the ``_created`` samples are not exported (nothing reads
them). Children are made on first use and never removed.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar, cast

from prometheus_client import CollectorRegistry, utils
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

# How prometheus_client writes a bucket's ``le`` (untyped there).
bucket_edge = cast(Callable[[float], str], utils.floatToGoString)
Child = TypeVar("Child")


class CounterCell:
    """One labelled child of a CellCounter."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        self.value += amount


class HistogramCell:
    """One labelled child of a CellHistogram: a count per bucket (the last one +Inf) and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        # the first bucket whose upper bound (le) holds it
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.sum += amount


class _Cells(Generic[Child]):
    """A labelled metric's children by label values (made on first use, never removed)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 new_child: Callable[[], Child]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._new_child = new_child
        self._children: dict[tuple[str, ...], Child] = {}

    def labels(self, *values: str) -> Child:
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
            child = self._children[values] = self._new_child()
        return child


class CellCounter(_Cells[CounterCell], Collector):
    """A counter (``name`` ends in ``_total``) whose children are CounterCells."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 registry: CollectorRegistry) -> None:
        super().__init__(name, documentation, labelnames, CounterCell)
        registry.register(self)

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in list(self._children.items()):
            family.add_metric(values, child.value)
        yield family


class CellHistogram(_Cells[HistogramCell], Collector):
    """A histogram with fixed upper bounds whose children are HistogramCells."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 buckets: Sequence[float], registry: CollectorRegistry) -> None:
        bounds = tuple(sorted(float(b) for b in buckets if b != float("inf")))
        super().__init__(name, documentation, labelnames, lambda: HistogramCell(bounds))
        self.bounds = bounds
        registry.register(self)

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        edges = [bucket_edge(bound) for bound in self.bounds] + ["+Inf"]
        for values, child in list(self._children.items()):
            cumulative, buckets = 0, []
            for edge, count in zip(edges, child.counts, strict=True):
                cumulative += count
                buckets.append((edge, cumulative))
            family.add_metric(list(values), buckets, child.sum)
        yield family
