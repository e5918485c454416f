"""Event tokens: bound to their principal, topic and expiry, refused when tampered with, signed by
a key derived from the receipt secret."""

from __future__ import annotations

import base64

import orjson
import pytest

from gateway.auth.acl import Acl, ForcedFilter, Rule, selector_claim
from gateway.auth.config import AuthConfig
from gateway.auth.errors import Unauthenticated
from gateway.auth.event_tokens import (
    INVALID,
    MAX_TTL_S,
    EventTokenSigner,
    event_token_signer_for,
)
from gateway.auth.gatekeeper import Gatekeeper
from gateway.auth.keys import ApiKeyTable
from gateway.auth.principal import ANONYMOUS, Principal
from gateway.delivery.receipts import Receipt, signer_for

SECRET = "s" * 40
NOW_MS = 1_800_000_000_000
TENANT_B = Principal("app-b", "jwt", {"tenant": "b", "roles": ["reader"], "big": "x" * 5000},
                     expires_at_s=NOW_MS / 1000 + 3600)


@pytest.fixture
def signer() -> EventTokenSigner:
    return EventTokenSigner(SECRET.encode())


def refused(signer: EventTokenSigner, token: str, topic: str = "orders",
            now_ms: int = NOW_MS) -> str:
    with pytest.raises(Unauthenticated) as refusal:
        signer.verify(token, topic, now_ms)
    assert refusal.value.credentials_given
    return refusal.value.message


def test_a_token_stands_for_its_principal_with_only_the_claims_selectors_match(
        signer: EventTokenSigner) -> None:
    issued = signer.issue(TENANT_B, "orders", 60, NOW_MS, {"tenant", "absent"})
    assert issued.expires_at_ms == NOW_MS + 60_000
    principal = signer.verify(issued.token, "orders", NOW_MS + 59_999)
    assert principal == Principal("app-b", "jwt", {"tenant": "b"}, TENANT_B.expires_at_s)
    assert len(issued.token) < 300  # the large claim stays out of the URL


def test_a_token_never_outlives_the_credential_it_was_minted_with(
        signer: EventTokenSigner) -> None:
    soon = Principal("app-b", "jwt", {"tenant": "b"}, expires_at_s=NOW_MS / 1000 + 10)
    issued = signer.issue(soon, "orders", MAX_TTL_S, NOW_MS)
    assert issued.expires_at_ms == NOW_MS + 10_000
    signer.verify(issued.token, "orders", NOW_MS + 9_999)
    assert refused(signer, issued.token, now_ms=NOW_MS + 10_000) == INVALID


def test_api_key_and_anonymous_principals_come_back_as_they_were(
        signer: EventTokenSigner) -> None:
    keyed = Principal("writer", "api_key")
    assert signer.verify(signer.issue(keyed, "t", 5, NOW_MS).token, "t", NOW_MS) == keyed
    assert signer.verify(signer.issue(ANONYMOUS, "t", 5, NOW_MS).token, "t", NOW_MS) is ANONYMOUS


def test_every_bad_token_is_refused_with_the_same_words(signer: EventTokenSigner) -> None:
    token = signer.issue(TENANT_B, "orders", 60, NOW_MS, {"tenant"}).token
    version, payload, tag = token.split(".")
    forged = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    forged[0] = "admin"
    forged_payload = base64.urlsafe_b64encode(orjson.dumps(forged)).decode().rstrip("=")
    other_key = EventTokenSigner(b"o" * 40).issue(TENANT_B, "orders", 60, NOW_MS).token
    bad = {
        "another topic": (token, "orders2", NOW_MS),
        "expired": (token, "orders", NOW_MS + 60_000),
        "another principal in the payload": (f"{version}.{forged_payload}.{tag}", "orders", NOW_MS),
        "a flipped tag": (f"{version}.{payload}.{tag[:-2]}AA", "orders", NOW_MS),
        "another key": (other_key, "orders", NOW_MS),
        "another version": (f"sget2.{payload}.{tag}", "orders", NOW_MS),
        "not base64": (f"{version}.{payload}.!!", "orders", NOW_MS),
        "not a token": ("hello", "orders", NOW_MS),
        "a JWT": ("eyJhbGciOiJIUzI1NiJ9.e30.sig", "orders", NOW_MS),
        "too long": (token + "A" * 5000, "orders", NOW_MS),
    }
    for what, (text, topic, now_ms) in bad.items():
        assert refused(signer, text, topic, now_ms) == INVALID, what


def test_a_signed_payload_of_the_wrong_shape_is_refused(signer: EventTokenSigner) -> None:
    shapes: list[list[object]] = [
        [], ["n", "root", {}, None, NOW_MS + 1], ["n", "jwt", [], None, NOW_MS + 1],
        ["n", "jwt", {}, "soon", NOW_MS + 1], ["n", "jwt", {}, None, "later"]]
    for data in shapes:
        payload = orjson.dumps(data)
        tag = signer._tag("orders", payload)
        token = ".".join(["sget1", *(base64.urlsafe_b64encode(part).decode().rstrip("=")
                                     for part in (payload, tag))])
        assert refused(signer, token) == INVALID, data


def test_replicas_sharing_the_receipt_secret_accept_each_others_tokens() -> None:
    token = event_token_signer_for(SECRET).issue(TENANT_B, "orders", 60, NOW_MS).token
    assert event_token_signer_for(SECRET).verify(token, "orders", NOW_MS).name == "app-b"
    refused(event_token_signer_for("d" * 40), token)
    refused(event_token_signer_for(None), token)


def test_the_token_key_is_not_the_receipt_key() -> None:
    receipt = signer_for(SECRET).issue(Receipt("orders", 0, "1-0", 1000, NOW_MS), "app-b", "g")
    payload, tag = receipt.split(".")
    refused(event_token_signer_for(SECRET), f"sget1.{payload}.{tag}")


def test_the_gatekeeper_names_every_claim_its_selectors_match_on() -> None:
    acl = Acl([Rule(("claim:tenant=a", "writer", "*"), ("*",), frozenset())],
              [ForcedFilter(("claim:org=x",), {"tenant": "a"})])
    config = AuthConfig(api_keys=ApiKeyTable(()), jwt=None, acl=acl)
    assert Gatekeeper(config).selector_claims == {"tenant", "org"}
    assert selector_claim("claim:roles=reader") == "roles"
    assert selector_claim("writer") is None
