"""Deliveries of a subscription pinned to a schema version: each value converted to that version
on its way out, or kept from the consumer with the reason when it cannot be (never unconverted)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.delivery.retry_policy import DeadLetter
from gateway.delivery.wire import error_frame, message_frame
from gateway.publish.headers import SCHEMA_VERSION_HEADER
from gateway.schemas.errors import ConversionFailed
from gateway.schemas.migrate import ValueConverter, ValueStep
from storage.models import Delivery, StoredEntry, ValueFormat


@dataclass(frozen=True, slots=True)
class PinnedVersion:
    """The schema version a subscription reads in, of one topic incarnation (what converts is not
    part of the comparison: members of a group agree on the version)."""

    version: int
    topic: str
    created_at_ms: int
    converter: ValueConverter = dataclasses.field(compare=False, repr=False)

    def entry(self, entry: StoredEntry) -> StoredEntry:
        """``entry`` at this version (itself when written at it); ConversionFailed says why
        not."""
        written = entry.headers.get(SCHEMA_VERSION_HEADER)
        if written == self.label:
            return entry
        return self._converted(entry, self._step(written))

    @property
    def label(self) -> str:
        """The version as the ``sg-schema-version`` header spells it."""
        return str(self.version)

    def split(self, deliveries: Sequence[Delivery]) -> tuple[list[Delivery], list[DeadLetter]]:
        """The deliveries at this version, and those that cannot be with the reason, in order;
        what converts each written version is resolved once per page."""
        converted: list[Delivery] = []
        failed: list[DeadLetter] = []
        label = self.label
        steps: dict[str | None, ValueStep | ConversionFailed] = {}
        for delivery in deliveries:
            entry = delivery.entry
            written = entry.headers.get(SCHEMA_VERSION_HEADER)
            if written == label:
                converted.append(delivery)
                continue
            step = steps.get(written)
            if step is None:
                step = steps[written] = self._step_or_why(written)
            try:
                if isinstance(step, ConversionFailed):
                    raise step
                converted.append(Delivery(self._converted(entry, step), delivery.delivery_count))
            except ConversionFailed as exc:
                failed.append((delivery, conversion_reason(self.version, exc)))
        return converted, failed

    def _step(self, written: str | None) -> ValueStep:
        return self.converter.step(self.topic, self.created_at_ms, written, self.version)

    def _step_or_why(self, written: str | None) -> ValueStep | ConversionFailed:
        try:
            return self._step(written)
        except ConversionFailed as exc:
            return exc

    def _converted(self, entry: StoredEntry, step: ValueStep) -> StoredEntry:
        if entry.value_format is not ValueFormat.JSON:
            raise ConversionFailed("the value is not JSON")
        return StoredEntry(entry.partition, entry.offset, step(entry.value), entry.value_format,
                           entry.key, {**entry.headers, SCHEMA_VERSION_HEADER: self.label},
                           entry.timestamp_ms)

    def broadcast_frame(self, topic: str, entry: StoredEntry) -> bytes:
        """A broadcast subscriber's frame for ``entry``: its ``message`` frame at this version, or
        an ``error`` frame naming its offset and why it cannot be converted."""
        try:
            return message_frame(topic, self.entry(entry), 1)
        except ConversionFailed as exc:
            return orjson.dumps(conversion_error_frame(entry, conversion_reason(self.version,
                                                                                 exc)))


def conversion_reason(version: int, exc: ConversionFailed) -> str:
    """The dead-letter reason (and error frame detail) of a failed conversion."""
    return f"cannot convert to schema version {version}: {exc.reason}"


def conversion_error_frame(entry: StoredEntry, reason: str) -> dict[str, Any]:
    """The ``error`` frame a pinned broadcast subscriber gets instead of an entry it cannot read."""
    return error_frame("schema-conversion-failed", reason, partition=entry.partition,
                       offset=entry.offset)
