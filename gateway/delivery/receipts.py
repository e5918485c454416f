"""Pull receipts: HMAC-signed handles for one delivery, bound to the principal and group that pulled
it.

A receipt carries its topic, partition, offset, ack timeout and issue time; it is refused once older
than its ack timeout plus ``RECEIPT_SLACK_MS``, so a caller can neither mint, move nor stretch one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import invalid_field, receipt_expired
from gateway.offsets import parse_offset
from partitioner.topics import MAX_PARTITIONS

log = logging.getLogger(__name__)

RECEIPT_SLACK_MS = 60_000  # an ack racing the ack timeout (clock skew, a slow client) still counts
MIN_ACK_TIMEOUT_MS = 100
MAX_ACK_TIMEOUT_MS = 3_600_000
MAX_TOKEN_CHARS = 2048  # topic names and offsets are short: a longer token is not one of ours
KEY_BYTES = 32  # also the least a configured secret must have: as much as the HMAC's output
NOT_A_RECEIPT = "not a receipt handle returned by pull"


@dataclass(frozen=True, slots=True)
class Receipt:
    """What a pulled message's receipt handle stands for."""

    topic: str
    partition: int
    offset: str
    ack_timeout_ms: int
    issued_ms: int

    @property
    def expires_ms(self) -> int:
        """When the receipt stops being accepted (epoch ms)."""
        return self.issued_ms + self.ack_timeout_ms + RECEIPT_SLACK_MS


@dataclass(frozen=True, slots=True)
class SealedReceipt:
    """A receipt read from a token but not yet checked against its holder and the clock."""

    receipt: Receipt
    payload: bytes
    tag: bytes
    pointer: str


class ReceiptSigner:
    """Issues and checks receipts with one HMAC-SHA256 key (shared by every replica that serves
    pulls)."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def random(cls) -> ReceiptSigner:
        """A signer with a fresh key: its receipts work only in this process."""
        return cls(secrets.token_bytes(KEY_BYTES))

    def issue(self, receipt: Receipt, principal: str, group: str) -> str:
        """An opaque URL-safe token for ``receipt``, valid only for ``principal`` pulling as
        ``group``."""
        payload = orjson.dumps([receipt.topic, receipt.partition, receipt.offset,
                                receipt.ack_timeout_ms, receipt.issued_ms])
        return f"{_b64(payload)}.{_b64(self._tag(payload, principal, group))}"

    def read(self, token: object, pointer: str) -> SealedReceipt:
        """The receipt a token claims to be (422 naming ``pointer`` when it is not shaped like
        one)."""
        try:
            if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS or token.count(".") != 1:
                raise ValueError("not a token")
            payload_text, tag_text = token.split(".")
            payload, tag = _unb64(payload_text), _unb64(tag_text)
            receipt = _receipt_from(orjson.loads(payload), pointer)
        except (ValueError, TypeError, binascii.Error):  # orjson.JSONDecodeError is a ValueError
            raise invalid_field(pointer, NOT_A_RECEIPT) from None
        return SealedReceipt(receipt, payload, tag, pointer)

    def verify(self, sealed: SealedReceipt, principal: str, group: str, now_ms: int) -> Receipt:
        """The receipt, once its signature binds it to ``principal`` and ``group``; 422 if not, 410
        if expired."""
        if not hmac.compare_digest(sealed.tag, self._tag(sealed.payload, principal, group)):
            raise invalid_field(sealed.pointer, f"{NOT_A_RECEIPT} to this principal for this group")
        if now_ms > sealed.receipt.expires_ms:
            raise receipt_expired(sealed.pointer,
                                  "the receipt expired (its ack timeout passed); pull again")
        return sealed.receipt

    def _tag(self, payload: bytes, principal: str, group: str) -> bytes:
        # The holder is signed but not carried: a receipt shown by anyone else fails the check.
        holder = orjson.dumps([principal, group])
        return hmac.new(self._key, holder + payload, hashlib.sha256).digest()


def signer_for(secret: str | None) -> ReceiptSigner:
    """The signer of a configured secret; without one, a random key, announced once because receipts
    then work only on the replica (and worker) that issued them. ValueError when the secret is too
    short."""
    if secret is None:
        log.warning("receipt_secret is not set: pull receipts are signed with a random key and "
                    "are accepted only by this gateway process; set STREAMGATE_RECEIPT_SECRET on "
                    "every replica")
        return ReceiptSigner.random()
    key = secret.encode()
    if len(key) < KEY_BYTES:
        raise ValueError(f"receipt_secret must be at least {KEY_BYTES} bytes")
    return ReceiptSigner(key)


def _receipt_from(data: Any, pointer: str) -> Receipt:
    if not isinstance(data, list) or len(data) != 5:
        raise ValueError("wrong shape")
    topic, partition, offset, ack_timeout_ms, issued_ms = data
    if not (isinstance(topic, str) and isinstance(offset, str) and all(
            isinstance(n, int) and not isinstance(n, bool)
            for n in (partition, ack_timeout_ms, issued_ms))):
        raise ValueError("wrong types")
    if not (0 <= partition < MAX_PARTITIONS
            and MIN_ACK_TIMEOUT_MS <= ack_timeout_ms <= MAX_ACK_TIMEOUT_MS
            and 0 <= issued_ms < 2**63):
        raise ValueError("out of range")
    parse_offset(offset, pointer)
    return Receipt(topic, partition, offset, ack_timeout_ms, issued_ms)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
