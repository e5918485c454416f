"""``decode_as``'s built-in dataclass mapper: what it builds, and a value that does not fit
refused with the path to the place and the message it came from."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from streamgate_client.errors import DecodeFailed
from streamgate_client.typed import Mismatch, decode_value, decoder_for, decoders_for


class Colour(enum.Enum):
    RED = "red"


@dataclass
class Point:
    x: float
    y: float


@dataclass
class Shape:
    name: str
    points: list[Point]
    colour: Colour
    kind: Literal["open", "closed"] = "open"
    label: str | None = None
    box: tuple[int, int] | None = None
    tags: dict[str, int] = field(default_factory=dict)


def test_a_dataclass_is_built_with_its_nested_types_and_unknown_fields_left_out() -> None:
    shape = decoder_for(Shape)({"name": "s", "points": [{"x": 1, "y": 2.5}], "colour": "red",
                                "box": [1, 2], "tags": {"a": 1}, "new_in_v2": True})
    assert shape == Shape("s", [Point(1.0, 2.5)], Colour.RED, "open", None, (1, 2), {"a": 1})


@pytest.mark.parametrize(("value", "path", "reason"), [
    ({"points": [], "colour": "red"}, "", "missing required field 'name'"),
    ({"name": "s", "points": [{"x": 1, "y": "2"}], "colour": "red"}, "/points/0/y",
     "expected float, got a string"),
    ({"name": "s", "points": [], "colour": "blue"}, "/colour", "'blue' is not a Colour"),
    ({"name": "s", "points": [], "colour": "red", "kind": "half"}, "/kind", "'half' is not one"),
    ({"name": "s", "points": [], "colour": "red", "box": [1, True]}, "/box/1",
     "expected int, got a boolean"),
    ({"name": 1, "points": [], "colour": "red"}, "/name", "expected str, got an integer"),
    ([1], "", "expected an object for Shape, got an array"),
])
def test_a_value_that_does_not_fit_is_refused_with_its_path(value: Any, path: str,
                                                            reason: str) -> None:
    with pytest.raises(Mismatch) as refused:
        decoder_for(Shape)(value)
    assert refused.value.path.endswith(path) if path else refused.value.path == ""
    assert reason in refused.value.reason


def test_a_failure_names_the_message_and_a_binary_value_is_refused() -> None:
    decoder = decoders_for({"shapes": Shape})("shapes")
    assert decoder is not None
    with pytest.raises(DecodeFailed) as failed:
        decode_value(decoder, ("shapes", 2, "17-0"), {"name": 1}, binary=False)
    assert (failed.value.partition, failed.value.offset, failed.value.target) == (2, "17-0",
                                                                                   "Shape")
    with pytest.raises(DecodeFailed, match="binary"):
        decode_value(decoder, ("shapes", 2, "18-0"), None, binary=True)
    assert decoders_for({"shapes": Shape})("other") is None


def test_a_type_no_decoder_knows_is_refused_when_the_decoder_is_made() -> None:
    with pytest.raises(TypeError, match="decode_as takes"):
        decoder_for(dict)
