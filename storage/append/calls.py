"""One call per partition as the appender sends it: the script call (``ScriptCall``,
``PreparedCall``) or the append (``AppendCall``), each with its RESP and the fold of its replies;
``NodeReplies``, the fold of one node's calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from storage._speedups import fold_transaction_or_none, fold_transaction_python, xadd_transaction
from storage.append.encoding import (
    EXEC_WIRE,
    FORMAT_WIRE,
    INDEX_WIRE,
    MULTI_WIRE,
    headers_field_wire,
    records_fields_wire,
    shared_headers,
    without_array_header,
    xadd_head,
    xadd_heads,
)
from storage.append.lua import APPEND_BATCH_SCRIPT, APPEND_SCRIPT
from storage.codec import encode_fields
from storage.keys import batch_dedup_key, dedup_key, log_key
from storage.models import AppendOptions, Records, ValueFormat
from storage.wire.resp import encode_command
from storage.wire.scripts import LuaScript


class PartitionCall(Protocol):
    """One partition's write, as the appender sends it.

    A redis-py pipeline sends ``evalsha_command`` (one script call, one reply). The node connections
    send ``wire()``: RESP bytes of ``wire_replies`` commands (the same script call, or for appends
    without idempotency keys a MULTI/XADD.../EXEC transaction), which ``fold_replies`` turns into
    the one reply the script would have given, or the error that stopped the call.
    """

    @property
    def partition(self) -> int: ...

    @property
    def script(self) -> LuaScript: ...

    @property
    def wire_replies(self) -> int: ...

    @property
    def transaction_size(self) -> int | None:
        """The XADD count when ``wire()`` is one MULTI/XADD.../EXEC transaction (its clean replies
        can be read folded, ``storage._speedups.read_transactions``), else None."""
        ...

    def evalsha_command(self) -> tuple[Any, ...]:
        """The command as values (for a redis-py pipeline)."""
        ...

    def wire(self) -> bytes:
        """The call as RESP bytes (for the node connections)."""
        ...

    def fold_replies(self, replies: list[Any]) -> Any:
        """The call's reply (or error) from the ``wire_replies`` replies its wire got."""
        ...


class _EncodesEvalsha(Protocol):
    def evalsha_wire(self) -> bytes: ...


class _OneCommand:
    """A call whose wire is its one EVALSHA command (``evalsha_wire``, the subclass's): one reply,
    as it is."""

    __slots__ = ()
    wire_replies = 1
    transaction_size = None

    def wire(self: _EncodesEvalsha) -> bytes:
        """The EVALSHA command as RESP bytes."""
        return self.evalsha_wire()

    def fold_replies(self, replies: list[Any]) -> Any:
        """The script's reply."""
        return replies[0]


@dataclass(frozen=True, slots=True)
class ScriptCall(_OneCommand):
    """Keys and arguments of one script call on one partition (the append script unless told
    otherwise)."""

    partition: int
    keys: list[str]
    args: list[Any]
    script: LuaScript = APPEND_SCRIPT

    def evalsha_command(self) -> tuple[Any, ...]:
        """The raw ``EVALSHA`` command (script SHA, key count, keys, args)."""
        return ("EVALSHA", self.script.sha, len(self.keys), *self.keys, *self.args)

    def evalsha_wire(self) -> bytes:
        """The same command as RESP bytes (what the node connections send)."""
        return encode_command(self.evalsha_command())


@dataclass(frozen=True, slots=True)
class PreparedCall(_OneCommand):
    """A script call encoded once, for a command sent again and again (the promoter's, every
    tick)."""

    partition: int
    script: LuaScript
    command: tuple[Any, ...]
    encoded: bytes

    @classmethod
    def of(cls, call: ScriptCall) -> PreparedCall:
        """``call`` with its command and RESP bytes computed now."""
        command = call.evalsha_command()
        return cls(call.partition, call.script, command, encode_command(command))

    def evalsha_command(self) -> tuple[Any, ...]:
        """The command as values."""
        return self.command

    def evalsha_wire(self) -> bytes:
        """The command as RESP bytes."""
        return self.encoded


class AppendCall:
    """One partition's records (``Records``, the batch's columns for that partition), encoded
    straight to RESP for the node connections.

    Records with idempotency keys need the script (the dedup check and the XADD must not interleave
    with another writer); a call without any is sent as MULTI, one XADD per record, EXEC instead: as
    atomic for the partition, and Redis spends less CPU per message on it (no per-record Lua work;
    ``bench/profile_publish.py`` prints Redis CPU per message). Records of one format without
    headers (the common publish) are encoded from the columns in one call (``xadd_transaction``).
    Every wire is byte for byte what ``encode_command`` makes of the same commands (tests pin it);
    ``evalsha_command`` lays out the script call as values for redis-py and tests.
    """

    __slots__ = ("_batch_key", "_dedup", "options", "partition", "records", "script", "topic",
                 "transaction_size", "wire_replies")

    def __init__(self, topic: str, partition: int, records: Records,
                 options: AppendOptions) -> None:
        self.topic = topic
        self.partition = partition
        self.records = records
        self.options = options
        dedup = records.idempotency_keys
        self._dedup = None if dedup is None or dedup.count(None) == len(dedup) else dedup
        self._batch_key = records.batch_key if self._dedup is None else None
        self.script = APPEND_SCRIPT if self._batch_key is None else APPEND_BATCH_SCRIPT
        self.wire_replies = 1 if self.uses_script else len(records.values) + 2
        self.transaction_size = None if self.uses_script else len(records.values)

    @property
    def uses_script(self) -> bool:
        """Whether the wire is a script (the records or the batch have idempotency keys) or
        a transaction."""
        return self._dedup is not None or self._batch_key is not None

    @property
    def keys(self) -> list[str]:
        """KEYS: the partition's stream, then the batch's marker or the dedup keys of the records
        that carry an idempotency key."""
        topic, partition = self.topic, self.partition
        if self._batch_key is not None:
            return [log_key(topic, partition), batch_dedup_key(topic, partition, self._batch_key)]
        return [log_key(topic, partition),
                *(dedup_key(topic, partition, key) for key in self._dedup or ()
                  if key is not None)]

    def _dedup_indexes(self) -> list[int]:
        """Per record, its dedup key's index in KEYS (0 = none)."""
        indexes, last = [], 0
        for key in self._dedup or [None] * len(self.records):
            if key is not None:
                last += 1
            indexes.append(0 if key is None else last)
        return indexes

    @property
    def args(self) -> list[Any]:
        """ARGV as values: max length, dedup TTL, then per record its dedup index, field count and
        fields."""
        args: list[Any] = [self.options.max_length or 0, self.options.dedup_ttl_ms]
        for record, dedup_index in zip(self.records.rows(), self._dedup_indexes(), strict=True):
            fields = encode_fields(record)
            args += (len(fields), *fields) if self._batch_key else (dedup_index, len(fields),
                                                                     *fields)
        return args

    def evalsha_command(self) -> tuple[Any, ...]:
        """The raw ``EVALSHA`` command (script SHA, key count, keys, args)."""
        keys = self.keys
        return ("EVALSHA", self.script.sha, len(keys), *keys, *self.args)

    def wire(self) -> bytes:
        """The script call, or for records without idempotency keys the transaction, as RESP
        bytes."""
        return self.evalsha_wire() if self.uses_script else self.transaction_wire()

    def fold_replies(self, replies: list[Any]) -> Any:
        """The script's reply, or the transaction's IDs laid out as the script's flat reply."""
        return replies[0] if self.uses_script else fold_transaction_replies(replies)

    def transaction_commands(self) -> list[tuple[Any, ...]]:
        """The transaction as values: MULTI, one XADD per record (trimmed like the script), EXEC."""
        max_length = self.options.max_length
        trim: tuple[Any, ...] = ("MAXLEN", "~", max_length) if max_length else ()
        stream = log_key(self.topic, self.partition)
        return [("MULTI",), *[("XADD", stream, *trim, "*", *encode_fields(record))
                               for record in self.records.rows()], ("EXEC",)]

    def transaction_wire(self) -> bytes:
        """The transaction as RESP bytes, identical to encoding each of ``transaction_commands``."""
        records, max_length = self.records, self.options.max_length
        fmt = records.formats
        shared = shared_headers(records.headers)
        if (records.headers is None or shared) and isinstance(fmt, ValueFormat):
            # the common publish, also with one headers object for all (a request's trace
            # context): from the columns, the headers as part of each record's suffix
            keyed_head, keyless_head = xadd_heads(self.topic, self.partition, max_length, fmt,
                                                   2 if shared else 0)
            suffix = FORMAT_WIRE[fmt] + (headers_field_wire(shared) if shared else b"")
            return xadd_transaction(keyed_head, keyless_head, suffix, records.values,
                                    records.keys)
        head, base = xadd_head(log_key(self.topic, self.partition), max_length)
        chunks = [MULTI_WIRE]
        for fields, count in records_fields_wire(records):
            chunks.append(b"*%d\r\n%b%b" % (base + count, head, fields))
        chunks.append(EXEC_WIRE)
        return b"".join(chunks)

    def evalsha_wire(self) -> bytes:
        """The command as RESP bytes, identical to ``encode_command(self.evalsha_command())``."""
        options, keys = self.options, self.keys
        head: tuple[str | int, ...] = ("EVALSHA", self.script.sha, len(keys), *keys,
                                       options.max_length or 0, options.dedup_ttl_ms)
        # chunks[0]: the header, below
        chunks = [b"", without_array_header(encode_command(head), len(head))]
        count = len(head)
        if self._batch_key is not None:
            for fields_wire, fields in records_fields_wire(self.records):
                chunks += (INDEX_WIRE[fields], fields_wire)
                count += 1 + fields
            chunks[0] = b"*%d\r\n" % count
            return b"".join(chunks)
        for (fields_wire, fields), dedup_index in zip(records_fields_wire(self.records),
                                                      self._dedup_indexes(), strict=True):
            index = (INDEX_WIRE[dedup_index] if dedup_index < 1024
                     else b"$%d\r\n%d\r\n" % (len(str(dedup_index)), dedup_index))
            chunks.append(b"%b%b%b" % (index, INDEX_WIRE[fields], fields_wire))
            count += 2 + fields
        chunks[0] = b"*%d\r\n" % count
        return b"".join(chunks)


def fold_transaction_replies(replies: list[Any]) -> Any:
    """MULTI, QUEUED..., EXEC replies as the script's flat ``[offset, 0, ...]``, or the error that
    stopped it.

    A refused command (MOVED, ASK, READONLY, CLUSTERDOWN, OOM...) aborts the whole transaction
    (EXECABORT): nothing was written and the refusal says why, so the appender redirects or retries
    as for the script. The compiled fold answers when every reply is fine (offsets as str); the
    reference (``fold_transaction_python``) the rest.
    """
    folded = fold_transaction_or_none(replies)
    return fold_transaction_python(replies) if folded is None else folded
