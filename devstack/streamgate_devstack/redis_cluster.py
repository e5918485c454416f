"""A local Redis Cluster of `redis-server` children: created once with `redis-cli --cluster create`,
its port layout kept in `<data_dir>/cluster.json` so a restart keeps its data (AOF), and scaled out
under load by `add_shard()` (a new primary with replicas, then a rebalance)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from streamgate_devstack._process import (
    STOP_TIMEOUT_S,
    StartedInWith,
    require_binary,
    terminate_all,
    wait_until,
)
from streamgate_devstack.cluster_state import node_problem, owner_port
from streamgate_devstack.errors import DevStackError, LayoutMismatchError
from streamgate_devstack.ports import free_ports
from streamgate_devstack.redis_cli import (
    add_primary,
    is_consistent,
    rebalance_onto_empty_primaries,
    run_cluster_command,
)
from streamgate_devstack.redis_node import PROBE_ERRORS, RedisClusterConfig, RedisNode, Role

# the config lives with the nodes it starts; callers still take it from the cluster module
__all__ = ["BUS_PORT_OFFSET", "LAYOUT_FILE", "RedisClusterConfig", "RedisClusterProcess"]

LAYOUT_FILE = "cluster.json"
BUS_PORT_OFFSET = 10000


class RedisClusterProcess(StartedInWith):
    """A local Redis Cluster (`primaries` x (1 + `replicas_per_primary`) nodes) held as child
    processes.

    Use as a context manager or call start()/stop(). stop() is idempotent and leaves no process
    behind.
    """

    def __init__(self, config: RedisClusterConfig) -> None:
        self.config = config
        self._nodes: list[RedisNode] = []
        # Shards now and at creation; they differ after add_shard() (also across restarts, via the
        # layout).
        self._primary_count = config.primaries
        self._initial_primaries = config.primaries

    @property
    def nodes(self) -> list[RedisNode]:
        """All nodes, primaries first (roles as of the last start or wait_ready)."""
        return list(self._nodes)

    @property
    def primaries(self) -> list[RedisNode]:
        """Nodes whose role was primary at the last start or wait_ready."""
        return [node for node in self._nodes if node.role == "primary"]

    @property
    def replicas(self) -> list[RedisNode]:
        """Nodes whose role was replica at the last start or wait_ready."""
        return [node for node in self._nodes if node.role == "replica"]

    @property
    def shard_count(self) -> int:
        """Number of primaries the cluster has now (config.primaries plus shards added since
        creation)."""
        return self._primary_count

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        """(host, port) of every node, for a cluster client's startup nodes."""
        return [node.address for node in self._nodes]

    @property
    def layout_path(self) -> Path:
        """Where the port layout of the created cluster is recorded."""
        return self.config.data_dir / LAYOUT_FILE

    def node_at(self, port: int) -> RedisNode:
        """The node listening on `port`."""
        for node in self._nodes:
            if node.port == port:
                return node
        raise KeyError(port)

    def client(self, **kwargs: Any) -> RedisCluster:
        """A new sync cluster client (decode_responses=True unless overridden); the caller closes
        it."""
        options: dict[str, Any] = {"decode_responses": True, **self.config.client_tls_options()}
        options.update(kwargs)
        nodes = [ClusterNode(host, port)  # type: ignore[no-untyped-call]
                 for host, port in self.startup_nodes]
        return RedisCluster(startup_nodes=nodes, **options)

    def primary_for_key(self, key: str | bytes) -> RedisNode:
        """The node currently serving the slot of `key`, asked from the first node that answers."""
        slot = key_slot(key.encode() if isinstance(key, str) else key)
        for node in self._nodes:
            try:
                with node.client(socket_timeout=1.0) as conn:
                    ranges = conn.execute_command("CLUSTER", "SHARDS")
            except PROBE_ERRORS:
                continue
            port = owner_port(ranges, slot)
            if port is not None:
                return self.node_at(port)
        raise DevStackError(f"no live node knows the owner of slot {slot}")

    def start(self) -> None:
        """Start every node; create the cluster on first use; wait until it is fully ready."""
        server = require_binary("redis-server")
        cli = self.config.cli_argv(require_binary("redis-cli"))
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            layout = self._load_layout()
            created = layout is not None
            self._nodes = self._build_nodes(layout, server)
            if not created:
                self._wipe_node_dirs()
            for node in self._nodes:
                node.start()
            if not created:
                self._create(cli)
            self.wait_ready(self.config.startup_timeout_s)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM every node at once, wait, SIGKILL stragglers. Idempotent."""
        terminate_all([node.process for node in self._nodes], timeout_s)

    def restart(self) -> None:
        """Stop every node and start again with the same data."""
        self.stop()
        self.start()

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Wait until all nodes report cluster_state:ok with all slots and every replica's link is
        up.

        Refreshes each node's `role` from what it reports. Raises StartupTimeoutError with the log
        tail.
        """
        timeout = self.config.startup_timeout_s if timeout_s is None else timeout_s
        what = f"Redis Cluster {self.startup_nodes}"
        wait_until(what, self._readiness_problem, timeout, [node.process for node in self._nodes])
        for node in self._nodes:
            node.role = node.current_role()
        if self.config.replicas_per_primary:
            wait_until(f"{what} replicas acknowledging WAIT", self._replication_problem, timeout,
                       [node.process for node in self._nodes])

    def _replication_problem(self) -> str | None:
        """Linked replicas may still answer WAIT with 0 for ~1 s after a full sync; probe with a
        real write."""
        with self.client() as cluster:
            for index, node in enumerate(self.primaries):
                key = _key_served_by(cluster, node.port, index)
                with node.client() as direct:
                    pipe = direct.pipeline(transaction=False)
                    pipe.set(key, "1", px=5000)
                    pipe.execute_command("WAIT", self.config.replicas_per_primary, 200)
                    acknowledged = pipe.execute()[-1]
                if int(acknowledged) < self.config.replicas_per_primary:
                    return f"primary {node.port}: WAIT acknowledged by {acknowledged} replicas"
        return None

    def _readiness_problem(self) -> str | None:
        roles: list[str] = []
        for node in self._nodes:
            try:
                problem, role = node_problem(node, len(self._nodes), self._primary_count)
            except PROBE_ERRORS as exc:
                return f"{node.port} not answering: {exc}"
            if problem:
                return problem
            roles.append(role)
        if roles.count("master") != self._primary_count:
            return f"{roles.count('master')} primaries, expected {self._primary_count}"
        return None

    def _build_nodes(self, layout: list[dict[str, Any]] | None, server: str) -> list[RedisNode]:
        if layout is None:
            layout = self._new_layout()
        return [RedisNode(self.config, int(n["port"]), int(n["bus_port"]), n["role"], server)
                for n in layout]

    def _new_layout(self) -> list[dict[str, Any]]:
        count = self.config.node_count
        base = self.config.base_port
        if not base:  # None or 0: free ports
            ports = free_ports(2 * count)
            pairs = list(zip(ports[:count], ports[count:], strict=True))
        else:
            pairs = [(base + i, base + BUS_PORT_OFFSET + i) for i in range(count)]
        return [
            {
                "port": port,
                "bus_port": bus,
                "role": "primary" if i < self.config.primaries else "replica",
            }
            for i, (port, bus) in enumerate(pairs)
        ]

    def _load_layout(self) -> list[dict[str, Any]] | None:
        if not self.layout_path.exists():
            return None
        data = json.loads(self.layout_path.read_text())
        if not data.get("created"):
            return None
        primaries, replicas = data.get("primaries"), data.get("replicas_per_primary")
        initial = data.get("initial_primaries", primaries)
        # A scaled-out cluster still matches the shape it was created with: the added shards are
        # kept.
        if replicas != self.config.replicas_per_primary or self.config.primaries not in (
            primaries,
            initial,
        ):
            raise LayoutMismatchError(
                f"{self.config.data_dir} holds a cluster of {primaries} primaries x {replicas} "
                f"replicas; requested {self.config.primaries} x {self.config.replicas_per_primary}."
                " Use another data dir or delete this one."
            )
        self._primary_count, self._initial_primaries = int(primaries), int(initial)
        nodes: list[dict[str, Any]] = data["nodes"]
        return nodes

    def _save_layout(self) -> None:
        data = {
            "created": True,
            "primaries": self._primary_count,
            "initial_primaries": self._initial_primaries,
            "replicas_per_primary": self.config.replicas_per_primary,
            "nodes": [
                {"port": n.port, "bus_port": n.bus_port, "role": n.role} for n in self._nodes
            ],
        }
        tmp = self.layout_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(self.layout_path)

    def _wipe_node_dirs(self) -> None:
        # Without a completed-creation record, node dirs are leftovers of a failed first start:
        # their nodes.conf would make `--cluster create` refuse ("node is not empty").
        for node in self._nodes:
            if node.data_dir.exists():
                shutil.rmtree(node.data_dir)

    def _create(self, cli: list[str]) -> None:
        for node in self._nodes:
            wait_until(node.process.name, node._ping_probe, self.config.startup_timeout_s,
                       [node.process])
        args = ["create", *(f"{n.host}:{n.port}" for n in self._nodes)]
        args += ["--cluster-replicas", str(self.config.replicas_per_primary), "--cluster-yes"]
        run_cluster_command(cli, args, self.config.data_dir / "cluster-create.log")
        self.wait_ready(self.config.startup_timeout_s)
        self._save_layout()

    def add_shard(self, replicas: int | None = None, timeout_s: float | None = None) -> RedisNode:
        """Scale out: start a new primary with `replicas` replicas, join them, rebalance slots onto
        it.

        The rebalance migrates keys slot by slot with MIGRATE while the cluster serves, so clients
        see ASK and MOVED redirects. The new nodes are recorded in the layout file (a restart keeps
        them) before the rebalance starts. Returns the new primary once the whole cluster is ready
        again.
        """
        timeout = self.config.startup_timeout_s if timeout_s is None else timeout_s
        count = self.config.replicas_per_primary if replicas is None else replicas
        server, cli = (
            require_binary("redis-server"),
            self.config.cli_argv(require_binary("redis-cli")),
        )
        new = self._new_nodes(1 + count, server)
        for node in new:
            node.start()
        for node in new:
            wait_until(node.process.name, node._ping_probe, timeout, [node.process])
        existing = self._any_primary_address()
        log = self.config.data_dir / "cluster-scale-out.log"
        primary, new_replicas = new[0], new[1:]
        add_primary(cli, _address(primary), existing, log)
        primary_id = primary.node_id()
        self._nodes.append(primary)
        self._primary_count += 1
        for node in new_replicas:
            self._join_as_replica(node, primary, primary_id, timeout)
            self._nodes.append(node)
        self._save_layout()
        wait_until(f"new shard joining {existing}", self._readiness_problem, timeout,
                   [node.process for node in self._nodes])
        self._wait_agreement(existing, cli, log, timeout)
        rebalance_onto_empty_primaries(cli, existing, log)
        self.wait_ready(timeout)
        return primary

    def _join_as_replica(self, node: RedisNode, primary: RedisNode, primary_id: str,
                         timeout_s: float) -> None:
        """MEET the new primary, then REPLICATE it once this node has heard of it.

        (`redis-cli --cluster add-node --cluster-slave` sends REPLICATE before gossip has told the
        new node about its primary, and fails with "Unknown node" about half the time.)
        """
        with node.client() as client:
            client.execute_command("CLUSTER", "MEET", primary.host, primary.port, primary.bus_port)

            def not_replicating() -> str | None:
                try:
                    client.execute_command("CLUSTER", "REPLICATE", primary_id)
                except redis.ResponseError as exc:
                    return f"{node.port} cannot replicate {primary_id} yet: {exc}"
                return None

            wait_until(f"replica {node.port} joining", not_replicating, timeout_s, [node.process])

    def _new_nodes(self, count: int, server: str) -> list[RedisNode]:
        base = self.config.base_port
        if base:
            first = len(self._nodes)
            pairs = [(base + i, base + BUS_PORT_OFFSET + i) for i in range(first, first + count)]
        else:
            ports = free_ports(2 * count)
            pairs = list(zip(ports[:count], ports[count:], strict=True))
        replica: Role = "replica"
        roles: list[Role] = ["primary", *([replica] * (count - 1))]
        nodes = [RedisNode(self.config, port, bus, role, server)
                 for (port, bus), role in zip(pairs, roles, strict=True)]
        for node in nodes:
            # a leftover of an earlier, failed scale-out: add-node wants empty nodes
            if node.data_dir.exists():
                shutil.rmtree(node.data_dir)
        return nodes

    def _any_primary_address(self) -> str:
        for node in self.primaries:
            if node.is_running():
                return _address(node)
        raise DevStackError("no running primary to join new nodes through")

    def _wait_agreement(self, existing: str, cli: list[str], log: Path, timeout_s: float,
                        knows: str = "") -> None:
        """Wait until `existing` knows node id `knows` (if given) and `redis-cli --cluster check`
        passes."""
        node = self.node_at(int(existing.rpartition(":")[2]))

        def disagreement() -> str | None:
            if knows:
                with node.client(socket_timeout=1.0) as conn:
                    if knows not in str(conn.execute_command("CLUSTER", "NODES")):
                        return f"{existing} does not know node {knows} yet"
            return (
                None
                if is_consistent(cli, existing, log)
                else f"redis-cli --cluster check {existing} failed"
            )

        wait_until(f"slot map agreement of {existing}", disagreement, timeout_s,
                   [n.process for n in self._nodes])


def _address(node: RedisNode) -> str:
    return f"{node.host}:{node.port}"


def _key_served_by(cluster: RedisCluster, port: int, salt: int) -> str:
    """A probe key whose slot the primary on ``port`` serves."""
    for attempt in range(100_000):
        key = f"sg-devstack-probe-{salt}-{attempt}"
        if cluster.get_node_from_key(key).port == port:  # type: ignore[no-untyped-call]
            return key
    raise DevStackError(f"no probe key found for the primary on port {port}")
