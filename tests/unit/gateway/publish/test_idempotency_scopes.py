"""Idempotency-key name spaces: principals apart from each other, the gateway's own writes apart
from all."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.publish.publisher import INTERNAL_SCOPE, internal_key, principal_scope

names = st.text(min_size=1, max_size=12)
keys = st.text(max_size=12)


@given(names, keys, names, keys)
def test_two_principals_never_share_a_stored_key(
    name_a: str, key_a: str, name_b: str, key_b: str
) -> None:
    if name_a != name_b:
        assert principal_scope(name_a) + key_a != principal_scope(name_b) + key_b


@given(names, keys)
def test_no_principal_key_reaches_the_internal_name_space(name: str, key: str) -> None:
    assert not (principal_scope(name) + key).startswith(INTERNAL_SCOPE)


def test_internal_keys_sit_behind_the_internal_scope() -> None:
    assert internal_key("dlq", "g", "orders", 3, "1-0") == INTERNAL_SCOPE + "dlq:g:orders:3:1-0"
