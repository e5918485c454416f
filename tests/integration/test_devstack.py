"""The dev stack launchers: a real Redis Cluster and etcd as child processes."""

from __future__ import annotations

import os
from pathlib import Path

import aetcd
import pytest
import redis

from streamgate_devstack import (
    DevStack,
    DevStackConfig,
    EtcdConfig,
    EtcdProcess,
    MissingBinary,
    RedisClusterConfig,
    RedisClusterProcess,
)


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cluster_has_three_primaries_each_with_a_replica(
    redis_cluster: RedisClusterProcess,
) -> None:
    primary_ports = {node.port for node in redis_cluster.primaries}
    assert len(primary_ports) == 3
    assert len(redis_cluster.replicas) == 3
    masters_of_replicas = []
    for node in redis_cluster.replicas:
        with node.client() as conn:
            info = conn.info("replication")
        assert info["role"] == "slave"
        assert info["master_link_status"] == "up"
        masters_of_replicas.append(info["master_port"])
    assert sorted(masters_of_replicas) == sorted(primary_ports)


def test_every_node_has_aof_enabled_and_the_explicit_bus_port(
    redis_cluster: RedisClusterProcess,
) -> None:
    for node in redis_cluster.nodes:
        with node.client() as conn:
            assert conn.config_get("appendonly") == {"appendonly": "yes"}
            assert conn.config_get("cluster-port") == {"cluster-port": str(node.bus_port)}


def test_cluster_client_routes_keys_to_the_owning_primary(
    redis_cluster: RedisClusterProcess,
) -> None:
    with redis_cluster.client() as client:
        client.set("devstack:{route}", "v")
    owner = redis_cluster.primary_for_key("devstack:{route}")
    with owner.client() as conn:
        assert conn.get("devstack:{route}") == "v"


def test_paused_replica_answers_again_after_resume(redis_cluster: RedisClusterProcess) -> None:
    replica = redis_cluster.replicas[0]
    replica.pause()
    try:
        with replica.client(socket_timeout=0.3) as conn, pytest.raises(redis.TimeoutError):
            conn.ping()
    finally:
        replica.resume()
    redis_cluster.wait_ready(20)


def test_killed_replica_relinks_after_start(redis_cluster: RedisClusterProcess) -> None:
    replica = redis_cluster.replicas[-1]
    old_pid = replica.pid
    replica.kill()
    assert replica.pid is None
    replica.start()
    redis_cluster.wait_ready(30)
    assert replica.pid not in (None, old_pid)
    assert replica.role == "replica"


async def test_etcd_server_answers_put_and_get(etcd_server: EtcdProcess) -> None:
    async with aetcd.Client(etcd_server.host, etcd_server.port) as client:
        await client.put(b"/devstack-test/k", b"v")
        got = await client.get(b"/devstack-test/k")
    assert got is not None
    assert got.value == b"v"


@pytest.mark.usefixtures("devstack_binaries")
async def test_restarted_stack_keeps_redis_keys_and_etcd_keys(tmp_path: Path) -> None:
    config = DevStackConfig(
        data_dir=tmp_path / "stack", redis_replicas=0, cluster_node_timeout_ms=2000
    )
    stack = DevStack(config)
    stack.start()
    try:
        with stack.redis.client() as client:
            client.set("devstack:kept", "before-restart")
        async with aetcd.Client(stack.etcd.host, stack.etcd.port) as etcd:
            await etcd.put(b"/devstack-test/kept", b"before-restart")
        pids = [node.pid for node in stack.redis.nodes] + [stack.etcd.pid]
        nodes_before, endpoint_before = stack.redis_startup_nodes, stack.etcd_endpoint

        stack.stop()
        assert not [pid for pid in pids if pid is not None and _pid_exists(pid)]
        stack.stop()  # idempotent

        stack = DevStack(config)
        stack.start()
        assert (stack.redis_startup_nodes, stack.etcd_endpoint) == (nodes_before, endpoint_before)
        with stack.redis.client() as client:
            assert client.get("devstack:kept") == "before-restart"
        async with aetcd.Client(stack.etcd.host, stack.etcd.port) as etcd:
            got = await etcd.get(b"/devstack-test/kept")
        assert got is not None
        assert got.value == b"before-restart"
    finally:
        stack.stop()


def test_missing_redis_server_names_the_debian_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    cluster = RedisClusterProcess(RedisClusterConfig(data_dir=tmp_path / "redis"))
    with pytest.raises(MissingBinary, match="apt-get install redis-server"):
        cluster.start()


def test_missing_etcd_names_the_debian_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingBinary, match="apt-get install etcd-server"):
        EtcdProcess(EtcdConfig(data_dir=tmp_path / "etcd")).start()
