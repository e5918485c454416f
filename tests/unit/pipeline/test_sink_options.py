"""The sink's options and input columns, checked on the driver before a query starts."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from streamgate_spark.errors import InvalidSinkOption
from streamgate_spark.sink_options import SinkColumns, parse_sink_options, sink_columns

GIVEN = {"topic": "orders", "gateway": "http://127.0.0.1:8080/"}


def schema(**columns: object) -> StructType:
    return StructType([StructField(name, kind) for name, kind in columns.items()])  # type: ignore[arg-type]


def test_defaults_are_acks_all_binary_values_bounded_requests() -> None:
    options = parse_sink_options(GIVEN)
    assert (options.topic, options.gateway, options.acks, options.value_format) == (
        "orders", "http://127.0.0.1:8080", "all", "binary")
    assert (options.batch_size, options.max_request_bytes) == (1000, 4 * 1024 * 1024)


@pytest.mark.parametrize(("extra", "option"), [
    ({"topic": ""}, "topic"), ({"gateway": None}, "gateway"), ({"acks": "0"}, "acks"),
    ({"valueFormat": "avro"}, "valueFormat"), ({"batchSize": "0"}, "batchSize"),
    ({"maxRequestBytes": "-1"}, "maxRequestBytes"), ({"timeoutMs": "soon"}, "timeoutMs")])
def test_a_missing_or_malformed_option_names_itself(extra: dict[str, str | None],
                                                    option: str) -> None:
    with pytest.raises(InvalidSinkOption, match=f"sink option {option!r}"):
        parse_sink_options({**GIVEN, **extra})


def test_value_key_headers_found_by_name_others_left_alone() -> None:
    found = sink_columns(schema(offset=StringType(), headers=MapType(StringType(), StringType()),
                                VALUE=BinaryType(), key=BinaryType()))
    assert found == SinkColumns(value=2, key=3, headers=1)
    assert sink_columns(schema(value=StringType())) == SinkColumns(value=0, key=None, headers=None)


@pytest.mark.parametrize(("columns", "option"), [
    ({"key": StringType()}, "value"), ({"value": IntegerType()}, "value"),
    ({"value": BinaryType(), "key": IntegerType()}, "key"),
    ({"value": BinaryType(), "headers": MapType(StringType(), IntegerType())}, "headers")])
def test_missing_or_mistyped_sink_column_is_refused(columns: dict[str, object],
                                                                option: str) -> None:
    with pytest.raises(InvalidSinkOption, match=f"sink option {option!r}"):
        sink_columns(schema(**columns))


def test_the_credentials_stay_out_of_the_sink_options_repr() -> None:
    options = parse_sink_options({**GIVEN, "apiKey": "sgk_never-shown", "token": "eyJ.never"})
    assert (options.api_key, options.token) == ("sgk_never-shown", "eyJ.never")
    assert "never" not in repr(options)
