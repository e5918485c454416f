"""The gateway over TLS to a TLS-only Redis Cluster and a TLS etcd, both demanding client
certificates."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
import redis
from aiohttp.test_utils import TestClient
from redis.backoff import NoBackoff
from redis.retry import Retry

from gateway.app import create_app
from gateway.settings import GatewaySettings
from partitioner.errors import CoordinationUnavailable
from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import EtcdTls
from storage.keys import log_key
from streamgate_devstack import EtcdProcess, RedisClusterProcess
from streamgate_devstack.certs import TlsFiles

Client = TestClient[Any, Any]
# What a refused `streamgate serve` may take at most: its connect deadlines (3 s
# each here) plus interpreter start.
STARTUP_FAILURE_BUDGET_S = 45


def serve_env(settings: GatewaySettings, **overrides: str) -> dict[str, str]:
    """The environment of a `streamgate serve` for ``settings`` (TLS fields included), plus
    ``overrides``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("STREAMGATE_")}
    env.update({
        "STREAMGATE_REDIS_NODES": ",".join(settings.redis_nodes),
        "STREAMGATE_ETCD_ENDPOINTS": ",".join(settings.etcd_endpoints),
        "STREAMGATE_ETCD_PREFIX": settings.etcd_prefix,
        "STREAMGATE_AUTH_MODE": "none",
        "STREAMGATE_REDIS_READ_DEADLINE_S": "3",
        "STREAMGATE_REDIS_WRITE_DEADLINE_S": "3",
        "STREAMGATE_ETCD_TIMEOUT_S": "3",
        "STREAMGATE_REDIS_TLS": "true",
    })
    for name in (
        "redis_tls_ca_path", "redis_tls_cert_path", "redis_tls_key_path", "etcd_tls_ca_path",
        "etcd_tls_cert_path", "etcd_tls_key_path",
    ):
        env[f"STREAMGATE_{name.upper()}"] = str(getattr(settings, name))
    env.update(overrides)
    return env


def serve_until_exit(env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run `streamgate serve` expecting it to give up; (the finished process, seconds it took)."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "--log-level", "warning", "serve", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=STARTUP_FAILURE_BUDGET_S,
        check=False,
    )
    return result, time.monotonic() - started


async def until_ready(gateway: Client, timeout_s: float = 30) -> None:
    """Poll /readyz until 200: the partition duties report healthy once their ownership lease is
    held."""
    deadline = time.monotonic() + timeout_s
    while (response := await gateway.get("/readyz")).status != 200:
        assert time.monotonic() < deadline, await response.text()
        await asyncio.sleep(0.1)


async def test_gateway_serves_over_tls_to_redis_and_etcd(
    aiohttp_client: Any, tls_settings: GatewaySettings, tls_redis_cluster: RedisClusterProcess
) -> None:
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    gateway: Client = await aiohttp_client(create_app(tls_settings))
    await until_ready(gateway)  # every check (redis, etcd, watch, duties) passes over TLS
    created = await gateway.post("/v1/topics", json={"name": topic, "partitions": 2})
    assert created.status == 201, await created.text()
    async with gateway.ws_connect("/v1/subscribe", params={"topic": topic, "mode": "broadcast",
                                                           "from": "earliest"}) as ws:
        published = await gateway.post(
            f"/v1/topics/{topic}/messages",
            json={
                "acks": "all",
                "messages": [{"value": {"seq": i}, "partition": i % 2} for i in range(6)],
            },
        )
        assert published.status == 200, await published.text()
        received = []
        while len(received) < 6:
            frame = await ws.receive_json(timeout=10)
            if frame["type"] == "message":
                received.append(frame["value"]["seq"])
    assert sorted(received) == list(range(6))
    page = await (
        await gateway.get(f"/v1/topics/{topic}/partitions/1/messages?from=earliest")
    ).json()
    assert [m["value"]["seq"] for m in page["messages"]] == [1, 3, 5]
    # the entries are in the TLS cluster, read back over TLS
    with tls_redis_cluster.client() as cluster:
        assert cluster.xlen(log_key(topic, 0)) == 3


def test_redis_refuses_plaintext_and_certificateless_clients(
        tls_redis_cluster: RedisClusterProcess, pki: TlsFiles) -> None:
    node = tls_redis_cluster.nodes[0]
    once = {"socket_timeout": 2, "socket_connect_timeout": 2, "retry": Retry(NoBackoff(), 0)}
    without_certificate = redis.Redis(
        host=node.host, port=node.port, ssl=True, ssl_ca_certs=str(pki.ca_cert), **once
    )
    with without_certificate, pytest.raises(redis.ConnectionError):
        without_certificate.ping()
    # TLS waits for a whole record: times out
    plaintext = redis.Redis(host=node.host, port=node.port, **once)
    with plaintext, pytest.raises((redis.ConnectionError, redis.TimeoutError)):
        plaintext.ping()
    with node.client() as trusted:  # the devstack's client presents the client certificate
        assert trusted.ping() is True


async def test_etcd_refuses_certificateless_clients_and_checks_name(
        tls_etcd: EtcdProcess, pki: TlsFiles) -> None:
    with pytest.raises(CoordinationUnavailable):
        async with EtcdConnection(
            [tls_etcd.client_url], timeout_s=3, tls=EtcdTls(ca_path=str(pki.ca_cert))
        ):
            pass
    with pytest.raises(CoordinationUnavailable):
        async with EtcdConnection([tls_etcd.endpoint], timeout_s=3):  # plaintext gRPC to a TLS port
            pass
    tls = EtcdTls(
        ca_path=str(pki.ca_cert), cert_path=str(pki.client_cert), key_path=str(pki.client_key)
    )
    async with EtcdConnection([tls_etcd.client_url], timeout_s=3, tls=tls) as conn:
        await conn.ping()
    misnamed = EtcdTls(
        ca_path=str(pki.ca_cert),
        cert_path=str(pki.client_cert),
        key_path=str(pki.client_key),
        # the certificate names 127.0.0.1 and localhost only
        server_name="etcd.elsewhere.example",
    )
    with pytest.raises(CoordinationUnavailable):
        async with EtcdConnection([tls_etcd.client_url], timeout_s=3, tls=misnamed):
            pass
    renamed = EtcdTls(
        ca_path=str(pki.ca_cert),
        cert_path=str(pki.client_cert),
        key_path=str(pki.client_key),
        server_name="localhost",
    )
    async with EtcdConnection([tls_etcd.client_url], timeout_s=3, tls=renamed) as conn:
        await conn.ping()


def test_serve_with_wrong_redis_ca_exits_naming_certificate(
        tls_settings: GatewaySettings, wrong_pki: TlsFiles) -> None:
    result, took = serve_until_exit(
        serve_env(tls_settings, STREAMGATE_REDIS_TLS_CA_PATH=str(wrong_pki.ca_cert))
    )
    assert result.returncode == 1, result.stderr
    assert "streamgate: cannot start: connect: redis cluster unavailable" in result.stderr, (
        result.stderr
    )
    assert "certificate verify failed" in result.stderr.lower(), result.stderr
    assert "Traceback" not in result.stderr
    assert took < STARTUP_FAILURE_BUDGET_S


def test_serve_with_wrong_etcd_ca_exits_naming_etcd(
        tls_settings: GatewaySettings, wrong_pki: TlsFiles) -> None:
    result, took = serve_until_exit(
        serve_env(tls_settings, STREAMGATE_ETCD_TLS_CA_PATH=str(wrong_pki.ca_cert))
    )
    assert result.returncode == 1, result.stderr
    assert "streamgate: cannot start: etcd ping failed" in result.stderr, result.stderr
    assert "CERTIFICATE_VERIFY_FAILED" in result.stderr
    assert "Traceback" not in result.stderr
    assert took < STARTUP_FAILURE_BUDGET_S


def test_serve_refuses_half_or_unreadable_backend_tls(
        tls_settings: GatewaySettings, pki: TlsFiles, tmp_path: Any) -> None:
    cases = {
        "STREAMGATE_REDIS_TLS_CERT_PATH": {"STREAMGATE_REDIS_TLS_KEY_PATH": ""},
        "STREAMGATE_ETCD_TLS_CERT_PATH": {"STREAMGATE_ETCD_TLS_CERT_PATH": ""},
        "STREAMGATE_REDIS_TLS_CA_PATH": {
            "STREAMGATE_REDIS_TLS_CA_PATH": str(tmp_path / "missing-ca.pem")
        },
        "STREAMGATE_ETCD_TLS_CERT_PATH/_KEY_PATH": {
            "STREAMGATE_ETCD_TLS_KEY_PATH": str(pki.ca_cert)
        },
        "STREAMGATE_REDIS_TLS=true": {"STREAMGATE_REDIS_TLS": "false"},
    }
    for expected, overrides in cases.items():
        result, _ = serve_until_exit(serve_env(tls_settings, **overrides))
        assert result.returncode == 2, (overrides, result.stderr)
        assert expected in result.stderr, (overrides, result.stderr)
