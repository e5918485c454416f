"""The gateway listener over TLS: HTTPS and WSS with a certificate, plain HTTP refused, bad files
refused."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from processes import start_gateway

from gateway.settings import GatewaySettings
from streamgate_devstack.certs import self_signed
from streamgate_devstack.ports import free_port

pytestmark = pytest.mark.integration


def serve_env(settings: GatewaySettings, **extra: str) -> dict[str, str]:
    return {**os.environ, "STREAMGATE_REDIS_NODES": ",".join(settings.redis_nodes),
            "STREAMGATE_ETCD_ENDPOINTS": ",".join(settings.etcd_endpoints),
            "STREAMGATE_ETCD_PREFIX": settings.etcd_prefix, "STREAMGATE_AUTH_MODE": "none", **extra}


@pytest.fixture
def tls_gateway(gateway_settings: GatewaySettings, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    cert, key = self_signed(tmp_path)
    port = free_port()
    env = serve_env(
        gateway_settings, STREAMGATE_TLS_CERT_PATH=str(cert), STREAMGATE_TLS_KEY_PATH=str(key)
    )
    process = start_gateway(port, env)
    try:
        context = ssl.create_default_context(cafile=str(cert))
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, "the TLS gateway exited"
            try:
                with urllib.request.urlopen(
                    f"https://127.0.0.1:{port}/readyz", context=context, timeout=2
                ) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the TLS gateway never became ready"
            time.sleep(0.1)
        yield f"127.0.0.1:{port}", cert
    finally:
        process.terminate()
        process.wait(timeout=15)


async def test_publish_and_subscribe_work_over_https_and_wss(
    tls_gateway: tuple[str, Path], topic_name: str
) -> None:
    address, cert = tls_gateway
    context = ssl.create_default_context(cafile=str(cert))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as http:
        async with http.post(
            f"https://{address}/v1/topics", json={"name": topic_name, "partitions": 1}
        ) as r:
            assert r.status == 201
        async with http.ws_connect(
            f"wss://{address}/v1/subscribe",
            params={"topic": topic_name, "mode": "broadcast", "from": "latest"},
        ) as ws:
            # `latest` is pinned when the assignment frame is sent: publish after it arrives.
            assert (await ws.receive_json(timeout=10))["type"] == "assignment"
            async with http.post(f"https://{address}/v1/topics/{topic_name}/messages",
                                 json={"messages": [{"value": "over tls"}]}) as r:
                assert r.status == 200
            values = []
            while not values:
                doc = await ws.receive_json(timeout=10)
                if doc["type"] == "message":
                    values.append(doc["value"])
            assert values == ["over tls"]


def test_plain_http_and_untrusted_clients_are_refused(tls_gateway: tuple[str, Path]) -> None:
    address, _ = tls_gateway
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(f"http://{address}/healthz", timeout=5).read()
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(f"https://{address}/healthz", timeout=5)


def test_serve_refuses_half_or_unreadable_tls(
    gateway_settings: GatewaySettings, tmp_path: Path
) -> None:
    for extra in ({"STREAMGATE_TLS_CERT_PATH": str(tmp_path / "cert.pem")},
                  {"STREAMGATE_TLS_CERT_PATH": str(tmp_path / "missing.pem"),
                   "STREAMGATE_TLS_KEY_PATH": str(tmp_path / "missing-key.pem")}):
        result = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "serve", "--port", str(free_port())],
            env=serve_env(gateway_settings, **extra),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 2, result.stderr
        assert "STREAMGATE_TLS_" in result.stderr
