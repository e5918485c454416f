"""The in-chart Redis Cluster (AOF, replicas, the cluster-create Job) and etcd (3 members from pod
DNS names).

The rendered Redis config and scripts are also run for real: redis-server accepts the config, and
the Job's script forms a 3+3 cluster from scratch and leaves a formed cluster alone.
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from chart_redis import REDIS_HEADLESS, chart_redis_pod, ping_problem, redis_files
from helm_render import manifests, one

from storage.models import Acks, AppendOptions, AppendResult, Record
from storage.redis_store import RedisStreamStore
from storage.settings import RedisStoreSettings
from streamgate_devstack._process import ServerProcess, terminate_all, wait_until
from streamgate_devstack.ports import free_ports

ETCD_HEADLESS = "sg-streamgate-etcd-headless.streaming.svc.cluster.local"


def config_lines(conf: str) -> set[str]:
    return {line.strip() for line in conf.splitlines() if line.strip() and not line.startswith("#")}


def test_redis_runs_in_cluster_mode_with_aof_every_second() -> None:
    files = redis_files()
    lines = config_lines(files["redis.conf"])
    assert {"cluster-enabled yes", "appendonly yes", "appendfsync everysec",
            "cluster-config-file /data/nodes.conf"} <= lines
    assert 'echo "dir /data" >> "$conf"' in files["start.sh"]  # AOF and nodes.conf on the volume
    assert "appendfsync always" in config_lines(
        redis_files({"redis": {"appendfsync": "always"}})["redis.conf"])


def test_redis_statefulset_pod_count_and_volumes() -> None:
    statefulset = one(manifests({}), "StatefulSet", "-redis")
    assert statefulset["spec"]["replicas"] == 6
    assert statefulset["spec"]["podManagementPolicy"] == "Parallel"
    claim = statefulset["spec"]["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "8Gi"
    bigger = one(manifests({"redis": {"primaries": 5, "replicasPerPrimary": 2}}), "StatefulSet",
                 "-redis")
    assert bigger["spec"]["replicas"] == 15


def job_env(values: dict[str, Any] | None = None) -> dict[str, Any]:
    job = one(manifests(values or {}), "Job")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["sh", "/scripts/cluster-create.sh"]
    return {item["name"]: item.get("value") for item in container["env"]}


def test_cluster_create_job_names_every_pod_and_replicas() -> None:
    env = job_env()
    assert env["NODES"].split() == [f"sg-streamgate-redis-{i}.{REDIS_HEADLESS}:6379"
                                    for i in range(6)]
    assert env["REPLICAS"] == "1"
    assert job_env({"redis": {"replicasPerPrimary": 2}})["REPLICAS"] == "2"
    script = redis_files()["cluster-create.sh"]
    assert ('redis-cli --cluster create $addresses --cluster-replicas '
            '"$REPLICAS" --cluster-yes') in script


def test_cluster_create_job_is_named_per_revision() -> None:
    assert one(manifests({}), "Job")["metadata"]["name"] == "sg-streamgate-redis-cluster-create-1"


def test_redis_password_is_required_by_the_servers_when_set() -> None:
    start = redis_files()["start.sh"]
    assert "requirepass" in start
    assert "masterauth" in start
    pod = one(manifests({}), "StatefulSet", "-redis")["spec"]["template"]["spec"]
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in pod["containers"][0]["env"]
           if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]}
    assert env["REDIS_PASSWORD"]["key"] == "redis-password"
    assert env["REDISCLI_AUTH"]["key"] == "redis-password"


def test_headless_services_publish_unready_pods() -> None:
    objects = manifests({})
    for name in ("sg-streamgate-redis-headless", "sg-streamgate-etcd-headless"):
        service = one(objects, "Service", name)
        assert service["spec"]["clusterIP"] == "None"
        assert service["spec"]["publishNotReadyAddresses"] is True


def etcd_args() -> dict[str, str]:
    statefulset = one(manifests({}), "StatefulSet", "-etcd")
    assert statefulset["spec"]["replicas"] == 3
    assert statefulset["spec"]["serviceName"] == "sg-streamgate-etcd-headless"
    args = statefulset["spec"]["template"]["spec"]["containers"][0]["args"]
    return dict(arg.removeprefix("--").split("=", 1) for arg in args)


def test_upgrade_announces_new_etcd_member_then_joins_it() -> None:
    assert not [obj for obj in manifests({}) if obj["metadata"]["name"].endswith("-members")]
    upgraded = manifests({"etcd": {"replicas": 4}}, revision=2)
    job = one(upgraded, "Job", "-etcd-members")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-upgrade"
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {entry["name"]: entry["value"] for entry in container["env"]}
    assert env["MEMBERS"].count("=http://") == 4
    assert "takes one new\"" in container["args"][0]  # refuses two members in one upgrade
    statefulset = one(upgraded, "StatefulSet", "-etcd")
    assert "--initial-cluster-state=existing" in (
        statefulset["spec"]["template"]["spec"]["containers"][0]["args"])


def test_etcd_initial_cluster_names_members_by_pod_dns() -> None:
    args = etcd_args()
    members = dict(member.split("=", 1) for member in args["initial-cluster"].split(","))
    assert members == {f"sg-streamgate-etcd-{i}":
                       f"http://sg-streamgate-etcd-{i}.{ETCD_HEADLESS}:2380" for i in range(3)}
    assert args["name"] == "$(POD_NAME)"
    assert args["initial-advertise-peer-urls"] == f"http://$(POD_NAME).{ETCD_HEADLESS}:2380"
    assert args["advertise-client-urls"] == f"http://$(POD_NAME).{ETCD_HEADLESS}:2379"
    assert args["initial-cluster-state"] == "new"
    assert args["data-dir"].startswith("/var/lib/etcd/")


def run_script(script: Path, env: dict[str, str],
               timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(script)], env={"PATH": os.environ["PATH"], **env},
                          capture_output=True, text=True, timeout=timeout_s, check=False)


def test_refresh_nodes_rewrites_peer_ips_from_their_hostnames(tmp_path: Path) -> None:
    """After a restart pods have new IPs; nodes.conf keeps each node's hostname, so peers are found
    again."""
    script = tmp_path / "refresh-nodes.sh"
    script.write_text(redis_files()["refresh-nodes.sh"])
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    getent = fake_bin / "getent"
    getent.write_text('#!/bin/sh\ncase "$2" in\n  redis-1.h) echo "10.0.0.21 redis-1.h" ;;\n'
                      '  *) exit 2 ;;\nesac\n')
    getent.chmod(getent.stat().st_mode | stat.S_IXUSR)
    nodes = tmp_path / "nodes.conf"
    nodes.write_text(
        "aaa 10.0.0.10:6379@16379,redis-0.h myself,master - 0 0 1 connected 0-5460\n"
        "bbb 10.0.0.11:6379@16379,redis-1.h,shard-id=s1 master - 0 1700000000000 2 "
        "connected 5461-10922 [93->-ccc]\n"
        "ccc 10.0.0.12:6379@16379,redis-2.h slave aaa 0 1700000000000 1 connected\n"
        "ddd 10.0.0.13:6379@16379 slave bbb 0 1700000000000 2 connected\n"
        "vars currentEpoch 6 lastVoteEpoch 0\n")
    result = subprocess.run(["sh", str(script), str(nodes), "10.0.0.20"], capture_output=True,
                            text=True, env={"PATH": f"{fake_bin}:{os.environ['PATH']}"}, timeout=30,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert nodes.read_text() == (
        "aaa 10.0.0.20:6379@16379,redis-0.h myself,master - 0 0 1 connected 0-5460\n"
        "bbb 10.0.0.21:6379@16379,redis-1.h,shard-id=s1 master - 0 1700000000000 2 "
        "connected 5461-10922 [93->-ccc]\n"
        # not resolvable: kept
        "ccc 10.0.0.12:6379@16379,redis-2.h slave aaa 0 1700000000000 1 connected\n"
        "ddd 10.0.0.13:6379@16379 slave bbb 0 1700000000000 2 connected\n"  # no hostname: kept
        "vars currentEpoch 6 lastVoteEpoch 0\n")


@pytest.fixture
def six_redis_servers(devstack_binaries: None, tmp_path: Path) -> Iterator[list[int]]:
    """Six empty cluster-mode redis-servers on loopback, configured by the chart's rendered
    redis.conf (announcing a hostname, as start.sh makes each pod announce its DNS name)."""
    yield from redis_servers(6, tmp_path)


@pytest.fixture
def nine_redis_servers(devstack_binaries: None, tmp_path: Path) -> Iterator[list[int]]:
    """As ``six_redis_servers``, nine of them."""
    yield from redis_servers(9, tmp_path)


def redis_servers(count: int, tmp_path: Path) -> Iterator[list[int]]:
    conf = tmp_path / "redis.conf"
    extra = "cluster-announce-hostname localhost"
    conf.write_text(redis_files({"redis": {"clusterNodeTimeoutMs": 2000,
                                           "extraConfig": extra}})["redis.conf"])
    ports = free_ports(2 * count)
    servers = []
    for port, bus_port in zip(ports[:count], ports[count:], strict=True):
        data = tmp_path / str(port)
        data.mkdir()
        servers.append(ServerProcess(f"redis-{port}", [
            "redis-server", str(conf), "--port", str(port), "--cluster-port", str(bus_port),
            "--bind", "127.0.0.1", "--dir", str(data), "--cluster-config-file",
            str(data / "nodes.conf"), "--save", ""], data / "out.log"))
    try:
        for server in servers:
            server.start()
        wait_until("redis servers", lambda: _first_unanswered(ports[:count]), 20, servers)
        yield ports[:count]
    finally:
        terminate_all(servers)


def _first_unanswered(ports: list[int]) -> str | None:
    for port in ports:
        try:
            redis.Redis(port=port, socket_timeout=1).ping()
        except redis.RedisError as exc:
            return f"{port}: {exc}"
    return None


def test_cluster_create_forms_cluster_once_then_leaves_it(
        six_redis_servers: list[int], tmp_path: Path) -> None:
    script = tmp_path / "cluster-create.sh"
    script.write_text(redis_files()["cluster-create.sh"])
    env = {"NODES": " ".join(f"localhost:{port}" for port in six_redis_servers), "REPLICAS": "1"}
    first = run_script(script, env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "creating the Redis Cluster" in first.stdout
    assert "the Redis Cluster is formed" in first.stdout
    client = redis.Redis(port=six_redis_servers[0])
    info = client.cluster("info")
    assert info["cluster_state"] == "ok"
    assert int(info["cluster_known_nodes"]) == 6
    assert int(info["cluster_size"]) == 3
    assert client.config_get("appendonly") == {"appendonly": "yes"}
    assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
    second = run_script(script, env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "already formed: nothing to do" in second.stdout
    assert "creating" not in second.stdout


def revisions(ports: list[int], tmp_path: Path) -> Callable[[int, int], str]:
    """Runs of the chart's cluster-create.sh as a revision would run it: over the first ``nodes``
    of ``ports`` with ``primaries`` asked for, one replica each; each run's output."""
    script = tmp_path / "cluster-create.sh"
    script.write_text(redis_files()["cluster-create.sh"])

    def revision(nodes: int, primaries: int) -> str:
        env = {"NODES": " ".join(f"localhost:{port}" for port in ports[:nodes]),
               "PRIMARIES": str(primaries), "REPLICAS": "1"}
        done = run_script(script, env, timeout_s=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    return revision


def test_cluster_create_adds_new_primaries_then_replicas(
        nine_redis_servers: list[int], tmp_path: Path) -> None:
    revision = revisions(nine_redis_servers, tmp_path)

    assert "creating the Redis Cluster" in revision(6, 3)
    cluster = redis.RedisCluster(host="localhost", port=nine_redis_servers[0])
    cluster.set("{a}before", "kept")
    grown = revision(8, 4)  # redis.primaries 3 -> 4: a new primary and its replica
    assert grown.count("as a primary") == 1
    assert grown.count("as a replica") == 1
    assert "moving slots onto the new primaries" in grown
    assert revision(9, 4).count("as a replica") == 1  # one replica more
    assert "nothing to do" in revision(9, 4)
    client = redis.Redis(port=nine_redis_servers[0], decode_responses=True)
    shards = [shard for shard in client.cluster("shards") if shard["slots"]]
    assert len(shards) == 4
    assert sorted(len(shard["nodes"]) - 1 for shard in shards) == [1, 1, 1, 2]
    assert client.cluster("info")["cluster_state"] == "ok"
    cluster.nodes_manager.initialize()
    assert cluster.get("{a}before") == b"kept"


def test_cluster_create_turns_extra_primary_into_replica(
        nine_redis_servers: list[int], tmp_path: Path) -> None:
    ports = nine_redis_servers[:8]
    revision = revisions(ports, tmp_path)

    revision(6, 3)
    client = redis.Redis(port=ports[0], decode_responses=True)
    for port in ports[6:]:  # met, as a cut-off run leaves them: two empty primaries
        bus = redis.Redis(port=port, decode_responses=True).config_get("cluster-port")
        client.execute_command("CLUSTER", "MEET", "127.0.0.1", port, bus["cluster-port"])
    wait_until("the new nodes known", lambda: None if all(
        int(redis.Redis(port=port).cluster("info")["cluster_known_nodes"]) == 8
        for port in ports) else "not yet", 20, [])
    grown = revision(8, 4)
    assert grown.count("a primary too many") == 1, grown
    assert "moving slots onto the new primaries" in grown
    shards = [shard for shard in client.cluster("shards") if shard["slots"]]
    assert len(shards) == 4
    assert sorted(len(shard["nodes"]) - 1 for shard in shards) == [1, 1, 1, 1]
    assert "nothing to do" in revision(8, 4)


def test_gateway_writes_acks_all_to_cluster_announcing_hostnames(
        six_redis_servers: list[int], tmp_path: Path) -> None:
    """The chart makes clients see the nodes' DNS names (cluster-preferred-endpoint-type
    hostname)."""
    script = tmp_path / "cluster-create.sh"
    script.write_text(redis_files()["cluster-create.sh"])
    formed = run_script(script,
                        {"NODES": " ".join(f"localhost:{port}" for port in six_redis_servers),
                         "REPLICAS": "1"})
    assert formed.returncode == 0, formed.stdout + formed.stderr
    wait_until("replicas linked", lambda: _unlinked_replica(six_redis_servers), 20, [])
    first_slot_range = redis.Redis(port=six_redis_servers[0]).execute_command("CLUSTER SLOTS")[0]
    assert first_slot_range[2][0] == b"localhost"
    results = asyncio.run(_append_with_acks_all(six_redis_servers[0]))
    assert [result.partition for result in results] == list(range(6))
    assert all(not result.duplicate for result in results)


def _unlinked_replica(ports: list[int]) -> str | None:
    linked = 0
    for port in ports:
        info = redis.Redis(port=port).info("replication")
        if info["role"] == "slave":
            if info["master_link_status"] != "up":
                return f"replica {port}: master link {info['master_link_status']}"
            linked += 1
    return None if linked == 3 else f"{linked} replicas linked"


async def _append_with_acks_all(port: int) -> list[AppendResult]:
    settings = RedisStoreSettings(startup_nodes=[("localhost", port)], min_insync_replicas=1)
    async with RedisStreamStore(settings) as store:
        records = [Record(partition=partition, value=b"x") for partition in range(6)]
        return await store.append("helm-check", records, AppendOptions(acks=Acks.ALL))


def test_redis_start_requires_password_and_announces_pod_name(
        devstack_binaries: None, tmp_path: Path) -> None:
    port, bus_port = free_ports(2)
    for attempt in ("first start", "restart with its nodes.conf"):
        server = chart_redis_pod(tmp_path, port, bus_port)
        server.start()
        try:
            client = redis.Redis(port=port, password="s3cret pass", socket_timeout=2)
            wait_until(attempt, lambda c=client: ping_problem(c), 20, [server])
            assert _unauthenticated_ping(port).startswith(b"-NOAUTH")
            assert client.config_get("cluster-announce-hostname") == {
                "cluster-announce-hostname": f"sg-streamgate-redis-0.{REDIS_HEADLESS}"}
            assert client.config_get("masterauth") == {"masterauth": "s3cret pass"}
            assert client.config_get("appendonly") == {"appendonly": "yes"}
            assert client.config_get("dir") == {"dir": str(tmp_path / "data")}
        finally:
            server.terminate()
        assert (tmp_path / "data" / "nodes.conf").exists(), attempt


def _unauthenticated_ping(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(b"PING\r\n")
        return sock.recv(256)
