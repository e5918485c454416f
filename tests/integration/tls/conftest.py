"""A TLS-only Redis Cluster (3 primaries + 3 replicas: acks=all over TLS replication) and a TLS
etcd, both requiring client certificates, started once for this directory's module and stopped by
PID."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from gateway.settings import GatewaySettings
from streamgate_devstack import EtcdConfig, EtcdProcess, RedisClusterConfig, RedisClusterProcess
from streamgate_devstack.certs import TlsFiles, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """The CA, server and client certificates the TLS servers and the gateway use."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def wrong_pki(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """Another CA (same names): nothing it signed is trusted by the servers, and it trusts none of
    them."""
    return make_pki(tmp_path_factory.mktemp("wrong-pki"), prefix="wrong-")


@pytest.fixture(scope="module")
def tls_redis_cluster(devstack_binaries: None, tmp_path_factory: pytest.TempPathFactory,
                      pki: TlsFiles) -> Iterator[RedisClusterProcess]:
    """TLS on the client port (plaintext port off), the cluster bus and replication; client certs
    required."""
    cluster = RedisClusterProcess(
        RedisClusterConfig(
            data_dir=tmp_path_factory.mktemp("tls-redis"),
            primaries=3,
            replicas_per_primary=1,
            tls=pki,
        )
    )
    cluster.start()  # stops whatever it started if it fails
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def tls_etcd(
    devstack_binaries: None, tmp_path_factory: pytest.TempPathFactory, pki: TlsFiles
) -> Iterator[EtcdProcess]:
    """etcd on an https:// client URL with --client-cert-auth."""
    server = EtcdProcess(EtcdConfig(data_dir=tmp_path_factory.mktemp("tls-etcd"), tls=pki))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def tls_settings(
    tls_redis_cluster: RedisClusterProcess, tls_etcd: EtcdProcess, pki: TlsFiles
) -> GatewaySettings:
    """Gateway settings for the TLS servers, with the client certificate for both (mutual TLS)."""
    return GatewaySettings(
        auth_mode="none",
        redis_nodes=tuple(f"{host}:{port}" for host, port in tls_redis_cluster.startup_nodes),
        etcd_endpoints=(tls_etcd.client_url,),
        etcd_prefix=f"/streamgate-tls-{uuid.uuid4().hex[:8]}/",
        min_insync_replicas=1,
        wait_timeout_ms=500,
        redis_write_deadline_s=3.0,
        redis_tls=True,
        redis_tls_ca_path=str(pki.ca_cert),
        redis_tls_cert_path=str(pki.client_cert),
        redis_tls_key_path=str(pki.client_key),
        etcd_tls_ca_path=str(pki.ca_cert),
        etcd_tls_cert_path=str(pki.client_cert),
        etcd_tls_key_path=str(pki.client_key),
    )
