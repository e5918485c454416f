"""``decode_as`` into a user's msgspec Structs and pydantic models: built through the library's own
validation, and a value that does not fit refused as DecodeFailed with the library's path."""

from __future__ import annotations

from typing import Any

import msgspec
import pydantic
import pytest

from streamgate_client.errors import DecodeFailed
from streamgate_client.typed import decode_value, decoder_for, decoders_for

WHERE = ("orders", 2, "1716982000000-7")


class Line(msgspec.Struct):
    sku: str
    qty: int


class Order(msgspec.Struct):
    id: str
    total: int
    lines: list[Line] = []
    note: str | None = None


class LineModel(pydantic.BaseModel):
    sku: str
    qty: int


class OrderModel(pydantic.BaseModel):
    id: str
    total: int
    lines: list[LineModel] = []
    note: str | None = None


def decoded(target: type[Any], value: Any) -> Any:
    return decode_value((decoder_for(target), target.__qualname__), WHERE, value, binary=False)


def test_a_struct_is_built_with_its_nested_structs_and_optional_fields() -> None:
    order = decoded(Order, {"id": "a", "total": 3, "lines": [{"sku": "pear", "qty": 2}],
                            "note": "gift", "added_later": True})
    assert order == Order("a", 3, [Line("pear", 2)], "gift")
    assert decoded(Order, {"id": "b", "total": 1, "note": None}) == Order("b", 1)


def test_a_value_that_does_not_fit_a_struct_fails_naming_the_path_and_message() -> None:
    with pytest.raises(DecodeFailed) as failed:
        decoded(Order, {"id": "a", "total": 3, "lines": [{"sku": "pear", "qty": "two"}]})
    assert (failed.value.topic, failed.value.partition, failed.value.offset) == WHERE
    assert failed.value.target == "Order"
    assert "$.lines[0].qty" in failed.value.reason
    assert "got `str`" in failed.value.reason
    assert isinstance(failed.value.__cause__, msgspec.ValidationError)


def test_a_struct_missing_a_required_field_fails_naming_it() -> None:
    with pytest.raises(DecodeFailed, match="missing required field `total`"):
        decoded(Order, {"id": "a"})


def test_a_model_is_built_with_its_nested_models_and_optional_fields() -> None:
    order = decoded(OrderModel, {"id": "a", "total": 3, "lines": [{"sku": "pear", "qty": 2}]})
    assert order == OrderModel(id="a", total=3, lines=[LineModel(sku="pear", qty=2)])
    assert order.note is None


def test_a_value_that_does_not_fit_a_model_fails_naming_the_path_and_message() -> None:
    with pytest.raises(DecodeFailed) as failed:
        decoded(OrderModel, {"id": "a", "total": 3, "lines": [{"sku": "pear", "qty": "two"}]})
    assert (failed.value.partition, failed.value.offset) == WHERE[1:]
    assert "lines.0.qty" in failed.value.reason
    assert isinstance(failed.value.__cause__, pydantic.ValidationError)


def test_one_decoder_per_topic_mixes_the_libraries() -> None:
    lookup = decoders_for({"orders": Order, "audits": OrderModel})
    orders, audits = lookup("orders"), lookup("audits")
    assert orders is not None
    assert audits is not None
    assert (orders[1], audits[1]) == ("Order", "OrderModel")
    assert lookup("other") is None
