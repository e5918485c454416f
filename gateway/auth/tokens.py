"""JWT bearer tokens: HS256 with a shared secret, RS256/ES256 (and friends) with keys from a JWKS
file or URL.

The algorithm comes from an allow-list and decides the key: HMAC algorithms use only the shared
secret, public-key algorithms use only the JWKS key named by the token's ``kid`` (a JWKS with one
key may omit it). So a token can never choose ``none``, nor trick an RSA public key into serving as
an HMAC secret.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from gateway.auth.errors import AuthConfigError, Unauthenticated, UnknownKeyId
from gateway.auth.jwks import JwksUrl, RemoteJwks, jwks_keys
from gateway.auth.principal import Principal

HMAC_ALGORITHMS = frozenset({"HS256", "HS384", "HS512"})
PUBLIC_KEY_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                                   "ES256", "ES384", "ES512", "EdDSA"})
MIN_HMAC_SECRET_BYTES = 32
TIME_CLAIMS = ("exp", "nbf", "iat")
# the last second of year 9999: any later time is not a real deadline
MAX_CLAIM_TIME_S = 253_402_300_799


@dataclass(frozen=True, slots=True)
class JwtSettings:
    """How tokens are checked (the ``[jwt]`` table of the auth config)."""

    algorithms: tuple[str, ...] = ("HS256", "RS256", "ES256")
    hmac_secret: bytes | None = None
    jwks: Mapping[str, Any] | None = None  # the parsed JWKS document
    jwks_url: JwksUrl | None = None  # or where to fetch it
    audience: str | None = None
    issuer: str | None = None
    leeway_s: float = 30.0
    principal_claim: str = "sub"
    required_claims: tuple[str, ...] = ("exp",)


class JwtVerifier:
    """Checks a token's signature, ``exp``/``nbf`` (with leeway), ``aud`` and ``iss``; returns its
    principal."""

    def __init__(self, settings: JwtSettings) -> None:
        self._settings = settings
        self._algorithms = _checked_algorithms(settings)
        self._file_keys = jwks_keys(settings.jwks) if settings.jwks is not None else {}
        # the key set of a URL, refreshed while the gateway runs (it enters this)
        self.remote_keys = RemoteJwks(settings.jwks_url) if settings.jwks_url is not None else None

    @property
    def leeway_s(self) -> float:
        """Clock skew allowed on ``exp`` and ``nbf``."""
        return self._settings.leeway_s

    async def refresh_keys(self) -> None:
        """After UnknownKeyId: wait (bounded) for the JWKS URL to be read again."""
        if self.remote_keys is not None:
            await self.remote_keys.refresh_for_unknown_kid()

    def verify(self, token: str) -> Principal:
        """The principal a valid token names; Unauthenticated (with a reason) otherwise, its leaf
        UnknownKeyId when the key set read from a URL lacks the token's key id."""
        settings = self._settings
        algorithm, key = self._key_for(token)
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key, algorithms=[algorithm], audience=settings.audience,
                issuer=settings.issuer, leeway=settings.leeway_s,
                options={"require": list(settings.required_claims),
                         "verify_aud": settings.audience is not None})
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("token expired", credentials_given=True, expired=True) from None
        except jwt.ImmatureSignatureError:
            raise Unauthenticated("token not yet valid (nbf)", credentials_given=True) from None
        except jwt.InvalidAudienceError:
            raise Unauthenticated("token audience not accepted", credentials_given=True) from None
        except jwt.InvalidIssuerError:
            raise Unauthenticated("token issuer not accepted", credentials_given=True) from None
        except jwt.InvalidTokenError as exc:
            raise Unauthenticated(f"invalid token: {exc}", credentials_given=True) from None
        _check_time_claims(claims)
        name = claims.get(settings.principal_claim)
        if not isinstance(name, str) or not name:
            raise Unauthenticated(f"token has no {settings.principal_claim!r} claim naming the "
                                  "principal", credentials_given=True)
        exp = claims.get("exp")
        return Principal(name, "jwt", claims, None if exp is None else float(exp))

    def _key_for(self, token: str) -> tuple[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise Unauthenticated("malformed token", credentials_given=True) from None
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm not in self._algorithms:
            raise Unauthenticated(f"token algorithm {algorithm!r} is not accepted",
                                  credentials_given=True)
        if algorithm in HMAC_ALGORITHMS:
            return algorithm, self._settings.hmac_secret
        return algorithm, self._public_key(algorithm, header.get("kid"))

    def _public_key(self, algorithm: str, kid: Any) -> Any:
        remote = self.remote_keys
        keys = remote.keys if remote is not None else self._file_keys
        if kid is None and len(keys) == 1:
            kid = next(iter(keys))
        found = keys.get(kid) if isinstance(kid, str) else None
        if found is not None and found.algorithm_name == algorithm:
            return found.key
        message = f"no key {kid!r} for {algorithm} in the JWKS"
        if remote is not None and not remote.fetched:
            message = remote.missing_reason()
        if remote is None or not isinstance(kid, str) or found is not None:
            raise Unauthenticated(message, credentials_given=True)
        raise UnknownKeyId(message, kid)


def _check_time_claims(claims: dict[str, Any]) -> None:
    """``exp``, ``nbf`` and ``iat`` must be numbers of epoch seconds in a real range: the library
    also takes strings of digits and numbers too large for a float, which would leave a subscription
    with no deadline or fail later, so they are refused here as bad credentials."""
    for name in TIME_CLAIMS:
        if name not in claims:
            continue
        value = claims[name]
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not 0 <= value <= MAX_CLAIM_TIME_S):
            raise Unauthenticated(f"invalid token: {name!r} must be a number of epoch seconds "
                                  f"from 0 to {MAX_CLAIM_TIME_S}", credentials_given=True)


def _checked_algorithms(settings: JwtSettings) -> frozenset[str]:
    algorithms = frozenset(settings.algorithms)
    unknown = algorithms - HMAC_ALGORITHMS - PUBLIC_KEY_ALGORITHMS
    if unknown:  # "none" lands here: it is never accepted
        raise AuthConfigError(f"jwt.algorithms: {sorted(unknown)} not accepted "
                              f"(choose from {sorted(HMAC_ALGORITHMS | PUBLIC_KEY_ALGORITHMS)})")
    if algorithms & HMAC_ALGORITHMS and settings.hmac_secret is None:
        # no secret configured: HMAC tokens cannot be verified, so refuse them
        algorithms -= HMAC_ALGORITHMS
    elif settings.hmac_secret is not None and len(settings.hmac_secret) < MIN_HMAC_SECRET_BYTES:
        raise AuthConfigError(f"jwt: the HMAC secret must be at least {MIN_HMAC_SECRET_BYTES} "
                              "bytes")
    if algorithms & PUBLIC_KEY_ALGORITHMS and (settings.jwks, settings.jwks_url) == (None, None):
        algorithms -= PUBLIC_KEY_ALGORITHMS
    return algorithms


def read_jwks(path: Path) -> dict[str, Any]:
    """Parse a JWKS file; AuthConfigError when it is missing or not JSON."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise AuthConfigError(f"jwks file {path}: {exc}") from exc
    if not isinstance(document, dict):
        raise AuthConfigError(f"jwks file {path}: expected a JSON object")
    return document


def looks_like_jwt(token: str) -> bool:
    """Three dot-separated parts: a compact JWS."""
    return token.count(".") == 2


__all__: Sequence[str] = ["JwtSettings", "JwtVerifier", "looks_like_jwt", "read_jwks"]
