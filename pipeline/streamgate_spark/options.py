"""The ``streamgate`` source's options, parsed once from Spark's case-insensitive option map.

Spark hands options over as a case-insensitive mapping of strings; look them up through it (never
``dict(options)``, which keeps whatever case the user typed).
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from storage.archive.object_store import S3Settings
from streamgate_spark import stream_ids
from streamgate_spark.archive_files import ArchiveAccess
from streamgate_spark.errors import InvalidOption, InvalidSourceOption

EARLIEST = "earliest"
LATEST = "latest"
SNAPSHOT = "snapshot"  # a compacted topic's snapshot first, then what follows it
DEFAULT_PAGE_SIZE = 1000
DEFAULT_PORT = 6379

# A start position: "earliest", "latest" or an exclusive stream ID.
Position = str


@dataclass(frozen=True)
class RedisTls:
    """TLS to the Redis Cluster: the CA of the nodes' certificates, a client certificate for mutual
    TLS."""

    ca_path: str | None = None  # None: the system's CAs
    cert_path: str | None = None
    key_path: str | None = None
    check_hostname: bool = True

    def client_options(self) -> dict[str, Any]:
        """redis-py keyword arguments (TLS 1.2+, certificates verified)."""
        return {"ssl": True, "ssl_ca_certs": self.ca_path, "ssl_certfile": self.cert_path,
                "ssl_keyfile": self.key_path, "ssl_cert_reqs": "required",
                "ssl_check_hostname": self.check_hostname,
                "ssl_min_version": ssl.TLSVersion.TLSv1_2}

    def context(self) -> ssl.SSLContext:
        """The same as an ``ssl`` context, for the source's own sockets to the nodes."""
        context = ssl.create_default_context(cafile=self.ca_path)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = self.check_hostname
        if self.cert_path:
            context.load_cert_chain(self.cert_path, self.key_path)
        return context


@dataclass(frozen=True)
class SourceOptions:
    """Everything the readers need, as plain picklable values."""

    topic: str
    redis_nodes: tuple[tuple[str, int], ...]
    partitions: tuple[int, ...] | None
    gateway: str | None
    starting: Position | dict[int, Position]
    ending: Position | dict[int, Position]
    max_entries_per_trigger: int | None
    page_size: int
    fail_on_data_loss: bool
    consumer_name: str
    commit_progress: bool
    redis_tls: RedisTls | None = None  # None: plaintext
    snapshot_lag_ms: int | None = None  # how old a snapshot may get (the topic's compaction lag)
    archive: ArchiveAccess | None = None  # None: a range reaching the archive tier fails
    schema_version: int | None = None  # None: values as written
    # credentials of the gateway reads, kept out of repr: a plan or an error may print the options
    api_key: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)

    @property
    def from_snapshot(self) -> bool:
        """Whether the query starts from each partition's snapshot."""
        return self.starting == SNAPSHOT

    def start_for(self, partition: int) -> Position:
        """The start position of one partition (JSON maps default a missing partition to
        earliest)."""
        if isinstance(self.starting, dict):
            return self.starting.get(partition, EARLIEST)
        return self.starting

    def end_for(self, partition: int) -> Position:
        """The batch reader's end position of one partition (missing from a JSON map: latest)."""
        if isinstance(self.ending, dict):
            return self.ending.get(partition, LATEST)
        return self.ending

    def gateway_headers(self) -> dict[str, str]:
        """The ``Authorization`` header of the driver's gateway reads, sent as the client library
        sends it (a token preferred); {} without credentials."""
        if not (self.api_key or self.token):
            return {}
        # Imported here: the client library pulls in aiohttp, which only a driver with
        # credentials needs.
        from streamgate_client.credentials import auth_headers

        return auth_headers(self.api_key, self.token)


def parse_options(options: Mapping[str, Any]) -> SourceOptions:
    """Validate and convert the source options; raises InvalidSourceOption."""
    topic = required_option(options, "topic")
    partitions = _partitions(options.get("partitions"))
    gateway = options.get("gateway")
    if partitions is None and not gateway:
        raise InvalidSourceOption("partitions",
                                  "give 'partitions' (e.g. '0,1,2,3') or 'gateway' (a base URL)")
    return SourceOptions(
        topic=topic,
        redis_nodes=parse_nodes(required_option(options, "redisNodes")),
        partitions=partitions,
        gateway=str(gateway).rstrip("/") if gateway else None,
        starting=_starting(options),
        ending=_positions("endingOffsets", options.get("endingOffsets") or LATEST),
        max_entries_per_trigger=positive_int_option(options, "maxEntriesPerTrigger", None),
        page_size=positive_int_option(options, "pageSize", DEFAULT_PAGE_SIZE) or DEFAULT_PAGE_SIZE,
        fail_on_data_loss=bool_option(options, "failOnDataLoss", True),
        consumer_name=options.get("consumerName") or f"spark-{topic}",
        commit_progress=bool_option(options, "commitProgress", True),
        redis_tls=_redis_tls(options),
        snapshot_lag_ms=positive_int_option(options, "snapshotLagMs", None),
        archive=_archive(options),
        schema_version=_schema_version(options, gateway),
        api_key=options.get("apiKey") or None,
        token=options.get("token") or None,
    )


def _schema_version(options: Mapping[str, Any], gateway: object) -> int | None:
    version = positive_int_option(options, "schemaVersion", None)
    if version is not None and not gateway:
        raise InvalidSourceOption("schemaVersion", "needs 'gateway': the topic's schema versions "
                                  "are read from it")
    return version


_S3_OPTIONS = ("archiveS3Endpoint", "archiveS3Region", "archiveS3AccessKey", "archiveS3SecretKey",
               "archiveS3Scheme", "archiveS3CredentialsChain")


def _archive(options: Mapping[str, Any]) -> ArchiveAccess | None:
    url = str(options.get("archiveUrl") or "")
    if url in ("", "none"):
        given = [name for name in _S3_OPTIONS if options.get(name)]
        if given:
            raise InvalidSourceOption(given[0], "needs archiveUrl")
        return None
    access = ArchiveAccess(url, _s3_settings(options) if url.startswith("s3:") else None)
    try:
        access.root()  # the URL checked on the driver, before any task runs
    except ValueError as exc:
        raise InvalidSourceOption("archiveUrl", str(exc)) from None
    return access


def _s3_settings(options: Mapping[str, Any]) -> S3Settings:
    scheme = str(options.get("archiveS3Scheme") or "https")
    if scheme not in ("http", "https"):
        raise InvalidSourceOption("archiveS3Scheme", f"expected http or https, got {scheme!r}")
    return S3Settings(endpoint_override=options.get("archiveS3Endpoint") or None,
                      region=options.get("archiveS3Region") or None,
                      access_key=options.get("archiveS3AccessKey") or None,
                      secret_key=options.get("archiveS3SecretKey") or None, scheme=scheme,
                      credentials_chain=bool_option(options, "archiveS3CredentialsChain", False))


def _redis_tls(options: Mapping[str, Any]) -> RedisTls | None:
    paths = {name: str(options.get(name) or "") or None
             for name in ("redisTlsCaPath", "redisTlsCertPath", "redisTlsKeyPath")}
    if not bool_option(options, "redisTls", False):
        given = [name for name, value in paths.items() if value]
        if given:
            raise InvalidSourceOption(given[0], "needs redisTls=true")
        return None
    if bool(paths["redisTlsCertPath"]) != bool(paths["redisTlsKeyPath"]):
        raise InvalidSourceOption("redisTlsCertPath",
                                  "redisTlsCertPath and redisTlsKeyPath go together")
    return RedisTls(paths["redisTlsCaPath"], paths["redisTlsCertPath"], paths["redisTlsKeyPath"],
                    bool_option(options, "redisTlsCheckHostname", True))


def parse_nodes(text: str) -> tuple[tuple[str, int], ...]:
    """``host:port,host:port`` (port defaults to 6379) as a tuple of pairs."""
    nodes = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, _, port = item.rpartition(":") if ":" in item else (item, "", str(DEFAULT_PORT))
        if not (port.isascii() and port.isdigit()):
            raise InvalidSourceOption("redisNodes", f"bad port in {item!r}")
        nodes.append((host, int(port)))
    if not nodes:
        raise InvalidSourceOption("redisNodes", "at least one host:port is required")
    return tuple(nodes)


def required_option(options: Mapping[str, Any], name: str,
                    error: type[InvalidOption] = InvalidSourceOption) -> str:
    """The option's value; ``error`` when it is missing or empty."""
    value = options.get(name)
    if not value:
        raise error(name, "is required")
    return str(value)


def _partitions(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        chosen = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise InvalidSourceOption("partitions",
                                  f"expected comma-separated integers, got {text!r}") from None
    if not chosen or chosen[0] < 0:
        raise InvalidSourceOption("partitions",
                                  f"expected non-negative partition numbers, got {text!r}")
    return tuple(chosen)


def _starting(options: Mapping[str, Any]) -> Position | dict[int, Position]:
    timestamp = options.get("startingTimestampMs")
    if timestamp:
        if not (str(timestamp).isascii() and str(timestamp).isdigit()):
            raise InvalidSourceOption("startingTimestampMs",
                                      f"expected epoch milliseconds, got {timestamp!r}")
        return stream_ids.before_time(int(timestamp))
    text = options.get("startingOffsets") or EARLIEST
    if text == SNAPSHOT:
        return SNAPSHOT
    return _positions("startingOffsets", text)


def _positions(name: str, text: str) -> Position | dict[int, Position]:
    if text in (EARLIEST, LATEST):
        return text
    try:
        doc = json.loads(text)
    except ValueError:
        raise InvalidSourceOption(name,
                                  "expected earliest, latest or a JSON "
                                  f"object, got {text!r}") from None
    if not isinstance(doc, dict):
        raise InvalidSourceOption(name, "the JSON form must be an object {partition: stream ID}")
    return {_partition_key(name, key): _position(name, value) for key, value in doc.items()}


def _partition_key(name: str, key: str) -> int:
    if not (key.isascii() and key.isdigit()):
        raise InvalidSourceOption(name, f"partition {key!r} is not a non-negative integer")
    return int(key)


def _position(name: str, value: Any) -> Position:
    if value in (EARLIEST, LATEST) or (isinstance(value, str) and stream_ids.is_valid(value)):
        return str(value)
    raise InvalidSourceOption(name,
                              f"{value!r} is neither earliest, latest nor a stream ID '<ms>-<seq>'")


def positive_int_option(options: Mapping[str, Any], name: str, default: int | None,
                        error: type[InvalidOption] = InvalidSourceOption) -> int | None:
    """The option as a positive integer, ``default`` when absent."""
    value = options.get(name)
    if value is None or value == "":
        return default
    if not (str(value).isascii() and str(value).isdigit()) or int(value) <= 0:
        raise error(name, f"expected a positive integer, got {value!r}")
    return int(value)


def bool_option(options: Mapping[str, Any], name: str, default: bool,
                error: type[InvalidOption] = InvalidSourceOption) -> bool:
    """The option as true or false, ``default`` when absent."""
    value = options.get(name)
    if value is None or value == "":
        return default
    lowered = str(value).lower()
    if lowered not in ("true", "false"):
        raise error(name, f"expected true or false, got {value!r}")
    return lowered == "true"
