"""Standard Webhooks signing of push requests: `whsec_` secrets and the webhook-id,
webhook-timestamp and webhook-signature headers (HMAC-SHA256, one signature per live secret)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from collections.abc import Sequence

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
MIN_KEY_BYTES = 24
MAX_KEY_BYTES = 64


def new_secret() -> str:
    """A new random signing secret: `whsec_` and the base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def secret_key(secret: str) -> bytes:
    """The HMAC key a secret stands for; ValueError when it is not `whsec_` + base64 of 24-64
    bytes."""
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError(f"a signing secret starts with {SECRET_PREFIX!r}")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX):], validate=True)
    except binascii.Error as exc:
        raise ValueError("a signing secret's key is not valid base64") from exc
    if not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
        raise ValueError(f"a signing secret's key has {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes")
    return key


def signature_header(
    keys: Sequence[bytes], message_id: str, timestamp_s: int, body: bytes
) -> str:
    """The webhook-signature value: `v1,<base64 HMAC-SHA256>` per key, in the keys' order."""
    if not keys:
        raise ValueError("a push request is signed by at least one secret")
    signed = f"{message_id}.{timestamp_s}.".encode() + body
    return " ".join(
        "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode("ascii")
        for key in keys
    )


def webhook_headers(
    keys: Sequence[bytes], message_id: str, body: bytes, now_s: float | None = None
) -> dict[str, str]:
    """The Standard Webhooks headers of one request, signed now (or at `now_s`)."""
    timestamp_s = int(time.time() if now_s is None else now_s)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp_s),
        "webhook-signature": signature_header(keys, message_id, timestamp_s, body),
    }
