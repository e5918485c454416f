"""The scale hint's query: defaults for what is left out, 422 naming the field for what is out
of range."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from gateway.errors import Problem
from gateway.routes.group_scale import ScaleAsk


def ask(query: str) -> ScaleAsk:
    return ScaleAsk.of(make_mocked_request("GET", f"/v1/groups/g/scale?topic=t&{query}"))


def test_left_out_parameters_take_their_defaults() -> None:
    assert ask("") == ScaleAsk(60.0, 60.0, None, 0)


def test_given_parameters_are_read() -> None:
    assert ask("target_drain_s=2.5&stabilise_s=0&members=3&min_members=1") == ScaleAsk(2.5, 0.0,
                                                                                       3, 1)


@pytest.mark.parametrize(("query", "field"), [
    ("target_drain_s=0", "/target_drain_s"), ("target_drain_s=nan", "/target_drain_s"),
    ("target_drain_s=1e9", "/target_drain_s"), ("stabilise_s=-1", "/stabilise_s"),
    ("members=-2", "/members"), ("min_members=1.5", "/min_members"),
    ("members=1000001", "/members")])
def test_out_of_range_parameters_are_refused_naming_the_field(query: str, field: str) -> None:
    with pytest.raises(Problem) as refused:
        ask(query)
    assert refused.value.status == 422
    assert refused.value.pointer == field
