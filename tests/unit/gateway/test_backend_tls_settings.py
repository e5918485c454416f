"""Settings of TLS to Redis and etcd: parsing from the environment, validation, what reaches the
clients."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import pytest

from gateway.app import redis_store_settings
from gateway.settings import GatewaySettings, parse_bool, settings_from_env
from gateway.tls import check_backend_tls, etcd_tls
from partitioner.etcd.values import EtcdTls
from storage.settings import RedisStoreSettings
from streamgate_devstack.certs import TlsFiles, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_booleans_parse_the_usual_words_only() -> None:
    assert [parse_bool(word) for word in ("true", "TRUE", "1", "yes", "on", " True ")] == [True] * 6
    assert [parse_bool(word) for word in ("false", "False", "0", "no", "off")] == [False] * 5
    for word in ("", "2", "maybe", "tru"):
        with pytest.raises(ValueError, match="expected true/false"):
            parse_bool(word)


def test_tls_settings_come_from_streamgate_variables() -> None:
    settings = settings_from_env(
        {
            "STREAMGATE_REDIS_TLS": "1", "STREAMGATE_REDIS_TLS_CA_PATH": "/ca.pem",
            "STREAMGATE_REDIS_TLS_CERT_PATH": "/c.pem", "STREAMGATE_REDIS_TLS_KEY_PATH": "/k.pem",
            "STREAMGATE_REDIS_TLS_CHECK_HOSTNAME": "false", "STREAMGATE_ETCD_TLS": "true",
            "STREAMGATE_ETCD_TLS_CA_PATH": "/eca.pem",
            "STREAMGATE_ETCD_TLS_SERVER_NAME": "etcd.internal"
        }
    )
    assert (
        settings.redis_tls, settings.redis_tls_ca_path, settings.redis_tls_cert_path,
        settings.redis_tls_key_path, settings.redis_tls_check_hostname
    ) == (True, "/ca.pem", "/c.pem", "/k.pem", False)
    assert (settings.etcd_tls, settings.etcd_tls_ca_path, settings.etcd_tls_server_name) == (
        True, "/eca.pem", "etcd.internal")
    defaults = settings_from_env({})
    assert (defaults.redis_tls, defaults.etcd_uses_tls, defaults.redis_tls_check_hostname) == (
        False, False, True
    )


def test_a_bad_boolean_names_its_variable() -> None:
    with pytest.raises(ValueError, match="STREAMGATE_REDIS_TLS='sure'"):
        settings_from_env({"STREAMGATE_REDIS_TLS": "sure"})


def test_an_https_etcd_endpoint_turns_etcd_tls_on() -> None:
    settings = GatewaySettings(
        etcd_endpoints=("https://10.0.0.1:2379",), etcd_tls_ca_path="/ca.pem"
    )
    assert settings.etcd_uses_tls
    assert etcd_tls(settings) == EtcdTls(ca_path="/ca.pem")
    assert etcd_tls(GatewaySettings()) is None


def test_redis_tls_settings_reach_the_store(pki: TlsFiles) -> None:
    settings = GatewaySettings(
        redis_tls=True, redis_tls_ca_path=str(pki.ca_cert),
        redis_tls_cert_path=str(pki.client_cert), redis_tls_key_path=str(pki.client_key)
    )
    options = redis_store_settings(settings).tls_options()
    assert options["ssl"] is True
    assert (options["ssl_ca_certs"], options["ssl_certfile"], options["ssl_keyfile"]) == (
        str(pki.ca_cert), str(pki.client_cert), str(pki.client_key))
    assert options["ssl_cert_reqs"] == "required"
    assert options["ssl_check_hostname"] is True
    assert options["ssl_min_version"] == ssl.TLSVersion.TLSv1_2
    assert redis_store_settings(GatewaySettings()).tls_options() == {}


def test_complete_backend_tls_passes_the_check(pki: TlsFiles) -> None:
    check_backend_tls(
        GatewaySettings(
            redis_tls=True, redis_tls_ca_path=str(pki.ca_cert),
            redis_tls_cert_path=str(pki.client_cert), redis_tls_key_path=str(pki.client_key),
            etcd_tls=True, etcd_tls_ca_path=str(pki.ca_cert),
            etcd_tls_cert_path=str(pki.client_cert), etcd_tls_key_path=str(pki.client_key)
        )
    )
    # system CAs, no client certificate
    check_backend_tls(GatewaySettings(redis_tls=True, etcd_tls=True))
    check_backend_tls(GatewaySettings())


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"redis_tls": True, "redis_tls_cert_path": "CERT"},
            "STREAMGATE_REDIS_TLS_CERT_PATH and STREAMGATE_REDIS_TLS_KEY",
        ),
        (
            {"redis_tls": True, "redis_tls_key_path": "KEY"},
            "STREAMGATE_REDIS_TLS_CERT_PATH and STREAMGATE_REDIS_TLS_KEY",
        ),
        (
            {"etcd_tls": True, "etcd_tls_key_path": "KEY"},
            "STREAMGATE_ETCD_TLS_CERT_PATH and STREAMGATE_ETCD_TLS_KEY",
        ),
        ({"redis_tls_ca_path": "CA"}, "set STREAMGATE_REDIS_TLS=true"),
        (
            {"etcd_tls_cert_path": "CERT", "etcd_tls_key_path": "KEY"},
            "set STREAMGATE_ETCD_TLS=true",
        ),
        (
            {"redis_tls": True, "redis_tls_ca_path": "MISSING"},
            "STREAMGATE_REDIS_TLS_CA_PATH: cannot load",
        ),
        ({"etcd_tls": True, "etcd_tls_ca_path": "KEY"}, "STREAMGATE_ETCD_TLS_CA_PATH: cannot load"),
        (
            {"redis_tls": True, "redis_tls_cert_path": "CERT", "redis_tls_key_path": "CA"},
            "STREAMGATE_REDIS_TLS_CERT_PATH/_KEY_PATH: cannot load",
        ),
    ],
)
def test_half_or_unreadable_backend_tls_is_refused(
        pki: TlsFiles, tmp_path: Path, fields: dict[str, object], message: str) -> None:
    files = {"CERT": str(pki.client_cert), "KEY": str(pki.client_key), "CA": str(pki.ca_cert),
             "MISSING": str(tmp_path / "missing.pem")}
    values = {
        name: files.get(value, value) if isinstance(value, str) else value
        for name, value in fields.items()
    }
    with pytest.raises(ValueError, match=re.escape(message)):
        check_backend_tls(GatewaySettings(**values))  # type: ignore[arg-type]


def test_the_store_settings_refuse_half_configured_tls() -> None:
    with pytest.raises(ValueError, match="tls_cert_path and tls_key_path must be set together"):
        RedisStoreSettings(tls=True, tls_cert_path="/c.pem")
    with pytest.raises(ValueError, match="need tls=True"):
        RedisStoreSettings(tls_ca_path="/ca.pem")
    with pytest.raises(ValueError, match="certificate and key must be set together"):
        EtcdTls(key_path="/k.pem")
