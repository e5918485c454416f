"""TLS of the gateway: the listener's server context (tls_* settings, None = plain HTTP), and the
checks and client options for TLS to Redis (redis_tls_*) and etcd (etcd_tls_*)."""

from __future__ import annotations

import ssl

from gateway.settings import ENV_PREFIX, GatewaySettings
from partitioner.etcd.values import EtcdTls


def server_ssl_context(settings: GatewaySettings) -> ssl.SSLContext | None:
    """The listener's TLS context (TLS 1.2+), with client certificates required when a client CA is
    set.

    Raises ValueError with the setting's name when the files are missing, unreadable or do not
    match.
    """
    if not settings.tls_cert_path and not settings.tls_key_path:
        if settings.tls_client_ca_path:
            raise ValueError("STREAMGATE_TLS_CLIENT_CA_PATH needs STREAMGATE_TLS_CERT_PATH and "
                             "_KEY_PATH")
        return None
    if not settings.tls_cert_path or not settings.tls_key_path:
        raise ValueError("STREAMGATE_TLS_CERT_PATH and STREAMGATE_TLS_KEY_PATH must be set "
                         "together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(settings.tls_cert_path, settings.tls_key_path)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError("STREAMGATE_TLS_CERT_PATH/_KEY_PATH: cannot load the certificate and "
                         f"key: {exc}") from exc
    if settings.tls_client_ca_path:
        try:
            context.load_verify_locations(settings.tls_client_ca_path)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"STREAMGATE_TLS_CLIENT_CA_PATH: cannot load it: {exc}") from exc
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def check_backend_tls(settings: GatewaySettings) -> None:
    """Refuse half-configured or unreadable client TLS to Redis and etcd before anything connects.

    Raises ValueError naming the ``STREAMGATE_*`` variable: a certificate without its key (or the
    reverse), TLS files set while TLS is off, or a CA, certificate or key that cannot be loaded.
    """
    _check_client_files("REDIS_TLS", settings.redis_tls, settings.redis_tls_ca_path,
                        settings.redis_tls_cert_path, settings.redis_tls_key_path)
    _check_client_files("ETCD_TLS", settings.etcd_uses_tls, settings.etcd_tls_ca_path,
                        settings.etcd_tls_cert_path, settings.etcd_tls_key_path)


def etcd_tls(settings: GatewaySettings) -> EtcdTls | None:
    """The etcd client's TLS options, None for plaintext."""
    if not settings.etcd_uses_tls:
        return None
    return EtcdTls(ca_path=settings.etcd_tls_ca_path, cert_path=settings.etcd_tls_cert_path,
                   key_path=settings.etcd_tls_key_path, server_name=settings.etcd_tls_server_name)


def _check_client_files(group: str, enabled: bool, ca_path: str | None, cert_path: str | None,
                        key_path: str | None) -> None:
    name = ENV_PREFIX + group
    if not enabled:
        if ca_path or cert_path or key_path:
            raise ValueError(f"{name}_CA_PATH/_CERT_PATH/_KEY_PATH are set but {name} is off: set "
                             f"{name}=true")
        return
    if bool(cert_path) != bool(key_path):
        raise ValueError(f"{name}_CERT_PATH and {name}_KEY_PATH must be set together (mutual TLS)")
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if ca_path:
        try:
            context.load_verify_locations(ca_path)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"{name}_CA_PATH: cannot load {ca_path}: {exc}") from exc
    if cert_path and key_path:
        try:
            context.load_cert_chain(cert_path, key_path)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"{name}_CERT_PATH/_KEY_PATH: cannot load the certificate and key: "
                             f"{exc}") from exc
