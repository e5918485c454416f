"""How the Python client proves who it is: an API key or a JWT bearer token, sent on every
request."""

from __future__ import annotations


def auth_headers(api_key: str | None = None, token: str | None = None) -> dict[str, str]:
    """The ``Authorization`` header for a token (preferred) or an API key; {} when neither is
    given."""
    if token:
        return {"Authorization": f"Bearer {token}"}
    if api_key:
        return {"Authorization": f"ApiKey {api_key}"}
    return {}
