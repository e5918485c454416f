"""Executor side of reading at a schema version: each Arrow batch's values converted by the
gateway's migrations (``gateway.schemas.migrate``), ``schema_error`` saying why one could not be."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from gateway.publish.headers import SCHEMA_VERSION_HEADER
from gateway.schemas.migrate import ConversionFailed, ValueConverter, ValueStep
from partitioner.schemas import SchemaRecord
from streamgate_spark.rows import HEADERS_TYPE, SCHEMA_ERROR, utf8_text
from streamgate_spark.schema_reading import SchemaReading, VersionDocument

# steps kept per task, by the version a value was written at (a header: any text may be there)
MAX_KEPT_STEPS = 64
_INCARNATION = 0  # the source reads one incarnation of its topic: the one its versions came from

Headers = list[tuple[str, str]] | None


class PlannedVersions:
    """The versions of a ``SchemaReading`` as a converter looks them up (``SchemaVersions``)."""

    def __init__(self, reading: SchemaReading) -> None:
        self._records = {int(doc["version"]): _record(reading.topic, doc)
                         for doc in reading.documents}

    def get(self, topic: str, created_at_ms: int, version: int) -> SchemaRecord | None:
        """One version; None when there is no such version."""
        return self._records.get(version)


def _record(topic: str, doc: VersionDocument) -> SchemaRecord:
    return SchemaRecord(topic, _INCARNATION, int(doc["version"]), dict(doc["schema"]),
                        str(doc["compatibility"]), str(doc["fingerprint"]),
                        int(doc["created_at_ms"]), str(doc["created_by"]),
                        dict(doc.get("migrations") or {}))


class BatchConversion:
    """Converts the ``value``, ``value_str`` and ``headers`` of the source's batches to the version
    read at and adds ``schema_error``: null, or why the row's value could not be converted (its
    value then null, its headers as written). Made on the executor: compiled schemas never
    pickle."""

    def __init__(self, reading: SchemaReading) -> None:
        self._reading = reading
        self._wanted = str(reading.version)
        self._converter = ValueConverter(PlannedVersions(reading),
                                         max_compiled=len(reading.documents) + 1)
        self._steps: dict[str | None, ValueStep | str] = {}  # a step, or why there is none

    def batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with its values at the version read at, and the ``schema_error`` column."""
        values, errors, headers = [], [], []
        for value, pairs in zip(batch["value"].to_pylist(), batch["headers"].to_pylist(),
                                strict=True):
            converted, error, own = self._row(value, pairs)
            values.append(converted)
            errors.append(error)
            headers.append(own)
        converted_values = pa.array(values, pa.binary())
        columns = {"value": converted_values, "value_str": utf8_text(converted_values),
                   "headers": pa.array(headers, HEADERS_TYPE)}
        arrays = [columns.get(name, batch[name]) for name in batch.schema.names]
        return pa.RecordBatch.from_arrays([*arrays, pa.array(errors, pa.string())],
                                          names=[*batch.schema.names, SCHEMA_ERROR])

    def _row(self, value: bytes, pairs: Sequence[tuple[str, str]] | None,
             ) -> tuple[bytes | None, str | None, Headers]:
        own = dict(pairs or ())
        written = own.get(SCHEMA_VERSION_HEADER)
        if written == self._wanted:
            return value, None, list(own.items())
        try:
            converted = self._step(written)(value)
        except ConversionFailed as exc:
            return None, exc.reason, list(pairs) if pairs else None
        own[SCHEMA_VERSION_HEADER] = self._wanted
        return converted, None, list(own.items())

    def _step(self, written: str | None) -> ValueStep:
        step = self._steps.get(written)
        if step is None:
            try:
                step = self._converter.step(self._reading.topic, _INCARNATION, written,
                                            self._reading.version)
            except ConversionFailed as exc:
                step = exc.reason  # no value of that version converts: asked once per task
            if len(self._steps) < MAX_KEPT_STEPS:
                self._steps[written] = step
        if isinstance(step, str):
            raise ConversionFailed(step)
        return step
