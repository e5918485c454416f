"""The push subscription records and ``streamgate push``'s pieces that need no gateway: a
partition no owner reported on reads None, and the table and header flag read as a person
writes them."""

from __future__ import annotations

import argparse

import pytest

from streamgate_client.admin_types import PartitionPushHealth, PushHealth
from streamgate_client.cli_args import request_header
from streamgate_client.cli_push import health_rows

HEALTH = {"state": "failing", "partitions": {
    "1": None,
    "0": {"node": "gw-1", "breaker": "open", "consecutive_failures": 3, "last_status": 503,
          "last_error": "push: HTTP 503", "last_success_ms": None,
          "last_failure_ms": 1700000000000, "in_flight": 0}}}


def test_a_partition_without_a_posted_health_reads_none_beside_typed_ones() -> None:
    health = PushHealth(HEALTH)
    assert health.partitions["1"] is None
    reported = health.partitions["0"]
    assert isinstance(reported, PartitionPushHealth)
    assert reported.breaker == "open"


def test_the_health_table_has_a_row_per_partition_in_order_with_dashes_for_the_unknown() -> None:
    assert health_rows(PushHealth(HEALTH).partitions) == [
        {"partition": "0", "node": "gw-1", "breaker": "open", "failures": 3, "last_status": 503,
         "last_error": "push: HTTP 503", "in_flight": 0},
        {"partition": "1", "node": "-", "breaker": "-", "failures": "-", "last_status": "-",
         "last_error": "", "in_flight": "-"}]


def test_a_header_flag_is_split_at_its_first_colon_and_one_without_is_refused() -> None:
    assert request_header("Authorization: Bearer a:b") == ("Authorization", "Bearer a:b")
    with pytest.raises(argparse.ArgumentTypeError):
        request_header("no colon")
