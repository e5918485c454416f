"""Checking that a push request came from your streamgate gateway: Standard Webhooks signatures
(`verify_webhook`), for the HTTP server that receives a push subscription's deliveries."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Mapping, Sequence

from streamgate_client.errors import ClientError

DEFAULT_TOLERANCE_S = 300
_PREFIX = "whsec_"


class WebhookVerificationError(ClientError):
    """A push request's signature headers are missing, stale or match none of your secrets."""


def verify_webhook(
    secrets: str | Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
    now_s: float | None = None,
) -> None:
    """Accept a request when a signature matches one of `secrets` (`whsec_...`; give both during a
    rotation) and its timestamp is within `tolerance_s` of now; else WebhookVerificationError.

    `headers` are the request's headers (looked up case-insensitively), `body` its raw bytes."""
    lowered = {name.lower(): value for name, value in headers.items()}
    message_id = _required(lowered, "webhook-id")
    timestamp_s = _fresh_timestamp(_required(lowered, "webhook-timestamp"), tolerance_s, now_s)
    offered = _offered_signatures(_required(lowered, "webhook-signature"))
    signed = f"{message_id}.{timestamp_s}.".encode() + body
    keys = [_key_of(secret) for secret in ([secrets] if isinstance(secrets, str) else secrets)]
    for key in keys:
        expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest())
        if any(hmac.compare_digest(expected, candidate) for candidate in offered):
            return
    raise WebhookVerificationError("no webhook signature matches the secrets given")


def _required(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name)
    if not value:
        raise WebhookVerificationError(f"the {name} header is missing")
    return value


def _fresh_timestamp(text: str, tolerance_s: int, now_s: float | None) -> int:
    if not text.isdigit():
        raise WebhookVerificationError(f"webhook-timestamp is not unix seconds: {text!r}")
    timestamp_s = int(text)
    age_s = (time.time() if now_s is None else now_s) - timestamp_s
    if age_s > tolerance_s:
        raise WebhookVerificationError("webhook-timestamp is too old (a replay?)")
    if -age_s > tolerance_s:
        raise WebhookVerificationError("webhook-timestamp is too far in the future")
    return timestamp_s


def _offered_signatures(header: str) -> list[bytes]:
    # Other versions (v1a: asymmetric) may sit beside v1; only v1 is checked here.
    return [part[3:].encode() for part in header.split() if part.startswith("v1,")]


def _key_of(secret: str) -> bytes:
    encoded = secret[len(_PREFIX):] if secret.startswith(_PREFIX) else secret
    try:
        return base64.b64decode(encoded, validate=True)
    except binascii.Error as exc:
        raise ValueError("a webhook secret is 'whsec_' followed by base64") from exc
