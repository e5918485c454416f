"""What a consumer yields and is told: a delivered message (with its acks and typed ``data``),
the partitions assigned to it, and a gap past retention."""

from __future__ import annotations

import base64
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic

from streamgate_client.settle import Settler
from streamgate_client.typed import Decoder, decode_value

if TYPE_CHECKING:
    from typing_extensions import TypeVar

    # without ``decode_as``, a message's ``data`` is its JSON value as parsed
    T = TypeVar("T", default=Any)
else:
    from typing import TypeVar

    T = TypeVar("T")

@dataclass(frozen=True, slots=True)
class Assignment:
    """The partitions this consumer is served; ``generation`` grows on every exclusive-group
    rebalance."""

    generation: int
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Gap:
    """A resume past what retention kept: the messages of ``partition`` from ``first_lost`` up to
    (not including) ``first_kept`` (None: none left) are gone; ``count`` when the gateway can
    tell."""

    partition: int
    first_lost: str
    first_kept: str | None
    count: int | None


_UNDECODED: Any = object()


@dataclass(slots=True)
class Message(Generic[T]):
    """One delivered message. In a group, ``ack`` it when done (or ``nack`` / ``extend``).
    ``data`` is its value decoded into the consumer's ``decode_as`` type."""

    topic: str
    partition: int
    offset: str
    key: str | None
    value: Any
    value_b64: str | None
    headers: dict[str, str]
    timestamp_ms: int
    delivery_count: int
    _settler: Settler | None = field(default=None, repr=False, compare=False)
    _decoder: tuple[Decoder, str] | None = field(default=None, repr=False, compare=False)
    _data: Any = field(default=_UNDECODED, repr=False, compare=False)

    @property
    def data(self) -> T:
        """The value as the ``decode_as`` type (decoded once, on first use); the JSON value
        itself without one. ``DecodeFailed`` (naming this message's offset) when it does not
        decode: the message may still be ``reject``-ed."""
        if self._data is _UNDECODED:
            if self._decoder is None:
                return typing.cast(T, self.value)
            where = (self.topic, self.partition, self.offset)
            self._data = decode_value(self._decoder, where, self.value, self.value_b64 is not None)
        return typing.cast(T, self._data)

    @property
    def value_bytes(self) -> bytes | None:
        """The decoded bytes of a binary value (None for a JSON value)."""
        return None if self.value_b64 is None else base64.b64decode(self.value_b64)

    def to_dict(self) -> dict[str, Any]:
        """The message as the gateway sent it (without the frame type)."""
        doc: dict[str, Any] = {"topic": self.topic, "partition": self.partition,
                               "offset": self.offset, "key": self.key}
        if self.value_b64 is not None:
            doc["value_b64"] = self.value_b64
        else:
            doc["value"] = self.value
        doc.update(headers=self.headers, timestamp_ms=self.timestamp_ms,
                   delivery_count=self.delivery_count)
        return doc

    async def ack(self) -> None:
        """Settle the message; batched with other acks into one frame a few milliseconds later."""
        if self._settler is not None:
            self._settler.add("ack", self.partition, self.offset)

    async def nack(self, delay_ms: int = 0) -> None:
        """Give the message back for redelivery after ``delay_ms``."""
        if self._settler is not None:
            self._settler.add("nack", self.partition, self.offset, delay_ms)

    async def extend(self) -> None:
        """Restart the message's ack timeout (still being worked on)."""
        if self._settler is not None:
            self._settler.add("extend", self.partition, self.offset)

    async def reject(self, reason: str | None = None) -> None:
        """The message can never be processed: to the dead-letter topic now (``reason`` lands in
        its ``sg-dlq-reason`` header), whatever the group's max_deliveries says."""
        if self._settler is not None:
            await self._settler.send_now("reject", self.partition, self.offset,
                                         {} if reason is None else {"reason": reason})
