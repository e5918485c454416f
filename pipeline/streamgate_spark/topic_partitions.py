"""Which partitions the source reads: the ``partitions`` option, or all of them as the gateway
reports."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping

from streamgate_spark.errors import InvalidSourceOption, TopicNotFound
from streamgate_spark.options import SourceOptions

GATEWAY_TIMEOUT_S = 10.0

# what a refused read asks of the user (the credentials themselves are never shown)
AUTH_HINTS = {401: "; give the source 'apiKey' or 'token'",
              403: "; the principal of 'apiKey' or 'token' may not read this topic"}


def source_partitions(options: SourceOptions) -> tuple[int, ...]:
    """The explicit subset when given, else 0..N-1 from ``GET {gateway}/v1/topics/{topic}``."""
    if options.partitions is not None:
        return options.partitions
    assert options.gateway is not None  # parse_options requires one of the two
    return tuple(range(partition_count(options.gateway, options.topic,
                                       options.gateway_headers())))


def snapshot_lag_ms(options: SourceOptions) -> int:
    """How old a snapshot may get: ``snapshotLagMs``, else the topic's compaction lag (its
    ``retention_ms``) from the gateway."""
    if options.snapshot_lag_ms is not None:
        return options.snapshot_lag_ms
    if options.gateway is None:
        raise InvalidSourceOption("snapshotLagMs", "startingOffsets=snapshot needs the topic's "
                                  "compaction lag: give 'snapshotLagMs' or 'gateway'")
    lag = topic_document(options.gateway, options.topic,
                         headers=options.gateway_headers()).get("retention_ms")
    if not isinstance(lag, int) or lag <= 0:
        raise InvalidSourceOption("gateway", "the gateway returned no retention_ms")
    return lag


def topic_document(gateway: str, topic: str, below: str = "",
                   headers: Mapping[str, str] | None = None) -> dict[str, object]:
    """``GET {gateway}/v1/topics/{topic}{below}`` (read on the driver, with ``headers``);
    TopicNotFound on 404."""
    url = f"{gateway}/v1/topics/{urllib.parse.quote(topic, safe='')}{below}"
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=GATEWAY_TIMEOUT_S) as response:
            doc = json.load(response)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise TopicNotFound(topic, gateway) from exc
        if exc.code in AUTH_HINTS:
            raise InvalidSourceOption("gateway", f"{gateway} refused reading {topic!r} (HTTP "
                                      f"{exc.code}){AUTH_HINTS[exc.code]}") from None
        raise
    return doc if isinstance(doc, dict) else {}


def partition_count(gateway: str, topic: str, headers: Mapping[str, str] | None = None) -> int:
    """The topic's partition count from the gateway (read once on the driver)."""
    doc = topic_document(gateway, topic, headers=headers)
    count = doc.get("partitions")
    if not isinstance(count, int) or count <= 0:
        raise InvalidSourceOption("gateway", f"{gateway} returned no partition count of {topic}")
    return count
