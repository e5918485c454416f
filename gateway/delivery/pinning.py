"""Deliveries of a subscription pinned to a schema version: each value converted to that version
on its way out, or kept from the consumer with the reason when it cannot be (never unconverted)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter, is_, methodcaller
from typing import Any

import orjson

from gateway._speedups import refilled_or_declined
from gateway.delivery.retry_policy import DeadLetter
from gateway.delivery.wire import error_frame, message_frames
from gateway.publish.headers import SCHEMA_VERSION_HEADER
from gateway.schemas.errors import ConversionFailed
from gateway.schemas.event_types import EVENT_TYPE_HEADER
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
    label: str = dataclasses.field(init=False, compare=False, repr=False)
    """The version as the ``sg-schema-version`` header spells it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "label", str(self.version))

    def entry(self, entry: StoredEntry) -> StoredEntry:
        """``entry`` at this version (itself when written at it); ConversionFailed says why
        not."""
        written = entry.headers.get(SCHEMA_VERSION_HEADER)
        if written == self.label:
            return entry
        if entry.value_format is not ValueFormat.JSON:
            raise ConversionFailed("the value is not JSON")
        value = self._step(written)(entry.value, entry.headers.get(EVENT_TYPE_HEADER))
        return _with_value(entry, value, {**entry.headers, SCHEMA_VERSION_HEADER: self.label})

    def split(self, deliveries: Sequence[Delivery]) -> tuple[list[Delivery], list[DeadLetter]]:
        """The deliveries at this version, and those that cannot be with the reason, in order;
        the values of each written version are converted together."""
        written_at = _positions_by_version(
            list(map(_VERSION_OF, map(_ENTRY_HEADERS, deliveries))), self.label)
        page = list(deliveries)
        if not written_at:
            return page, []
        why: dict[int, str] = {}
        for written, indexes in written_at.items():
            self._convert(page, indexes, written, why)
        if not why:
            return page, []
        return ([delivery for index, delivery in enumerate(page) if index not in why],
                [(deliveries[index], why[index]) for index in sorted(why)])

    def _convert(self, page: list[Delivery], indexes: list[int], written: str | None,
                 why: dict[int, str]) -> None:
        """The deliveries of ``page`` at ``indexes`` (all written at ``written``) replaced by
        their conversions, those of each event type together (each checked against its type's
        subschema); ``why`` gets the reason of each that cannot be converted."""
        try:
            step = self._step(written)
        except ConversionFailed as exc:
            why.update(dict.fromkeys(indexes, conversion_reason(self.version, exc)))
            return
        # each pass over the page a map of C callables: no Python step per delivery
        entries = list(map(_ENTRY, page if len(indexes) == len(page)
                           else map(page.__getitem__, indexes)))
        json_at = indexes
        if not all(map(is_, map(_FORMAT, entries), repeat(ValueFormat.JSON))):
            json_at = [index for index, entry in zip(indexes, entries, strict=True)
                       if entry.value_format is ValueFormat.JSON]
            entries = [entry for entry in entries if entry.value_format is ValueFormat.JSON]
            not_json = conversion_reason(self.version, ConversionFailed("the value is not JSON"))
            why.update(dict.fromkeys(set(indexes).difference(json_at), not_json))
        types = list(map(_TYPE_OF, map(_HEADERS, entries)))
        if types.count(types[0] if types else None) == len(types):  # one type (or none)
            values = step.values(list(map(_VALUE, entries)), types[0] if types else None)
            self._refill(page, json_at, values, written, why)
            return
        for event_type, typed_at in _positions_by_type(page, json_at).items():
            values = step.values([page[index].entry.value for index in typed_at], event_type)
            self._refill(page, typed_at, values, written, why)

    def _refill(self, page: list[Delivery], indexes: list[int],
                values: Sequence[bytes | ConversionFailed], written: str | None,
                why: dict[int, str]) -> None:
        """The deliveries of ``page`` at ``indexes`` given their converted ``values`` (or why
        not, into ``why``)."""
        # the usual headers (the version alone) are one mapping for the page: entries never
        # change theirs
        alone, only_version = {SCHEMA_VERSION_HEADER: self.label}, 0 if written is None else 1
        # the compiled refill makes the same objects (it declines a page with a failure)
        if refilled_or_declined(page, indexes, values, alone, only_version, _REFILL_LAYOUT):
            return
        # each delivery refilled through its slots here, not by a helper per value: the call
        # costs about as much as the filling
        set_entry, set_count = _DELIVERY_SETTERS
        for index, value in zip(indexes, values, strict=True):
            if isinstance(value, ConversionFailed):
                why[index] = conversion_reason(self.version, value)
                continue
            delivery, converted = page[index], object.__new__(Delivery)
            entry = delivery.entry
            set_entry(converted, _with_value(entry, value, alone if len(entry.headers) ==
                                             only_version else {**entry.headers, **alone}))
            set_count(converted, delivery.delivery_count)
            page[index] = converted

    def _step(self, written: str | None) -> ValueStep:
        return self.converter.step(self.topic, self.created_at_ms, written, self.version)

    def broadcast_frame(self, topic: str, entry: StoredEntry) -> bytes:
        """``broadcast_frames`` of one entry (a session offered entries one by one)."""
        return self.broadcast_frames(topic, [entry])[0]

    def broadcast_frames(self, topic: str, entries: Sequence[StoredEntry]) -> list[bytes]:
        """A broadcast subscriber's frames for a page of ``entries``, in order: each ``message``
        frame at this version, or an ``error`` frame naming the offset of one that cannot be
        converted and why (converted a page at once, as ``split`` does)."""
        page = [Delivery(entry, 1) for entry in entries]
        converted, failed = self.split(page)
        frames = message_frames(topic, converted)
        if not failed:
            return frames
        why = {id(delivery): reason for delivery, reason in failed}
        framed = iter(frames)
        return [next(framed) if id(delivery) not in why
                else orjson.dumps(conversion_error_frame(delivery.entry, why[id(delivery)]))
                for delivery in page]


# every field of the two classes, in the order the helpers below unpack them
_ENTRY_SETTERS = tuple(vars(StoredEntry)[field].__set__ for field in (
    "partition", "offset", "value", "value_format", "key", "headers", "timestamp_ms"))
_DELIVERY_SETTERS = tuple(vars(Delivery)[field].__set__ for field in ("entry", "delivery_count"))
_ENTRY, _ENTRY_HEADERS = attrgetter("entry"), attrgetter("entry.headers")
_HEADERS, _VALUE, _FORMAT = attrgetter("headers"), attrgetter("value"), attrgetter("value_format")
_VERSION_OF = methodcaller("get", SCHEMA_VERSION_HEADER)
_TYPE_OF = methodcaller("get", EVENT_TYPE_HEADER)
# What the compiled refill (gateway/_speedups/_frames.c) reads and fills, in its order: the two
# classes, then their slots as the dataclasses declare them
_REFILL_LAYOUT = (Delivery, StoredEntry,
                  tuple(vars(owner)[slot] for owner in (Delivery, StoredEntry)
                        for slot in owner.__slots__))


def _with_value(entry: StoredEntry, value: bytes, headers: Mapping[str, str]) -> StoredEntry:
    """``entry`` with another value and headers, filled through the slots (the frozen dataclass
    ``__init__`` costs about twice as much); as immutable afterwards."""
    converted = object.__new__(StoredEntry)
    partition, offset, set_value, value_format, key, set_headers, timestamp_ms = _ENTRY_SETTERS
    partition(converted, entry.partition)
    offset(converted, entry.offset)
    set_value(converted, value)
    value_format(converted, entry.value_format)
    key(converted, entry.key)
    set_headers(converted, headers)
    timestamp_ms(converted, entry.timestamp_ms)
    return converted


def _positions_by_version(versions: list[str | None],
                          label: str) -> dict[str | None, list[int]]:
    """The positions of the ``versions`` other than ``label``, by version (the usual page has
    one version: no walk)."""
    if versions and versions.count(versions[0]) == len(versions):
        return {} if versions[0] == label else {versions[0]: list(range(len(versions)))}
    positions: dict[str | None, list[int]] = {}
    for index, written in enumerate(versions):
        if written != label:
            positions.setdefault(written, []).append(index)
    return positions


def _positions_by_type(page: list[Delivery], indexes: list[int]) -> dict[str | None, list[int]]:
    """The ``indexes`` of ``page`` by the event type (``ce-type``) of their entries (the usual
    page has one type or none: no walk)."""
    types = [page[index].entry.headers.get(EVENT_TYPE_HEADER) for index in indexes]
    if not types:
        return {}
    if types.count(types[0]) == len(types):
        return {types[0]: indexes}
    positions: dict[str | None, list[int]] = {}
    for index, event_type in zip(indexes, types, strict=True):
        positions.setdefault(event_type, []).append(index)
    return positions


def conversion_reason(version: int, exc: ConversionFailed) -> str:
    """The dead-letter reason (and error frame detail) of a failed conversion."""
    return f"cannot convert to schema version {version}: {exc.reason}"


def conversion_error_frame(entry: StoredEntry, reason: str) -> dict[str, Any]:
    """The ``error`` frame a pinned broadcast subscriber gets instead of an entry it cannot read."""
    return error_frame("schema-conversion-failed", reason, partition=entry.partition,
                       offset=entry.offset)
