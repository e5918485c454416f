"""The auth config file (TOML): JWT checking, hashed API keys, ACL rules, forced header filters,
rate limits, quotas.

Secrets are never required inline: the HMAC secret comes from a file (``hmac_secret_file``) or from
an environment variable named in the file (``hmac_secret_env``). Relative paths are relative to the
config file. Unknown tables or keys are errors, so a typo cannot silently widen access.
docs/security.md has a sample.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gateway.auth.acl import Acl, Action, ForcedFilter, Rule
from gateway.auth.errors import AuthConfigError
from gateway.auth.jwks import JwksUrl, checked_jwks_url
from gateway.auth.keys import SHA256_HEX_LENGTH, ApiKeyTable, StoredKey
from gateway.auth.limits import RATE_KEYS, UNLIMITED, LimitOverride, LimitOverrides
from gateway.auth.quotas import MAX_TENANT_CHARS, QUOTA_KEYS, QuotaEntry
from gateway.auth.tokens import JwtSettings, JwtVerifier, read_jwks

TOP_LEVEL = frozenset({"jwt", "api_keys", "rules", "filters", "limits", "quotas"})
JWKS_URL_OPTIONS = frozenset({"jwks_ca_file", "jwks_refresh_s", "jwks_min_refresh_s"})
JWT_KEYS = frozenset({"algorithms", "hmac_secret_file", "hmac_secret_env", "jwks_file", "jwks_url",
                      "audience", "issuer", "leeway_s", "principal_claim", "required_claims",
                      *JWKS_URL_OPTIONS})
HEX = re.compile(f"[0-9a-f]{{{SHA256_HEX_LENGTH}}}")
HEADER_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """Everything the auth config file defines."""

    api_keys: ApiKeyTable
    jwt: JwtVerifier | None
    acl: Acl
    # per-principal rate-limit overrides
    limits: LimitOverrides = field(default_factory=LimitOverrides)
    # per-principal and per-tenant quota entries, in config order
    quotas: tuple[QuotaEntry, ...] = ()


def load_auth_config(path: Path, env: Mapping[str, str]) -> AuthConfig:
    """Read and check the auth config; AuthConfigError names the file and the bad entry."""
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise AuthConfigError(f"auth config {path}: {exc}") from exc
    try:
        return parse_auth_config(doc, path.parent, env)
    except AuthConfigError as exc:
        raise AuthConfigError(f"auth config {path}: {exc.message}") from exc


def parse_auth_config(doc: Mapping[str, Any], base_dir: Path, env: Mapping[str, str]) -> AuthConfig:
    """Build the config from a parsed TOML document."""
    _no_unknown(doc, TOP_LEVEL, "top level")
    jwt_table = doc.get("jwt")
    verifier = (
        JwtVerifier(_jwt_settings(_table(jwt_table, "jwt"), base_dir, env)) if jwt_table else None
    )
    keys = ApiKeyTable(_api_key(item, i) for i, item in enumerate(_tables(doc, "api_keys")))
    rules = [_rule(item, i) for i, item in enumerate(_tables(doc, "rules"))]
    filters = [_filter(item, i) for i, item in enumerate(_tables(doc, "filters"))]
    limits = LimitOverrides([_limit(item, i) for i, item in enumerate(_tables(doc, "limits"))])
    quotas = tuple(_quota(item, i) for i, item in enumerate(_tables(doc, "quotas")))
    return AuthConfig(keys, verifier, Acl(rules, filters), limits, quotas)


def _jwt_settings(table: Mapping[str, Any], base_dir: Path, env: Mapping[str, str]) -> JwtSettings:
    _no_unknown(table, JWT_KEYS, "[jwt]")
    jwks_url = _jwks_url(table, base_dir)  # first: it refuses a jwks_file beside it
    jwks_file = table.get("jwks_file")
    defaults = JwtSettings()
    return JwtSettings(
        algorithms=tuple(_strings(table.get("algorithms", list(defaults.algorithms)),
                                  "jwt.algorithms")),
        hmac_secret=_hmac_secret(table, base_dir, env),
        jwks=read_jwks(base_dir / str(jwks_file)) if jwks_file else None,
        jwks_url=jwks_url,
        audience=_optional_str(table, "audience"),
        issuer=_optional_str(table, "issuer"),
        leeway_s=float(table.get("leeway_s", defaults.leeway_s)),
        principal_claim=str(table.get("principal_claim", defaults.principal_claim)),
        required_claims=tuple(_strings(table.get("required_claims", list(defaults.required_claims)),
                                       "jwt.required_claims", allow_empty=True)),
    )


def _jwks_url(table: Mapping[str, Any], base_dir: Path) -> JwksUrl | None:
    if "jwks_url" not in table:
        stray = sorted(JWKS_URL_OPTIONS & table.keys())
        if stray:
            raise AuthConfigError(f"jwt: {stray} apply only with jwks_url")
        return None
    if "jwks_file" in table:
        raise AuthConfigError("jwt: give jwks_file or jwks_url, not both")
    url = table["jwks_url"]
    if not isinstance(url, str):
        raise AuthConfigError("jwt.jwks_url: expected a string")
    ca_file = _optional_str(table, "jwks_ca_file")
    if ca_file is not None and urlsplit(url).scheme != "https":
        raise AuthConfigError("jwt.jwks_ca_file: applies only to an https:// jwks_url")
    defaults = JwksUrl(url)
    source = JwksUrl(
        checked_jwks_url(url), base_dir / ca_file if ca_file is not None else None,
        refresh_s=_seconds(table, "jwks_refresh_s", defaults.refresh_s, allow_zero=False),
        min_refresh_s=_seconds(table, "jwks_min_refresh_s", defaults.min_refresh_s))
    if source.min_refresh_s > source.refresh_s:
        raise AuthConfigError("jwt.jwks_min_refresh_s: must not exceed jwks_refresh_s")
    return source


def _seconds(table: Mapping[str, Any], key: str, default: float, *, allow_zero: bool = True
             ) -> float:
    raw = table.get(key, default)
    if (isinstance(raw, bool) or not isinstance(raw, int | float) or not 0 <= raw < float("inf")
            or (raw == 0 and not allow_zero)):
        least = "at least 0" if allow_zero else "more than 0"
        raise AuthConfigError(f"jwt.{key}: expected a number of seconds, {least}, got {raw!r}")
    return float(raw)


def _hmac_secret(table: Mapping[str, Any], base_dir: Path, env: Mapping[str, str]) -> bytes | None:
    if "hmac_secret_file" in table and "hmac_secret_env" in table:
        raise AuthConfigError("jwt: give hmac_secret_file or hmac_secret_env, not both")
    if "hmac_secret_file" in table:
        path = base_dir / str(table["hmac_secret_file"])
        try:
            return path.read_bytes().strip()
        except OSError as exc:
            raise AuthConfigError(f"jwt.hmac_secret_file: {exc}") from exc
    if "hmac_secret_env" in table:
        name = str(table["hmac_secret_env"])
        value = env.get(name)
        if not value:
            raise AuthConfigError(f"jwt.hmac_secret_env: environment variable {name} is not set")
        return value.encode()
    return None


def _api_key(item: Mapping[str, Any], index: int) -> StoredKey:
    where = f"api_keys[{index}]"
    _no_unknown(item, frozenset({"principal", "sha256"}), where)
    principal, digest = item.get("principal"), item.get("sha256")
    if not isinstance(principal, str) or not principal:
        raise AuthConfigError(f"{where}: 'principal' must be a non-empty string")
    if not isinstance(digest, str) or not HEX.fullmatch(digest):
        raise AuthConfigError(f"{where}: 'sha256' must be 64 lower-case hex digits (streamgate "
                              "auth hash-key)")
    return StoredKey(principal, digest)


def _rule(item: Mapping[str, Any], index: int) -> Rule:
    where = f"rules[{index}]"
    _no_unknown(item, frozenset({"principals", "topics", "actions", "groups"}), where)
    try:
        actions = frozenset(Action(a) for a in _strings(item.get("actions"), f"{where}.actions"))
    except ValueError as exc:
        raise AuthConfigError(f"{where}.actions: {exc} (publish, subscribe or admin)") from exc
    return Rule(principals=tuple(_selectors(item.get("principals"), f"{where}.principals")),
                topics=tuple(_strings(item.get("topics"), f"{where}.topics")),
                actions=actions,
                groups=tuple(_strings(item.get("groups", ["*"]), f"{where}.groups")))


def _filter(item: Mapping[str, Any], index: int) -> ForcedFilter:
    where = f"filters[{index}]"
    _no_unknown(item, frozenset({"principals", "headers"}), where)
    headers = item.get("headers")
    if not isinstance(headers, dict) or not headers or not all(
            isinstance(v, str) and v and HEADER_NAME.fullmatch(k) for k, v in headers.items()):
        raise AuthConfigError(f"{where}.headers: a non-empty table of header = \"value\"")
    return ForcedFilter(tuple(_selectors(item.get("principals"), f"{where}.principals")),
                        dict(headers))


def _limit(item: Mapping[str, Any], index: int) -> LimitOverride:
    where = f"limits[{index}]"
    _no_unknown(item, frozenset({"principals", *RATE_KEYS}), where)
    rates = {key: _rate(item[key], f"{where}.{key}") for key in RATE_KEYS if key in item}
    if not rates:
        raise AuthConfigError(f"{where}: give at least one of {', '.join(RATE_KEYS)}")
    return LimitOverride(tuple(_selectors(item.get("principals"), f"{where}.principals")), rates)


def _quota(item: Mapping[str, Any], index: int) -> QuotaEntry:
    where = f"quotas[{index}]"
    _no_unknown(item, frozenset({"principals", "tenant", *QUOTA_KEYS}), where)
    caps = {key: _cap(item[key], f"{where}.{key}") for key in QUOTA_KEYS if key in item}
    if not caps:
        raise AuthConfigError(f"{where}: give at least one of {', '.join(QUOTA_KEYS)}")
    tenant = item.get("tenant")
    if tenant is not None and (not isinstance(tenant, str) or not tenant.isprintable()
                               or not 0 < len(tenant) <= MAX_TENANT_CHARS):
        raise AuthConfigError(f"{where}.tenant: a name of 1 to {MAX_TENANT_CHARS} printable "
                              f"characters, got {tenant!r}")
    return QuotaEntry(tuple(_selectors(item.get("principals"), f"{where}.principals")), tenant,
                      caps)


def _cap(raw: Any, where: str) -> int | None:
    if raw == UNLIMITED:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0:
        raise AuthConfigError(f"{where}: expected a positive integer or \"{UNLIMITED}\", "
                              f"got {raw!r}")
    return raw


def _rate(raw: Any, where: str) -> float | None:
    if raw == UNLIMITED:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0 < raw < float("inf"):
        raise AuthConfigError(f"{where}: expected a positive number (per second) or "
                              f"\"{UNLIMITED}\", got {raw!r}")
    return float(raw)


def _selectors(raw: Any, where: str) -> list[str]:
    selectors = _strings(raw, where)
    for selector in selectors:
        if selector.startswith("claim:") and "=" not in selector:
            raise AuthConfigError(f"{where}: {selector!r} must look like claim:<name>=<value>")
    return selectors


def _strings(raw: Any, where: str, *, allow_empty: bool = False) -> list[str]:
    if not isinstance(raw, list) or (not raw and not allow_empty) or not all(
            isinstance(s, str) and s for s in raw):
        raise AuthConfigError(f"{where}: expected a non-empty list of strings")
    return list(raw)


def _optional_str(table: Mapping[str, Any], key: str) -> str | None:
    value = table.get(key)
    if value is not None and not isinstance(value, str):
        raise AuthConfigError(f"jwt.{key}: expected a string")
    return value


def _table(raw: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, dict):
        raise AuthConfigError(f"{where}: expected a table")
    return raw


def _tables(doc: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    raw = doc.get(key, [])
    if not isinstance(raw, list) or not all(isinstance(item, dict) for item in raw):
        raise AuthConfigError(f"{key}: expected an array of tables ([[{key}]])")
    return raw


def _no_unknown(table: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    unknown = set(table) - known
    if unknown:
        raise AuthConfigError(f"{where}: unknown keys {sorted(unknown)}")
