"""An executor's reads of planned ranges share one cluster client between tasks, and a failed read
drops it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from streamgate_spark.errors import StreamgateDataLoss
from streamgate_spark.ranges import StreamRange, read_range
from streamgate_spark.streams import forget_cluster, kept_cluster

Publish = Callable[..., list[str]]

pytestmark = pytest.mark.spark


def _planned(redis_cluster: Any, topic: str, ids: list[str], first_id: str) -> StreamRange:
    return StreamRange(topic=topic, partition=0, start="0-0", end=ids[-1], first_id=first_id,
                       redis_nodes=tuple(redis_cluster.startup_nodes), page_size=2,
                       fail_on_data_loss=True)


def _offsets(planned: StreamRange) -> list[str]:
    return [offset for batch in read_range(planned) for offset in batch["offset"].to_pylist()]


def test_reads_of_ranges_share_one_client_and_a_failed_read_drops_it(
        redis_cluster: Any, publish: Publish, topic: str) -> None:
    ids = publish(topic, 0, 5)
    forget_cluster()
    assert _offsets(_planned(redis_cluster, topic, ids, ids[0])) == ids
    client = kept_cluster(tuple(redis_cluster.startup_nodes))
    assert _offsets(_planned(redis_cluster, topic, ids, ids[0])) == ids
    assert kept_cluster(tuple(redis_cluster.startup_nodes)) is client

    with pytest.raises(StreamgateDataLoss):
        _offsets(_planned(redis_cluster, topic, ids, "0-1"))  # a first entry no longer there
    assert kept_cluster(tuple(redis_cluster.startup_nodes)) is not client
    assert _offsets(_planned(redis_cluster, topic, ids, ids[0])) == ids
    forget_cluster()
