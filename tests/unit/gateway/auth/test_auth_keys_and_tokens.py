"""API key hashing and JWT validation (HS256, RS256 and ES256 with a JWKS file made here)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from gateway.auth.errors import AuthConfigError, Unauthenticated
from gateway.auth.keys import ApiKeyTable, StoredKey, hash_api_key, new_api_key
from gateway.auth.tokens import JwtSettings, JwtVerifier, read_jwks

SECRET = b"s" * 32
AUDIENCE, ISSUER = "streamgate", "https://id.example"


def test_new_api_keys_are_random_and_hash_to_64_hex_digits() -> None:
    first, second = new_api_key(), new_api_key()
    assert first != second
    assert first.startswith("sgk_")
    assert len(first) > 40
    assert len(hash_api_key(first)) == 64
    assert hash_api_key(first) == hash_api_key(first)


def test_key_table_finds_principals_by_stored_hash_only() -> None:
    key = new_api_key()
    table = ApiKeyTable(
        [StoredKey("billing", hash_api_key(key)), StoredKey("other", hash_api_key("x"))]
    )
    assert table.principal_for(key) == "billing"
    assert table.principal_for(key + "x") is None
    assert table.principal_for(hash_api_key(key)) is None  # the hash itself is not a key


def claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    return {
        "sub": "alice", "aud": AUDIENCE, "iss": ISSUER, "exp": now + 300, "nbf": now - 10,
        **overrides
    }


def hs_verifier(**overrides: Any) -> JwtVerifier:
    settings = JwtSettings(
        algorithms=("HS256",), hmac_secret=SECRET, audience=AUDIENCE, issuer=ISSUER, leeway_s=0
    )
    for name, value in overrides.items():
        object.__setattr__(settings, name, value)
    return JwtVerifier(settings)


def test_hs256_token_carries_principal_claims_and_expiry() -> None:
    body = claims(tenant="a")
    principal = hs_verifier().verify(jwt.encode(body, SECRET, algorithm="HS256"))
    assert (principal.name, principal.kind, principal.claims["tenant"]) == ("alice", "jwt", "a")
    assert principal.expires_at_s == body["exp"]


@pytest.mark.parametrize(("overrides", "reason"), [
    ({"exp": -5}, "expired"),
    ({"nbf": 60}, "not yet valid"),
    ({"aud": "someone-else"}, "audience"),
    ({"iss": "https://evil.example"}, "issuer"),
    ({"exp": None}, "exp"),
])
def test_hs256_token_is_rejected_when_a_registered_claim_fails(
    overrides: dict[str, Any], reason: str
) -> None:
    now = int(time.time())  # times relative to the test run, not to collection
    body = claims(**{k: now + v if isinstance(v, int) else v for k, v in overrides.items()})
    body = {k: v for k, v in body.items() if v is not None}
    with pytest.raises(Unauthenticated, match=reason):
        hs_verifier().verify(jwt.encode(body, SECRET, algorithm="HS256"))


def test_expired_token_is_reported_as_expired() -> None:
    with pytest.raises(Unauthenticated) as caught:
        hs_verifier().verify(
            jwt.encode(claims(exp=int(time.time()) - 5), SECRET, algorithm="HS256")
        )
    assert caught.value.expired


def test_leeway_accepts_a_token_that_expired_moments_ago() -> None:
    token = jwt.encode(claims(exp=int(time.time()) - 5), SECRET, algorithm="HS256")
    assert hs_verifier(leeway_s=30.0).verify(token).name == "alice"


def test_token_signed_with_another_secret_is_rejected() -> None:
    with pytest.raises(Unauthenticated, match="invalid token"):
        hs_verifier().verify(jwt.encode(claims(), b"o" * 32, algorithm="HS256"))


def test_alg_none_is_rejected_by_verifier_and_config() -> None:
    unsigned = jwt.encode(claims(), None, algorithm="none")
    with pytest.raises(Unauthenticated, match="algorithm"):
        hs_verifier().verify(unsigned)
    with pytest.raises(AuthConfigError, match="none"):
        JwtVerifier(JwtSettings(algorithms=("none",), hmac_secret=SECRET))


def test_short_hmac_secret_is_a_config_error() -> None:
    with pytest.raises(AuthConfigError, match="at least 32"):
        JwtVerifier(JwtSettings(algorithms=("HS256",), hmac_secret=b"short"))


def test_token_without_the_principal_claim_is_rejected() -> None:
    body = {k: v for k, v in claims().items() if k != "sub"}
    with pytest.raises(Unauthenticated, match="sub"):
        hs_verifier().verify(jwt.encode(body, SECRET, algorithm="HS256"))


def test_principal_comes_from_the_configured_claim() -> None:
    token = jwt.encode(claims(client_id="svc-7"), SECRET, algorithm="HS256")
    assert hs_verifier(principal_claim="client_id").verify(token).name == "svc-7"


# --- JWKS: RS256 and ES256 ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def key_pairs() -> dict[str, Any]:
    return {"rsa-1": (rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256"),
            "ec-1": (ec.generate_private_key(ec.SECP256R1()), "ES256")}


def write_jwks(path: Path, key_pairs: dict[str, Any]) -> Path:
    keys = []
    for kid, (private, algorithm) in key_pairs.items():
        jwk = json.loads(
            jwt.algorithms.get_default_algorithms()[algorithm].to_jwk(private.public_key())
        )
        keys.append({**jwk, "kid": kid, "alg": algorithm, "use": "sig"})
    path.write_text(json.dumps({"keys": keys}))
    return path


@pytest.fixture
def jwks_verifier(tmp_path: Path, key_pairs: dict[str, Any]) -> JwtVerifier:
    jwks = read_jwks(write_jwks(tmp_path / "jwks.json", key_pairs))
    return JwtVerifier(
        JwtSettings(
            algorithms=("RS256", "ES256", "HS256"), jwks=jwks, hmac_secret=SECRET,
            audience=AUDIENCE, issuer=ISSUER, leeway_s=0
        )
    )


@pytest.mark.parametrize("kid", ["rsa-1", "ec-1"])
def test_rs256_and_es256_verify_with_the_kid_key(
        jwks_verifier: JwtVerifier, key_pairs: dict[str, Any], kid: str) -> None:
    private, algorithm = key_pairs[kid]
    token = jwt.encode(claims(sub=f"by-{kid}"), private, algorithm=algorithm, headers={"kid": kid})
    assert jwks_verifier.verify(token).name == f"by-{kid}"


def test_token_with_an_unknown_kid_is_rejected(
    jwks_verifier: JwtVerifier, key_pairs: dict[str, Any]
) -> None:
    private, _ = key_pairs["rsa-1"]
    with pytest.raises(Unauthenticated, match="no key"):
        jwks_verifier.verify(
            jwt.encode(claims(), private, algorithm="RS256", headers={"kid": "rsa-9"})
        )


def test_kid_of_another_algorithm_is_rejected(
        jwks_verifier: JwtVerifier, key_pairs: dict[str, Any]) -> None:
    private, _ = key_pairs["rsa-1"]
    with pytest.raises(Unauthenticated, match="no key"):
        jwks_verifier.verify(
            jwt.encode(claims(), private, algorithm="RS256", headers={"kid": "ec-1"})
        )


def test_token_signed_by_a_key_outside_the_jwks_is_rejected(jwks_verifier: JwtVerifier) -> None:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(Unauthenticated, match="invalid token"):
        jwks_verifier.verify(
            jwt.encode(claims(), stranger, algorithm="RS256", headers={"kid": "rsa-1"})
        )


def test_expired_rs256_token_is_rejected(
    jwks_verifier: JwtVerifier, key_pairs: dict[str, Any]
) -> None:
    private, _ = key_pairs["rsa-1"]
    token = jwt.encode(
        claims(exp=int(time.time()) - 1), private, algorithm="RS256", headers={"kid": "rsa-1"}
    )
    with pytest.raises(Unauthenticated, match="expired"):
        jwks_verifier.verify(token)


def test_algorithm_outside_the_allow_list_is_rejected(
    tmp_path: Path, key_pairs: dict[str, Any]
) -> None:
    verifier = JwtVerifier(
        JwtSettings(
            algorithms=("ES256",), jwks=read_jwks(write_jwks(tmp_path / "k.json", key_pairs))
        )
    )
    private, _ = key_pairs["rsa-1"]
    with pytest.raises(Unauthenticated, match="algorithm 'RS256' is not accepted"):
        verifier.verify(jwt.encode(claims(), private, algorithm="RS256", headers={"kid": "rsa-1"}))


def test_hmac_token_cannot_use_a_public_key_as_its_secret(jwks_verifier: JwtVerifier,
                                                          key_pairs: dict[str, Any]) -> None:
    """Algorithm confusion: an HS256 token MACed with the (public) RSA key must not verify."""
    public_pem = key_pairs["rsa-1"][0].public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    signing_input = b".".join(
        base64url(json.dumps(part).encode())
        for part in ({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}, claims())
    )
    forged = (
        signing_input
        + b"."
        + base64url(hmac.new(public_pem, signing_input, hashlib.sha256).digest())
    )
    with pytest.raises(Unauthenticated, match="invalid token"):
        jwks_verifier.verify(forged.decode())


def base64url(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")
