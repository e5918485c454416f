"""Rendezvous hashing: deterministic, even, and minimal movement when the node set changes."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from partitioner.rendezvous import desired_partitions, rendezvous_owner, rendezvous_weight

node_names = st.text(
    st.characters(codec="utf-8", exclude_characters="\0/"), min_size=1, max_size=12
)


def test_no_nodes_means_no_owner() -> None:
    assert rendezvous_owner([], "orders", 0) is None


def test_owner_does_not_depend_on_node_order() -> None:
    nodes = ["a", "b", "c", "d"]
    for p in range(50):
        assert rendezvous_owner(nodes, "orders", p) == rendezvous_owner(
            list(reversed(nodes)), "orders", p
        )


def test_weights_are_stable_across_processes() -> None:
    """Python's hash() is salted per process; the weight must not be."""
    code = (
        "from partitioner.rendezvous import rendezvous_weight; "
        "print(rendezvous_weight('node-1', 'orders', 7))"
    )
    other = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                           env={"PYTHONHASHSEED": "12345"})
    assert int(other.stdout) == rendezvous_weight("node-1", "orders", 7)


def test_weight_is_pinned() -> None:
    """Golden values: every gateway version must agree on placement during a rolling upgrade."""
    assert rendezvous_weight("node-1", "orders", 7) == 0xF0D75DE3456D61A2
    assert rendezvous_owner(["node-1", "node-2", "node-3"], "orders", 0) == "node-2"


def test_three_nodes_share_600_partitions_within_15_percent() -> None:
    nodes = ["gw-0", "gw-1", "gw-2"]
    counts = Counter(rendezvous_owner(nodes, "orders", p) for p in range(600))
    assert set(counts) == set(nodes)
    for node in nodes:
        assert 170 <= counts[node] <= 230, counts


def test_desired_partitions_covers_every_partition_exactly_once() -> None:
    nodes = ["a", "b", "c"]
    topics = {"orders": 12, "clicks": 5, "empty": 0}
    shares = [desired_partitions(nodes, topics, node) for node in nodes]
    union = set().union(*shares)
    assert len(union) == sum(len(share) for share in shares) == 17
    assert desired_partitions([], topics, "a") == frozenset(
        (t, p) for t, n in topics.items() for p in range(n)
    )


@settings(max_examples=60, deadline=None)
@given(nodes=st.lists(node_names, min_size=1, max_size=8, unique=True), newcomer=node_names,
       topic=st.sampled_from(["orders", "clicks", "a.b-c_d"]))
def test_adding_a_node_moves_only_partitions_to_the_newcomer(
    nodes: list[str], newcomer: str, topic: str
) -> None:
    if newcomer in nodes:
        return
    before = {p: rendezvous_owner(nodes, topic, p) for p in range(240)}
    after = {p: rendezvous_owner([*nodes, newcomer], topic, p) for p in range(240)}
    moved = [p for p in before if before[p] != after[p]]
    assert all(after[p] == newcomer for p in moved)  # nothing moves between old nodes
    expected = 240 / (len(nodes) + 1)
    assert len(moved) <= expected + 4 * expected ** 0.5 + 4  # ~1/N, with binomial slack


@settings(max_examples=60, deadline=None)
@given(nodes=st.lists(node_names, min_size=2, max_size=8, unique=True), data=st.data())
def test_removing_a_node_moves_only_its_own_partitions(
    nodes: list[str], data: st.DataObject
) -> None:
    gone = data.draw(st.sampled_from(nodes))
    survivors = [n for n in nodes if n != gone]
    for p in range(120):
        before = rendezvous_owner(nodes, "orders", p)
        after = rendezvous_owner(survivors, "orders", p)
        assert after == before or before == gone
