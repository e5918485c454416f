"""The client's verify_webhook accepts what the gateway signs and refuses anything altered."""

from __future__ import annotations

import time

import pytest

from gateway.push.signing import new_secret, secret_key, webhook_headers
from streamgate_client import WebhookVerificationError, verify_webhook

BODY = b'{"subscription": {"topic": "orders", "group": "hooks"}, "messages": []}'
NOW_S = 1_700_000_000


def signed(secrets: list[str], message_id: str = "orders:0:1-0", body: bytes = BODY,
           now_s: float = NOW_S) -> dict[str, str]:
    return webhook_headers([secret_key(secret) for secret in secrets], message_id, body, now_s)


def test_a_signed_request_is_accepted_with_headers_in_any_case() -> None:
    secret = new_secret()
    headers = {name.upper(): value for name, value in signed([secret]).items()}
    verify_webhook(secret, headers, BODY, now_s=NOW_S + 10)


def test_during_a_rotation_either_secret_is_accepted() -> None:
    old, new = new_secret(), new_secret()
    headers = signed([new, old])
    verify_webhook(old, headers, BODY, now_s=NOW_S)
    verify_webhook(new, headers, BODY, now_s=NOW_S)
    verify_webhook([new_secret(), old], headers, BODY, now_s=NOW_S)


def test_the_current_time_is_used_by_default() -> None:
    secret = new_secret()
    verify_webhook(secret, signed([secret], now_s=time.time()), BODY)


def refused(secrets: str | list[str], headers: dict[str, str], body: bytes = BODY,
            now_s: float = NOW_S) -> str:
    with pytest.raises(WebhookVerificationError) as raised:
        verify_webhook(secrets, headers, body, now_s=now_s)
    return str(raised.value)


def test_a_tampered_body_is_refused() -> None:
    secret = new_secret()
    assert "no webhook signature" in refused(secret, signed([secret]), BODY + b" ")


def test_a_changed_id_is_refused() -> None:
    secret = new_secret()
    headers = {**signed([secret]), "webhook-id": "orders:0:2-0"}
    refused(secret, headers)


def test_an_old_or_future_timestamp_is_refused() -> None:
    secret = new_secret()
    assert "too old" in refused(secret, signed([secret]), now_s=NOW_S + 301)
    assert "future" in refused(secret, signed([secret]), now_s=NOW_S - 301)


def test_a_wrong_secret_is_refused() -> None:
    refused(new_secret(), signed([new_secret()]))


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_a_missing_header_is_refused(missing: str) -> None:
    secret = new_secret()
    headers = signed([secret])
    del headers[missing]
    assert missing in refused(secret, headers)


def test_a_non_numeric_timestamp_is_refused() -> None:
    secret = new_secret()
    assert "unix seconds" in refused(secret, {**signed([secret]), "webhook-timestamp": "-5"})


def test_the_error_is_a_client_error() -> None:
    from streamgate_client import ClientError

    assert issubclass(WebhookVerificationError, ClientError)
