"""Standard Webhooks signing of push requests: secrets, keys and signature headers."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from gateway.push.signing import (
    SECRET_PREFIX,
    new_secret,
    secret_key,
    signature_header,
    webhook_headers,
)

KEY = bytes(range(32))
OTHER_KEY = bytes(range(100, 132))


def expected_signature(key: bytes, signed: bytes) -> str:
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def test_a_new_secret_is_whsec_and_the_base64_of_32_random_bytes() -> None:
    secret = new_secret()
    assert secret.startswith(SECRET_PREFIX)
    assert len(secret_key(secret)) == 32
    assert new_secret() != secret


def test_a_secret_gives_back_the_key_it_encodes() -> None:
    assert secret_key(SECRET_PREFIX + base64.b64encode(KEY).decode()) == KEY


@pytest.mark.parametrize("secret", [
    "", "whsec_", "sk_" + base64.b64encode(KEY).decode(), "whsec_not base64!",
    "whsec_" + base64.b64encode(b"x" * 16).decode(),
    "whsec_" + base64.b64encode(b"x" * 65).decode(),
])
def test_malformed_secrets_are_refused(secret: str) -> None:
    with pytest.raises(ValueError, match="secret"):
        secret_key(secret)


def test_the_signature_is_hmac_sha256_of_id_timestamp_and_body() -> None:
    header = signature_header([KEY], "orders:3:1700000000000-0", 1700000000, b'{"n":1}')
    assert header == expected_signature(KEY, b'orders:3:1700000000000-0.1700000000.{"n":1}')


def test_two_live_keys_give_two_signatures_in_the_keys_order() -> None:
    header = signature_header([OTHER_KEY, KEY], "t:0:1-0+2", 42, b"body")
    assert header.split(" ") == [expected_signature(OTHER_KEY, b"t:0:1-0+2.42.body"),
                                 expected_signature(KEY, b"t:0:1-0+2.42.body")]


def test_a_request_is_never_signed_without_a_key() -> None:
    with pytest.raises(ValueError, match="at least one"):
        signature_header([], "t:0:1-0", 42, b"")


def test_webhook_headers_carry_the_id_the_timestamp_and_the_signature() -> None:
    headers = webhook_headers([KEY], "t:0:5-0", b"{}", now_s=1700000000.9)
    assert headers == {"webhook-id": "t:0:5-0", "webhook-timestamp": "1700000000",
                       "webhook-signature": expected_signature(KEY, b"t:0:5-0.1700000000.{}")}
