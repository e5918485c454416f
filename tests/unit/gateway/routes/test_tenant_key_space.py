"""A principal's key space from its forced headers: empty without a filter, one canonical byte
string per filter (whatever the order its headers were written in), never one filter's for
another."""

from __future__ import annotations

from gateway.routes.tenancy import key_space
from storage.keys import key_identity


def test_an_unfiltered_principal_has_the_empty_space() -> None:
    assert key_space({}) == b""


def test_a_tenant_filter_is_its_name_value_pair() -> None:
    assert key_space({"tenant": "a"}) == b"tenant=a"


def test_the_space_does_not_depend_on_the_order_of_the_filters_headers() -> None:
    assert key_space({"tenant": "a", "region": "eu"}) == key_space({"region": "eu", "tenant": "a"})
    assert key_space({"tenant": "a", "region": "eu"}) == b"region=eu\x1ftenant=a"


def test_values_that_mimic_separators_give_spaces_of_their_own() -> None:
    tricky = [{"a": "x"}, {"a": "x", "b": "y"}, {"a": "x\x1fb=y"}, {"a": "x\x00"},
              {"a": "x\\u0000"}, {"a": 'x"'}, {"a": "é"}, {"a": "x=y"},
              {"a.x": "y"}]  # header names hold no "="
    spaces = [key_space(forced) for forced in tricky]
    assert len(set(spaces)) == len(spaces)


def test_every_filters_space_can_hold_keys() -> None:
    for forced in ({"tenant": "\x00"}, {"tenant": "\x1f"}, {"tenant": "\xff"}):
        space = key_space(forced)
        assert key_identity(space, b"k").endswith(b"\x00k")
