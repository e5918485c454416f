"""``status``'s cluster part from /v1/cluster's answer: the gateways and who owns each partition,
and what it says when an older gateway has no such route."""

from __future__ import annotations

import orjson

from streamgate_client.cli_status import NOT_EXPOSED, cluster_lines, cluster_part

CLUSTER = {"node_id": "gw-a", "version": "1.2.3",
           "nodes": [{"node_id": "gw-a", "address": None, "started_at_ms": 1},
                     {"node_id": "gw-b", "address": "http://10.0.0.2:8080", "started_at_ms": 2}],
           "topics": [{"name": "orders", "unowned": [3],
                       "partitions": [{"partition": 0, "owner": "gw-a"},
                                      {"partition": 1, "owner": "gw-b"},
                                      {"partition": 2, "owner": "gw-a"},
                                      {"partition": 3, "owner": None}]}]}


def test_status_counts_each_gateways_partitions_and_marks_the_one_asked() -> None:
    part = cluster_part((200, orjson.dumps(CLUSTER).decode()))
    assert [(g["node_id"], g["partitions_owned"], g["this"]) for g in part["gateways"]] == [
        ("gw-a", 2, True), ("gw-b", 1, False)]
    assert part["owners"] == [{"topic": "orders", "unowned": [3],
                               "owners": {"0": "gw-a", "1": "gw-b", "2": "gw-a", "3": None}}]


def test_status_table_lists_gateways_then_owners_per_topic() -> None:
    lines = cluster_lines(cluster_part((200, orjson.dumps(CLUSTER).decode())))
    assert lines[0] == "gateways  2 live"
    assert lines[1].split() == ["gw-a", "-", "2", "partitions", "(this", "gateway)"]
    assert lines[2].split() == ["gw-b", "http://10.0.0.2:8080", "1", "partitions"]
    assert lines[3:] == ["owners    1 topics", "  orders  gw-a: 0,2  gw-b: 1  unowned: 3"]


def test_status_json_and_table_carry_each_gateways_address_in_aligned_columns() -> None:
    long = "https://gateway-b.streaming.svc.cluster.local:8443"
    nodes = [CLUSTER["nodes"][0], {"node_id": "gw-b", "address": long, "started_at_ms": 2}]
    part = cluster_part((200, orjson.dumps({**CLUSTER, "nodes": nodes}).decode()))
    assert [g["address"] for g in part["gateways"]] == [None, long]
    first, second = cluster_lines(part)[1:3]
    assert second.split()[1] == long
    assert first.index("2 partitions") == second.index("1 partitions")


def test_status_of_a_gateway_without_the_cluster_route_keeps_saying_so() -> None:
    assert cluster_lines(cluster_part((404, ""))) == [f"gateways  {NOT_EXPOSED}"]
    assert cluster_lines(cluster_part((403, ""))) == ["gateways  /v1/cluster answered 403"]
