"""The cluster as the node registry and owner keys describe it: nodes by id with what they wrote,
owners by partition, keys and values it cannot read kept out or kept bare."""

from __future__ import annotations

import orjson

from partitioner.etcd.values import StoredValue
from partitioner.ownership_keys import NodeRecord, OwnershipKeys

KEYS = OwnershipKeys("/t/")


def stored(key: bytes, value: bytes) -> StoredValue:
    return StoredValue(key, value, create_revision=1, mod_revision=1, lease_id=7)


def test_view_lists_nodes_by_id_and_owners_by_partition() -> None:
    nodes = [stored(KEYS.node("b"), orjson.dumps({"node_id": "b", "started_at_ms": 20,
                                                   "address": "http://10.0.0.2:8080"})),
             stored(KEYS.node("a"), orjson.dumps({"node_id": "a", "started_at_ms": 10}))]
    owners = [stored(KEYS.owner(("orders", 0)), b"a"), stored(KEYS.owner(("a/b", 11)), b"b")]
    view = KEYS.view(nodes, owners)
    assert view.nodes == (NodeRecord("a", 10), NodeRecord("b", 20, "http://10.0.0.2:8080"))
    assert view.owners == {("orders", 0): "a", ("a/b", 11): "b"}


def test_a_node_whose_value_is_unreadable_is_still_listed_by_its_key() -> None:
    nodes = [stored(KEYS.node("x"), b"not json"), stored(KEYS.node("y"), b"[1]"),
             stored(KEYS.node("z"), orjson.dumps({"started_at_ms": "soon", "address": 5}))]
    assert KEYS.view(nodes, []).nodes == (NodeRecord("x"), NodeRecord("y"), NodeRecord("z"))


def test_keys_that_name_no_partition_are_not_owners() -> None:
    owners = [stored(KEYS.owners + b"orders/x", b"a"), stored(KEYS.owners + b"7", b"a")]
    assert KEYS.view([], owners).owners == {}


def test_a_node_record_reads_back_from_the_value_it_writes() -> None:
    record = NodeRecord("gw-1", 1_700_000_000_000, "https://gw-1.example:8443")
    assert KEYS.parse_node(stored(KEYS.node("gw-1"), record.value())) == record
    assert orjson.loads(NodeRecord("gw-2", 5).value()) == {"node_id": "gw-2", "started_at_ms": 5}
