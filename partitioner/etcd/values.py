"""The plain values on either side of the etcd connection: what etcd stores and streams, what a
transaction checks, and where and how to reach it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["DEFAULT_PREFIX", "EtcdTls", "Guard", "Snapshot", "StoredValue", "WatchEvent"]

DEFAULT_PREFIX = "/streamgate/"


@dataclass(frozen=True, slots=True)
class StoredValue:
    """One key as etcd stores it."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    lease_id: int = 0  # 0 when no lease is attached


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every key under a prefix, read at one ``revision``."""

    values: list[StoredValue]
    revision: int


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A put or delete of one key; ``mod_revision`` is the revision of the change.

    For a put, ``create_revision`` and ``lease_id`` describe the key as stored; for a delete they
    are 0.
    """

    kind: Literal["put", "delete"]
    key: bytes
    value: bytes
    mod_revision: int
    create_revision: int = 0
    lease_id: int = 0


@dataclass(frozen=True, slots=True)
class Guard:
    """A transaction precondition: ``key``'s create_revision (or mod_revision) equals ``revision``.

    ``revision == 0`` means "the key is absent".
    """

    key: bytes
    revision: int
    target: Literal["create", "mod"] = "create"


@dataclass(frozen=True, slots=True)
class EtcdTls:
    """TLS to etcd (https:// client URLs): the CA that signed etcd's certificate, a client
    certificate for mutual TLS (``--client-cert-auth``), and the name to check in etcd's certificate
    when it is not the host."""

    ca_path: str | None = None  # None: the system's CAs
    cert_path: str | None = None
    key_path: str | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if bool(self.cert_path) != bool(self.key_path):
            raise ValueError("the etcd client certificate and key must be set together")
