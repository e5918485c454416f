"""The streamgate source over TLS: its redisTls* options, and a batch read from a TLS-only Redis
Cluster."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from pyspark.sql import SparkSession

from storage.keys import log_key
from streamgate_devstack import RedisClusterConfig, RedisClusterProcess
from streamgate_devstack.certs import TlsFiles, make_pki
from streamgate_spark.errors import InvalidSourceOption
from streamgate_spark.options import RedisTls, parse_options

pytestmark = pytest.mark.spark

BASE = {"topic": "t", "redisNodes": "h:1", "partitions": "0"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_pki(tmp_path_factory.mktemp("spark-pki"))


@pytest.fixture(scope="module")
def tls_cluster(devstack_binaries: None, tmp_path_factory: pytest.TempPathFactory,
                pki: TlsFiles) -> Iterator[RedisClusterProcess]:
    """TLS-only, client certificates required; 3 primaries and no replicas: the source only
    reads."""
    cluster = RedisClusterProcess(RedisClusterConfig(
        data_dir=tmp_path_factory.mktemp("spark-tls-redis"), primaries=3, replicas_per_primary=0,
        tls=pki))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_redis_tls_options_parse_into_client_settings() -> None:
    parsed = parse_options({**BASE, "redisTls": "true", "redisTlsCaPath": "/ca.pem",
                            "redisTlsCertPath": "/c.pem", "redisTlsKeyPath": "/k.pem",
                            "redisTlsCheckHostname": "false"})
    assert parsed.redis_tls == RedisTls("/ca.pem", "/c.pem", "/k.pem", check_hostname=False)
    options = parsed.redis_tls.client_options()
    assert (options["ssl"], options["ssl_ca_certs"], options["ssl_certfile"],
            options["ssl_keyfile"]) == (True, "/ca.pem", "/c.pem", "/k.pem")
    assert parse_options(BASE).redis_tls is None
    assert parse_options({**BASE, "redisTls": "true"}).redis_tls == RedisTls()


@pytest.mark.parametrize(("extra", "named"), [
    ({"redisTlsCaPath": "/ca.pem"}, "redisTlsCaPath"),
    ({"redisTls": "true", "redisTlsCertPath": "/c.pem"}, "redisTlsCertPath"),
    ({"redisTls": "true", "redisTlsKeyPath": "/k.pem"}, "redisTlsCertPath"),
    ({"redisTls": "yes please"}, "redisTls"),
])
def test_half_configured_redis_tls_options_are_refused(extra: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidSourceOption, match=named):
        parse_options({**BASE, **extra})


def test_batch_read_from_tls_cluster_with_client_certificate(
        spark: SparkSession, tls_cluster: RedisClusterProcess, pki: TlsFiles) -> None:
    topic = "spark-tls"
    with tls_cluster.client(decode_responses=False) as cluster:
        offsets = [cluster.xadd(log_key(topic, 0),
                                {"v": orjson.dumps({"n": n}), "f": b"j"}).decode()
                   for n in range(4)]
    options: dict[str, Any] = {
        "topic": topic, "partitions": "0", "commitProgress": "false",
        "redisNodes": ",".join(f"{host}:{port}" for host, port in tls_cluster.startup_nodes),
        "redisTls": "true", "redisTlsCaPath": str(pki.ca_cert),
        "redisTlsCertPath": str(pki.client_cert), "redisTlsKeyPath": str(pki.client_key)}
    rows = spark.read.format("streamgate").options(**options).load().orderBy("offset").collect()
    assert [row.offset for row in rows] == offsets
    assert [row.value_str for row in rows] == [f'{{"n":{n}}}' for n in range(4)]
