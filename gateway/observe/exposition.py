"""What ``/metrics`` shows: the gateway's registry with message keys and group names left out unless
the settings expose them (the endpoint is often public, and keys and group names belong to the
tenants)."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

KEY_FAMILY = "streamgate_partition_top_key_messages"
GROUP_LABEL = "group"


@functools.lru_cache(maxsize=4096)  # every scrape names the same groups again
def group_pseudonym(group: str) -> str:
    """A stable stand-in for a group name in metric labels: the same on every replica and across
    restarts, so dashboards and alerts still tell groups apart; not a secret (a guessed name can be
    checked against it)."""
    if not group:  # broadcast deliveries have no group
        return group
    return "g-" + hashlib.sha256(group.encode()).hexdigest()[:12]


class RedactedMetrics(Collector):
    """A collector reading ``source`` and dropping the heavy-key family and/or replacing group label
    values."""

    def __init__(self, source: Collector, *, expose_keys: bool, expose_groups: bool) -> None:
        self._source = source
        self._expose_keys = expose_keys
        self._expose_groups = expose_groups

    def collect(self) -> Iterator[Metric]:
        """The source's families, redacted."""
        for family in self._source.collect():
            if family.name == KEY_FAMILY and not self._expose_keys:
                continue
            yield family if self._expose_groups else _pseudonymised(family)


def _pseudonymised(family: Metric) -> Metric:
    if not any(GROUP_LABEL in sample.labels for sample in family.samples):
        return family
    copy = Metric(family.name, family.documentation, family.type, family.unit)
    copy.samples = [
        sample._replace(labels={**sample.labels,
                                GROUP_LABEL: group_pseudonym(sample.labels[GROUP_LABEL])})
        if GROUP_LABEL in sample.labels else sample for sample in family.samples]
    return copy
