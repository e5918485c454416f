"""Which partitions the source reads: the ``partitions`` option, or all of them as the gateway
reports."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from streamgate_spark.errors import InvalidSourceOption, TopicNotFound
from streamgate_spark.options import SourceOptions

GATEWAY_TIMEOUT_S = 10.0


def source_partitions(options: SourceOptions) -> tuple[int, ...]:
    """The explicit subset when given, else 0..N-1 from ``GET {gateway}/v1/topics/{topic}``."""
    if options.partitions is not None:
        return options.partitions
    assert options.gateway is not None  # parse_options requires one of the two
    return tuple(range(partition_count(options.gateway, options.topic)))


def snapshot_lag_ms(options: SourceOptions) -> int:
    """How old a snapshot may get: ``snapshotLagMs``, else the topic's compaction lag (its
    ``retention_ms``) from the gateway."""
    if options.snapshot_lag_ms is not None:
        return options.snapshot_lag_ms
    if options.gateway is None:
        raise InvalidSourceOption("snapshotLagMs", "startingOffsets=snapshot needs the topic's "
                                  "compaction lag: give 'snapshotLagMs' or 'gateway'")
    lag = topic_document(options.gateway, options.topic).get("retention_ms")
    if not isinstance(lag, int) or lag <= 0:
        raise InvalidSourceOption("gateway", "the gateway returned no retention_ms")
    return lag


def topic_document(gateway: str, topic: str, below: str = "") -> dict[str, object]:
    """``GET {gateway}/v1/topics/{topic}{below}`` (read on the driver); TopicNotFound on 404."""
    url = f"{gateway}/v1/topics/{urllib.parse.quote(topic, safe='')}{below}"
    try:
        with urllib.request.urlopen(url, timeout=GATEWAY_TIMEOUT_S) as response:
            doc = json.load(response)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise TopicNotFound(topic, gateway) from exc
        raise
    return doc if isinstance(doc, dict) else {}


def partition_count(gateway: str, topic: str) -> int:
    """The topic's partition count from the gateway (read once on the driver)."""
    doc = topic_document(gateway, topic)
    count = doc.get("partitions")
    if not isinstance(count, int) or count <= 0:
        raise InvalidSourceOption("gateway", f"{gateway} returned no partition count of {topic}")
    return count
