"""Every in-chart Redis node runs at a defined memory cap with noeviction: derived from the
container's memory limit (downward API) or given explicitly. The rendered start script is run for
real: once with redis-server replaced by a script that prints its arguments, once starting Redis."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import redis
from chart_redis import (
    GIB,
    chart_redis_pod,
    install_pod_files,
    ping_problem,
    plain_env,
    pod_env,
    redis_container,
)
from helm_render import CHART_DIR, manifests, one, render_files

from streamgate_devstack._process import terminate_all, wait_until
from streamgate_devstack.ports import free_ports

MIB = 1024**2


def started_with(tmp_path: Path, memory_limit: int,
                 values: dict[str, Any] | None = None) -> list[str]:
    """The arguments start.sh passes to redis-server after the config file, for this limit."""
    script = install_pod_files(tmp_path, values)
    fake = tmp_path / "bin" / "redis-server"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nshift\nprintf "%s\\n" "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {**pod_env(values, memory_limit), "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    result = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True,
                            timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_every_redis_pod_reads_its_memory_limit_in_bytes() -> None:
    container = redis_container()
    refs = {e["name"]: e["valueFrom"] for e in container["env"] if "valueFrom" in e}
    assert refs["MEMORY_LIMIT"] == {"resourceFieldRef": {"containerName": "redis",
                                                         "resource": "limits.memory"}}
    assert container["resources"]["limits"]["memory"] == "2Gi"
    env = plain_env(container)
    assert (env["MAXMEMORY_PERCENT"], env["MAXMEMORY"], env["MAXMEMORY_POLICY"]) == (
        "70", "", "noeviction")
    statefulset = one(manifests({"redis": {"primaries": 4, "replicasPerPrimary": 2}}),
                      "StatefulSet", "-redis")
    assert statefulset["spec"]["replicas"] == 12  # primaries and replicas share the pod template


def test_start_script_caps_memory_at_the_percent_of_the_limit(tmp_path: Path) -> None:
    assert started_with(tmp_path, 2 * GIB) == ["--maxmemory", str(2 * GIB * 70 // 100),
                                               "--maxmemory-policy", "noeviction"]


def test_start_script_follows_a_changed_percent(tmp_path: Path) -> None:
    args = started_with(tmp_path, 10 * GIB, {"redis": {"maxmemoryPercent": 50}})
    assert args[:2] == ["--maxmemory", str(5 * GIB)]


@pytest.mark.parametrize(("maxmemory", "passed"), [("3gb", "3gb"), (2 * GIB, str(2 * GIB))])
def test_an_explicit_maxmemory_wins_over_the_limit(tmp_path: Path, maxmemory: str | int,
                                                   passed: str) -> None:
    args = started_with(tmp_path, 8 * GIB, {"redis": {"maxmemory": maxmemory}})
    assert args == ["--maxmemory", passed, "--maxmemory-policy", "noeviction"]


def test_schema_accepts_only_noeviction_and_sane_caps() -> None:
    with helm.Chart.load(str(CHART_DIR)) as chart:
        chart.validate_schema({"redis": {"maxmemory": "512mb", "maxmemoryPercent": 60}})
        for bad in ({"maxmemoryPolicy": "allkeys-lru"}, {"maxmemoryPolicy": "volatile-ttl"},
                    {"maxmemoryPercent": 100}, {"maxmemoryPercent": 0}, {"maxmemory": "2 GB"},
                    {"maxmemory": 0}, {"maxmemory": "lots"}):
            with pytest.raises(helm.HelmValuesError):
                chart.validate_schema({"redis": bad})


def test_rendering_refuses_redis_without_a_limit_or_a_cap() -> None:
    with pytest.raises(helm.HelmError, match=r"redis\.resources\.limits\.memory"):
        render_files({"redis": {"resources": {"limits": None}}})
    container = redis_container({"redis": {"resources": {"limits": None}, "maxmemory": "1gb"}})
    assert "limits" not in container["resources"]
    assert plain_env(container)["MAXMEMORY"] == "1gb"


@pytest.fixture
def capped_redis(devstack_binaries: None, tmp_path: Path) -> Iterator[redis.Redis]:
    """The chart's pod started by its start.sh with a 16 MiB memory limit: a one-node cluster
    holding every slot."""
    port, bus_port = free_ports(2)
    server = chart_redis_pod(tmp_path, port, bus_port, memory_limit=16 * MIB)
    client = redis.Redis(port=port, password="s3cret pass", socket_timeout=5)
    try:
        server.start()
        wait_until("chart redis", lambda: ping_problem(client), 20, [server])
        client.cluster("ADDSLOTSRANGE", 0, 16383)
        wait_until("cluster_state:ok", lambda: _cluster_problem(client), 20, [server])
        yield client
    finally:
        client.close()
        terminate_all([server])


def _cluster_problem(client: redis.Redis) -> str | None:
    state = str(client.cluster("info")["cluster_state"])
    return None if state == "ok" else f"cluster_state {state}"


def _fill(client: redis.Redis, value: bytes) -> int:
    """SET values until Redis refuses one for memory; how many it took."""
    written = 0
    try:
        while written < 1000:
            client.set(f"k{written}", value)
            written += 1
    except redis.exceptions.OutOfMemoryError:
        return written
    raise AssertionError(f"{written} values of {len(value)} bytes were never refused")


def test_capped_redis_refuses_writes_when_full_and_keeps_every_key(
        capped_redis: redis.Redis) -> None:
    assert capped_redis.config_get("maxmemory") == {"maxmemory": str(16 * MIB * 70 // 100)}
    assert capped_redis.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    value = b"v" * 65536
    written = _fill(capped_redis, value)
    assert written > 0
    assert capped_redis.dbsize() == written  # nothing was evicted to make room
    assert capped_redis.get("k0") == value
    assert capped_redis.delete("k0") == 1
