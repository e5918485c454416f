"""Readiness and topology checks of a Redis Cluster node: parsing CLUSTER INFO / NODES / SHARDS
replies."""

from __future__ import annotations

from typing import Any, Protocol

import redis


class RedisNode(Protocol):
    """What the checks need of a node: its port and a client to it."""

    port: int

    def client(self, **kwargs: Any) -> redis.Redis: ...

SLOT_COUNT = 16384


def node_problem(node: RedisNode, node_count: int, primaries: int) -> tuple[str | None, str]:
    """(what is not ready yet or None, the role the node reports: master/slave)."""
    with node.client(socket_timeout=1.0) as conn:
        info = _parse_info(conn.execute_command("CLUSTER", "INFO"))
        view = _view_problem(str(conn.execute_command("CLUSTER", "NODES")), primaries)
        replication = conn.info("replication")
    role = str(replication.get("role"))
    if info.get("cluster_state") != "ok":
        return f"{node.port}: cluster_state={info.get('cluster_state')}", role
    if info.get("cluster_slots_assigned") != str(SLOT_COUNT):
        return f"{node.port}: cluster_slots_assigned={info.get('cluster_slots_assigned')}", role
    if info.get("cluster_known_nodes") != str(node_count):
        return f"{node.port}: cluster_known_nodes={info.get('cluster_known_nodes')}", role
    if role == "slave" and replication.get("master_link_status") != "up":
        return f"{node.port}: master_link_status={replication.get('master_link_status')}", role
    if view:
        return f"{node.port}: {view}", role
    return None, role


def _view_problem(cluster_nodes: str, primaries: int) -> str | None:
    """What is off in one node's CLUSTER NODES view: failure flags or a stale role (gossip still
    spreading).

    Replica votes in a failover are refused by primaries that still see the replica as a primary, so
    a ready cluster must agree on roles everywhere, not only on slots.
    """
    masters = 0
    for line in cluster_nodes.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        flags = set(fields[2].split(","))
        bad = flags & {"fail", "fail?", "handshake", "noaddr"}
        if bad:
            return f"sees {fields[1]} as {','.join(sorted(bad))}"
        masters += "master" in flags
    if masters != primaries:
        return f"sees {masters} primaries, expected {primaries}"
    return None


def _parse_info(raw: object) -> dict[str, str]:
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def owner_port(shards: object, slot: int) -> int | None:
    """Port of the primary serving `slot` in a CLUSTER SHARDS reply (RESP2 flat lists)."""
    if not isinstance(shards, list):
        return None
    for shard in shards:
        fields = _pairs(shard)
        ranges = fields.get("slots") or []
        bounds = [int(b) for b in ranges]
        if not any(lo <= slot <= hi for lo, hi in zip(bounds[::2], bounds[1::2], strict=True)):
            continue
        for node in fields.get("nodes") or []:
            attrs = _pairs(node)
            if attrs.get("role") == "master" and attrs.get("health") == "online":
                return int(attrs["port"])
    return None


def _pairs(flat: object) -> dict[str, Any]:
    if isinstance(flat, dict):
        return {str(k): v for k, v in flat.items()}
    if not isinstance(flat, list):
        return {}
    return {str(k): v for k, v in zip(flat[::2], flat[1::2], strict=True)}
