"""The gateway's one settings object, built once in ``__main__`` from flags and environment, then
frozen.

Every setting has a ``STREAMGATE_<NAME>`` environment variable (upper-cased field name); the Helm
chart's values mirror the same names. No other module reads ``os.environ``.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

ENV_PREFIX = "STREAMGATE_"
MIB = 1024 * 1024
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


def default_node_id() -> str:
    """A node id unique on this host: hostname and process id."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """Everything the gateway process needs; units in names."""

    host: str = "127.0.0.1"
    port: int = 8080
    node_id: str = field(default_factory=default_node_id)
    # the http(s) URL clients reach this gateway at, announced in etcd's node registry; unset:
    # derived from host, port and TLS (the machine's hostname when bound to every address)
    advertise_url: str | None = None
    redis_nodes: tuple[str, ...] = ("127.0.0.1:7000",)
    redis_password: str | None = None
    min_insync_replicas: int = 1
    wait_timeout_ms: int = 1000
    redis_write_deadline_s: float = 10.0
    redis_read_deadline_s: float = 5.0
    # publishes are refused with 507 (nothing written) while a Redis node they would write to holds
    # this share of its maxmemory; the rest is headroom for acks, group reads and nacks
    publish_memory_watermark: float = 0.9
    memory_poll_interval_s: float = 1.0  # INFO memory of every Redis node (metrics, watermark)
    # the archive tier: "none", file:///absolute/path or s3://bucket/prefix (docs/architecture.md)
    archive_url: str = "none"
    archive_s3_endpoint: str | None = None  # host:port of an S3-compatible store (not AWS)
    archive_s3_region: str | None = None
    archive_s3_access_key: str | None = None
    archive_s3_secret_key: str | None = None
    archive_s3_scheme: str = "https"
    archive_s3_credentials_chain: bool = False  # the AWS SDK's own chain (environment, role)
    # a partition's oldest entries leave Redis once its node holds this share of its maxmemory,
    # or once they are older than hot_retention_ms (0: by memory only)
    archive_memory_watermark: float = 0.6
    hot_retention_ms: int = 3_600_000
    archive_interval_s: float = 1.0
    archive_segment_max_entries: int = 100_000
    archive_segment_max_bytes: int = 64 * MIB
    etcd_endpoints: tuple[str, ...] = ("127.0.0.1:2379",)
    etcd_prefix: str = "/streamgate/"
    etcd_timeout_s: float = 5.0
    max_value_bytes: int = MIB
    max_key_bytes: int = 4096
    max_headers: int = 64
    max_header_bytes: int = 16 * 1024
    max_batch_messages: int = 10_000
    max_batch_bytes: int = 16 * MIB
    # a request body not fully received by then: 408 and the connection closed
    body_read_timeout_s: float = 30.0
    max_replay_limit: int = 1000
    dedup_ttl_ms: int = 24 * 3600 * 1000
    acks0_queue_batches: int = 1024
    # values + keys waiting in the acks=0 queue; past it acks=0 waits, then 503
    acks0_queue_bytes: int = 64 * MIB
    # how long an acks=0 publish waits for room in a full queue before its 503
    acks0_queue_wait_ms: int = 200
    member_lease_ttl_s: float = 10.0
    # an exclusive group without owners waits this long for members joining together before its
    # first assignment (no redeliveries as each joins); 0 assigns at once
    group_initial_assignment_delay_ms: int = 500
    owner_lease_ttl_s: float = 10.0
    promote_interval_s: float = 0.1
    retention_interval_s: float = 30.0
    lag_interval_s: float = 5.0
    sweep_interval_s: float = 5.0
    slow_client_timeout_s: float = 10.0
    # after SIGTERM, in-flight requests get this long to finish (under the chart's grace period)
    shutdown_timeout_s: float = 20.0
    ws_max_frame_bytes: int = MIB
    ws_heartbeat_s: float = 30.0
    # a comment on an idle event stream (GET /v1/topics/{topic}/events) so proxies keep it
    sse_heartbeat_s: float = 15.0
    # accept permessage-deflate when a WebSocket client offers it (false: never)
    ws_compression: bool = True
    # encoded frames queued per subscription; past it no delivery is taken
    ws_max_outbox_bytes: int = 4 * MIB
    # publish frames of one WebSocket awaiting their answers; past it a frame is refused (429)
    ws_publish_max_in_flight: int = 256
    # `serve` worker processes sharing the port (SO_REUSEPORT), node ids <node_id>-w<i>
    workers: int = 1
    # with workers > 1, worker i also listens on this port + i (its own /metrics)
    worker_metrics_port: int = 0
    retry_after_s: int = 1
    # `serve`: allocations between young GCs (Python: 700); 0 = Python's defaults
    gc_young_threshold: int = 20_000
    # one aiohttp access-log line per request at INFO (costly per request; metrics count all)
    access_log: bool = False
    # `serve`/`dev`: "uvloop" (libuv, less gateway CPU per message) or "asyncio"
    event_loop: str = "uvloop"
    # "required" or "none" (no authentication at all: local development only)
    auth_mode: str = "required"
    # the web console at /console/ (its API calls are authorized like any other)
    console_enabled: bool = True
    # OpenTelemetry spans for publish and delivery (the otel extra; OTLP per OTEL_EXPORTER_OTLP_*)
    otel_enabled: bool = False
    # the auth TOML: API key hashes, JWT checking, ACL rules, filters
    auth_config_path: str | None = None
    # served without credentials
    auth_public_paths: tuple[str, ...] = ("/healthz", "/readyz", "/metrics")
    # HMAC key of pull receipts, the same on every replica (unset: per process)
    receipt_secret: str | None = None
    # a WebSocket without credentials must send its auth frame by then
    auth_frame_timeout_s: float = 5.0
    # upgraded WebSockets awaiting their auth frame, per process; 0 = no cap
    max_unauthenticated_connections: int = 256
    # open WebSocket subscriptions per principal and process; 0 = no cap
    max_connections_per_principal: int = 1000
    # consumer groups a principal may create, across replicas; 0 = no cap
    max_groups_per_principal: int = 100
    # bytes (keys, values, headers as published) a principal may keep in the log, across replicas;
    # 0 = no cap ([[quotas]] in the auth config: per principal or per tenant)
    max_retained_bytes_per_principal: int = 0
    # un-acked deliveries a principal's consumers may hold, across replicas; 0 = no cap
    max_in_flight_per_principal: int = 0
    # how often a gateway shares its quota usage with the others and reads theirs
    quota_sync_interval_s: float = 1.0
    # /metrics exports the heaviest message keys (message data) per partition
    metrics_expose_keys: bool = False
    # /metrics labels carry group names (false: a stable pseudonym g-<hash>)
    metrics_expose_groups: bool = False
    # PEM certificate chain of the listener (with tls_key_path: HTTPS/WSS)
    tls_cert_path: str | None = None
    tls_key_path: str | None = None
    # when set, clients must present a certificate signed by this CA
    tls_client_ca_path: str | None = None
    redis_tls: bool = False  # TLS to every Redis node ("true"/"false"); the cluster must serve TLS
    # PEM CA that signed the Redis nodes' certificates (unset: system CAs)
    redis_tls_ca_path: str | None = None
    # client certificate for mutual TLS (with redis_tls_key_path)
    redis_tls_cert_path: str | None = None
    redis_tls_key_path: str | None = None  # the client certificate's private key (PEM, unencrypted)
    # node certificates must name the host/IP each node announces
    redis_tls_check_hostname: bool = True
    etcd_tls: bool = False  # TLS to etcd; https:// etcd endpoints turn it on as well
    etcd_tls_ca_path: str | None = None  # PEM CA that signed etcd's certificate (unset: system CAs)
    # client certificate for etcd's --client-cert-auth (with _key_path)
    etcd_tls_cert_path: str | None = None
    etcd_tls_key_path: str | None = None  # the client certificate's private key (PEM, unencrypted)
    # the name to check in etcd's certificate if not the endpoint host
    etcd_tls_server_name: str | None = None
    # Publish rate limits, global across replicas (token buckets in Redis); unset = unlimited.
    rate_limit_principal_messages_per_s: float | None = None
    rate_limit_principal_bytes_per_s: float | None = None
    rate_limit_topic_messages_per_s: float | None = None
    rate_limit_topic_bytes_per_s: float | None = None
    # replay and pull requests per second per principal
    rate_limit_principal_reads_per_s: float | None = None
    # new WebSocket subscriptions per second per principal
    rate_limit_principal_subscribes_per_s: float | None = None
    rate_limit_burst_s: float = 1.0  # a bucket holds this many seconds' worth of its rate
    # push subscriptions' endpoints: host names (`*.example.com` for subdomains) and networks
    # they may be at; with both empty, push is off. Private, loopback and link-local addresses
    # are refused unless a listed network holds them
    push_allowed_hosts: tuple[str, ...] = ()
    push_allowed_cidrs: tuple[str, ...] = ()
    push_allow_http: bool = False  # plain http:// endpoints too (a test bench or a sidecar)
    push_ca_path: str | None = None  # PEM CAs that sign endpoints' certificates (unset: system)
    push_max_subscriptions: int = 1000  # across the cluster

    def __post_init__(self) -> None:
        if self.advertise_url is not None:
            check_advertise_url(self.advertise_url)
        if min(self.max_retained_bytes_per_principal, self.max_in_flight_per_principal) < 0:
            raise ValueError("quota caps are 0 (no cap) or positive")
        if not self.quota_sync_interval_s > 0:
            raise ValueError("quota_sync_interval_s must be positive")
        if not self.sse_heartbeat_s > 0:
            raise ValueError("sse_heartbeat_s must be positive")
        if self.push_max_subscriptions < 0:
            raise ValueError("push_max_subscriptions must be 0 or positive")

    @property
    def advertised_url(self) -> str | None:
        """The URL announced for this gateway: ``advertise_url``, else derived from the listener;
        None when the port is chosen at bind time (0) and so not known here."""
        if self.advertise_url is not None:
            return self.advertise_url
        return listener_url(self.host, self.port, tls=bool(self.tls_cert_path))

    @property
    def etcd_uses_tls(self) -> bool:
        """TLS to etcd: ``etcd_tls`` set or an ``https://`` endpoint."""
        return self.etcd_tls or any(
            endpoint.startswith("https://") for endpoint in self.etcd_endpoints
        )

    @property
    def redis_startup_nodes(self) -> list[tuple[str, int]]:
        """``redis_nodes`` as (host, port) pairs."""
        return [split_host_port(node) for node in self.redis_nodes]

    def with_overrides(self, **changes: Any) -> GatewaySettings:
        """A copy with some fields changed (flags override the environment)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


def split_host_port(address: str) -> tuple[str, int]:
    """Parse ``host:port``; raises ValueError with the address in the message."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()):
        raise ValueError(f"expected host:port, got {address!r}")
    return host, int(port)


def listener_url(host: str, port: int, *, tls: bool) -> str | None:
    """``http(s)://host:port`` of a listener; a wildcard host becomes this machine's hostname."""
    if port == 0:
        return None
    name = socket.gethostname() if host in WILDCARD_HOSTS else host
    bracketed = f"[{name}]" if ":" in name else name
    return f"{'https' if tls else 'http'}://{bracketed}:{port}"


def check_advertise_url(url: str) -> None:
    """An advertise URL clients could not use: ValueError naming the variable."""
    problem = _url_problem(url)
    if problem is not None:
        raise ValueError(f"{ENV_PREFIX}ADVERTISE_URL={url!r}: {problem}")


def _url_problem(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # a bracket left open, a port out of range
        return str(exc)
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        return "expected an absolute http:// or https:// URL with a host (and a port not 0)"
    if parts.query or parts.fragment:
        return "expected no query or fragment"
    return None


TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
FALSE_WORDS = frozenset({"false", "0", "no", "off"})


def parse_bool(raw: str) -> bool:
    """``true/false``, ``1/0``, ``yes/no``, ``on/off`` (any case); anything else raises
    ValueError."""
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError("expected true/false, 1/0, yes/no or on/off")


def settings_from_env(env: Mapping[str, str]) -> GatewaySettings:
    """Build settings from ``STREAMGATE_*`` variables; unknown variables are ignored, bad values
    raise."""
    values: dict[str, Any] = {}
    for spec in fields(GatewaySettings):
        raw = env.get(ENV_PREFIX + spec.name.upper())
        if raw is not None:
            values[spec.name] = _parse(spec.name, str(spec.type), raw)
    return GatewaySettings(**values)


def _parse(name: str, type_name: str, raw: str) -> Any:
    try:
        if type_name.startswith("tuple"):
            return tuple(part.strip() for part in raw.split(",") if part.strip())
        if type_name == "bool":
            return parse_bool(raw)
        if type_name == "int":
            return int(raw)
        if type_name == "float":
            return float(raw)
        if type_name == "float | None":
            return float(raw) if raw.strip() else None
        return raw or None if "None" in type_name else raw
    except ValueError as exc:
        raise ValueError(f"{ENV_PREFIX}{name.upper()}={raw!r}: {exc}") from exc
