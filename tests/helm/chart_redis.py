"""The chart's Redis pod outside Kubernetes: its rendered files with the pod's paths moved under a
temporary directory, and the environment the kubelet would give its container."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis
from helm_render import manifests, one

from streamgate_devstack._process import ServerProcess

REDIS_HEADLESS = "sg-streamgate-redis-headless.streaming.svc.cluster.local"
GIB = 1024**3
POD_FILES = (("redis.conf", "/etc/redis"), ("start.sh", "/scripts"),
             ("refresh-nodes.sh", "/scripts"))


def redis_files(values: dict[str, Any] | None = None) -> dict[str, str]:
    """The Redis ConfigMap's data: redis.conf and the scripts."""
    data: dict[str, str] = one(manifests(values or {}), "ConfigMap", "-redis")["data"]
    return data


def redis_container(values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Redis StatefulSet's container."""
    statefulset = one(manifests(values or {}), "StatefulSet", "-redis")
    container: dict[str, Any] = statefulset["spec"]["template"]["spec"]["containers"][0]
    assert container["name"] == "redis"
    return container


def plain_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's env entries that carry a value (not a reference)."""
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def install_pod_files(tmp_path: Path, values: dict[str, Any] | None = None) -> Path:
    """The rendered redis.conf and scripts, their pod paths under ``tmp_path``; start.sh's
    path."""
    files = redis_files(values)
    paths = {"/run/redis": tmp_path / "run", "/etc/redis": tmp_path / "etc",
             "/data": tmp_path / "data", "/scripts": tmp_path / "scripts"}
    for directory in paths.values():
        directory.mkdir(exist_ok=True)
    for name, pod_directory in POD_FILES:
        text = files[name]
        for pod_path, local in paths.items():
            text = text.replace(pod_path, str(local))
        (paths[pod_directory] / name).write_text(text)
    return paths["/scripts"] / "start.sh"


def pod_env(values: dict[str, Any] | None = None, memory_limit: int = 2 * GIB,
            password: str = "") -> dict[str, str]:
    """The container's environment as the kubelet sets it, the downward API's memory limit
    (bytes) and the Secret's password given here."""
    env = {**plain_env(redis_container(values)), "POD_IP": "127.0.0.1",
           "POD_NAME": "sg-streamgate-redis-0", "MEMORY_LIMIT": str(memory_limit)}
    return {**env, "REDIS_PASSWORD": password} if password else env


def chart_redis_pod(tmp_path: Path, port: int, bus_port: int,
                    memory_limit: int = 2 * GIB) -> ServerProcess:
    """The chart's start.sh as the container runs it, with the pod's paths moved under
    tmp_path."""
    extra = f"port {port}\ncluster-port {bus_port}\nbind 127.0.0.1\nsave \"\"\n"
    script = install_pod_files(tmp_path, {"redis": {"extraConfig": extra}})
    env = pod_env(memory_limit=memory_limit, password="s3cret pass")
    argv = ["env", *(f"{key}={value}" for key, value in env.items()), "sh", str(script)]
    return ServerProcess("chart-redis", argv, tmp_path / "out.log")


def ping_problem(client: redis.Redis) -> str | None:
    """None once the server answers PING, else why not (for wait_until)."""
    try:
        client.ping()
    except redis.RedisError as exc:
        return str(exc)
    return None
