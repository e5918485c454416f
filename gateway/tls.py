"""TLS for the gateway's listener: a server context from the tls_* settings (None = plain HTTP)."""

from __future__ import annotations

import ssl

from gateway.settings import GatewaySettings


def server_ssl_context(settings: GatewaySettings) -> ssl.SSLContext | None:
    """The listener's TLS context (TLS 1.2+), with client certificates required when a client CA is set.

    Raises ValueError with the setting's name when the files are missing, unreadable or do not match.
    """
    if not settings.tls_cert_path and not settings.tls_key_path:
        if settings.tls_client_ca_path:
            raise ValueError("STREAMGATE_TLS_CLIENT_CA_PATH needs STREAMGATE_TLS_CERT_PATH and _KEY_PATH")
        return None
    if not settings.tls_cert_path or not settings.tls_key_path:
        raise ValueError("STREAMGATE_TLS_CERT_PATH and STREAMGATE_TLS_KEY_PATH must be set together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(settings.tls_cert_path, settings.tls_key_path)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"STREAMGATE_TLS_CERT_PATH/_KEY_PATH: cannot load the certificate and key: {exc}") from exc
    if settings.tls_client_ca_path:
        try:
            context.load_verify_locations(settings.tls_client_ca_path)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"STREAMGATE_TLS_CLIENT_CA_PATH: cannot load it: {exc}") from exc
        context.verify_mode = ssl.CERT_REQUIRED
    return context
