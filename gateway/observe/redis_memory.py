"""Each Redis node's memory against its maxmemory as gauges, read from the store's memory watch
when Prometheus scrapes (nothing is kept twice)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from storage.memory import NodeMemory
from storage.wire.connection import NodeAddress

NodesMemory = Callable[[], Mapping[NodeAddress, NodeMemory]]


class RedisMemoryCollector(Collector):
    """``streamgate_redis_memory_{used,max}_bytes`` and ``..._headroom_ratio`` by node and role
    (headroom only where maxmemory is set)."""

    def __init__(self, nodes: NodesMemory) -> None:
        self._nodes = nodes

    def collect(self) -> Iterator[Metric]:
        labels = ["node", "role"]
        used = GaugeMetricFamily("streamgate_redis_memory_used_bytes",
                                 "Memory a Redis node uses (INFO used_memory) at the last poll",
                                 labels=labels)
        cap = GaugeMetricFamily("streamgate_redis_memory_max_bytes",
                                "A Redis node's maxmemory; 0 when unset (it grows until the "
                                "kernel kills it)", labels=labels)
        headroom = GaugeMetricFamily("streamgate_redis_memory_headroom_ratio",
                                     "1 - used/maxmemory of a Redis node: publishes are refused "
                                     "(507) once it falls below 1 - publish_memory_watermark",
                                     labels=labels)
        for (host, port), memory in sorted(self._nodes().items()):
            node = [f"{host}:{port}", memory.role]
            used.add_metric(node, memory.used_bytes)
            cap.add_metric(node, memory.max_bytes)
            if memory.max_bytes:
                headroom.add_metric(node, 1 - memory.used_bytes / memory.max_bytes)
        yield from (used, cap, headroom)
