"""The ``streamgate`` sink's options and the columns it publishes, checked once on the driver when
the query starts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from streamgate_spark.errors import InvalidSinkOption
from streamgate_spark.options import positive_int_option, required_option

ValueFormat = Literal["binary", "json"]
DEFAULT_BATCH_SIZE = 1000
DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024
DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_MAX_RETRIES = 10


@dataclass(frozen=True)
class SinkOptions:
    """Where and how the sink publishes, as plain picklable values."""

    topic: str
    gateway: str
    acks: Literal["1", "all"]
    value_format: ValueFormat
    batch_size: int  # rows per request
    max_request_bytes: int  # a request is cut before it grows beyond this
    timeout_s: float
    max_retries: int
    # kept out of repr: a plan or an error may print the options
    api_key: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class SinkColumns:
    """Which input columns the sink reads (by position): ``value``, and ``key`` and ``headers`` when
    the input has them; every other column is left alone."""

    value: int
    key: int | None
    headers: int | None


def parse_sink_options(options: Mapping[str, Any]) -> SinkOptions:
    """The sink's options from Spark's case-insensitive option map."""
    acks = str(options.get("acks") or "all")
    if acks not in ("1", "all"):
        raise InvalidSinkOption("acks", f"expected 1 or all (the sink needs offsets back), got "
                                        f"{acks!r}")
    value_format = str(options.get("valueFormat") or "binary")
    if value_format not in ("binary", "json"):
        raise InvalidSinkOption("valueFormat", f"expected binary or json, got {value_format!r}")
    return SinkOptions(
        topic=required_option(options, "topic", InvalidSinkOption),
        gateway=required_option(options, "gateway", InvalidSinkOption).rstrip("/"),
        acks="1" if acks == "1" else "all",
        value_format="json" if value_format == "json" else "binary",
        batch_size=_positive(options, "batchSize", DEFAULT_BATCH_SIZE),
        max_request_bytes=_positive(options, "maxRequestBytes", DEFAULT_MAX_REQUEST_BYTES),
        timeout_s=_positive(options, "timeoutMs", DEFAULT_TIMEOUT_MS) / 1000,
        max_retries=_positive(options, "maxRetries", DEFAULT_MAX_RETRIES),
        api_key=options.get("apiKey") or None,
        token=options.get("token") or None,
    )


def sink_columns(schema: StructType) -> SinkColumns:
    """The positions of ``value`` (binary or string), ``key`` (string or binary) and ``headers``
    (map of strings); InvalidSinkOption when one is missing or of another type."""
    names = [field.name.lower() for field in schema.fields]
    if "value" not in names:
        raise InvalidSinkOption("value", "the sink publishes a 'value' column (binary or string); "
                                         f"the input has {schema.fieldNames()}")
    positions = {name: names.index(name) for name in ("value", "key", "headers") if name in names}
    for name, position in positions.items():
        kind = schema.fields[position].dataType
        wanted = (MapType(StringType(), StringType()),) if name == "headers" else (
            BinaryType(), StringType())
        if not any(_same_type(kind, allowed) for allowed in wanted):
            raise InvalidSinkOption(name, f"column {name!r} is {kind.simpleString()}; expected "
                                          f"{' or '.join(t.simpleString() for t in wanted)}")
    return SinkColumns(positions["value"], positions.get("key"), positions.get("headers"))


def _same_type(kind: Any, allowed: Any) -> bool:
    if isinstance(allowed, MapType):  # null values or not, a map of strings is fine
        return (isinstance(kind, MapType) and kind.keyType == allowed.keyType
                and kind.valueType == allowed.valueType)
    return bool(kind == allowed)


def _positive(options: Mapping[str, Any], name: str, default: int) -> int:
    return positive_int_option(options, name, default, InvalidSinkOption) or default
