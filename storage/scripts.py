"""The Lua append script and the argument layout it expects; the transaction sent instead where it
can be.

One call appends a whole batch to one partition, so a partition's batch is atomic and the
idempotency check (GET of the dedup key) and the XADD cannot interleave with another writer.

KEYS[1]  = the partition's stream; KEYS[2..] = dedup keys of the records that carry an idempotency
  key.
ARGV[1]  = approximate max length (0 = unbounded); ARGV[2] = dedup TTL in ms;
then per record: dedup index (0 = none, i means KEYS[i + 1]), field count, fields...
Reply: a flat array ``[offset, dupflag, offset, dupflag, ...]`` in record order.

On the lean connections a partition's records without any idempotency key go as MULTI, XADD..., EXEC
instead (``AppendCall.wire``): the same entries, as atomic, and cheaper for Redis than the script's
Lua.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from storage.codec import encode_fields
from storage.keys import batch_dedup_key, dedup_key, log_key
from storage.models import AppendOptions, Records, ValueFormat
from storage.native import refuse_if_off
from storage.resp import NoScriptError, ResponseError, encode_command
from storage.transactions import fold_transaction_replies

if TYPE_CHECKING:
    from storage.lean import NodeAddress, NodeLanes

# One entry of fields t[first..last] on a stream, trimmed to about maxlen entries (0: untrimmed).
XADD_LUA = """
local function xadd(log, maxlen, t, first, last)
  if maxlen > 0 then
    return redis.call('XADD', log, 'MAXLEN', '~', maxlen, '*', unpack(t, first, last))
  end
  return redis.call('XADD', log, '*', unpack(t, first, last))
end
"""

APPEND_LUA = XADD_LUA + """
local log = KEYS[1]
local maxlen = tonumber(ARGV[1])
local ttl = ARGV[2]
local out = {}
local i = 3
local n = #ARGV
while i <= n do
  local d = tonumber(ARGV[i])
  local last = i + 1 + tonumber(ARGV[i + 1])
  local found = false
  if d > 0 then
    found = redis.call('GET', KEYS[d + 1])
  end
  if found then
    -- A replicated write on the duplicate path, so a following WAIT on this connection also covers
    -- the original entry (replication is in order); a bare GET would let acks=all confirm an
    -- unreplicated write.
    redis.call('SET', KEYS[d + 1], found, 'KEEPTTL')
    out[#out + 1] = found
    out[#out + 1] = 1
  else
    local id = xadd(log, maxlen, ARGV, i + 2, last)
    if d > 0 then
      redis.call('SET', KEYS[d + 1], id, 'PX', ttl, 'NX')
    end
    out[#out + 1] = id
    out[#out + 1] = 0
  end
  i = last + 1
end
return out
"""

BATCH_KEY_REUSED = "IDEMPOTENCY_CONFLICT"  # the batch script's own error code


def is_reused_batch_key(reply: BaseException) -> bool:
    """Whether an error reply is the batch script refusing a key used for another batch."""
    return isinstance(reply, ResponseError) and str(reply).startswith(BATCH_KEY_REUSED)


# A whole batch's records in this partition, idempotent as one: KEYS[2] is the batch's marker;
# ARGV[1] = approximate max length, ARGV[2] = dedup TTL in ms, then per record: field count,
# fields... The marker holds the records' offsets; a retry answers them as duplicates.
APPEND_BATCH_LUA = XADD_LUA + """
local marker = KEYS[2]
local n = #ARGV
local out = {}
local found = redis.call('GET', marker)
if found then
  -- replicated, so a following WAIT also covers the first write (see the script above)
  redis.call('SET', marker, found, 'KEEPTTL')
  local count = 0
  local i = 3
  while i <= n do
    count = count + 1
    i = i + 1 + tonumber(ARGV[i])
  end
  for id in string.gmatch(found, '%S+') do
    out[#out + 1] = id
    out[#out + 1] = 1
  end
  if #out ~= 2 * count then
    return redis.error_reply('""" + BATCH_KEY_REUSED + """ the key was used for another batch')
  end
  return out
end
local log = KEYS[1]
local maxlen = tonumber(ARGV[1])
local ids = {}
local i = 3
while i <= n do
  local last = i + tonumber(ARGV[i])
  local id = xadd(log, maxlen, ARGV, i + 1, last)
  ids[#ids + 1] = id
  out[#out + 1] = id
  out[#out + 1] = 0
  i = last + 1
end
redis.call('SET', marker, table.concat(ids, ' '), 'PX', ARGV[2])
return out
"""


@dataclass(frozen=True, slots=True)
class LuaScript:
    """A Lua script's text and the SHA1 that EVALSHA names it by."""

    lua: str
    sha: str

    @classmethod
    def of(cls, lua: str) -> LuaScript:
        """The script with its SHA computed from the text."""
        return cls(lua, hashlib.sha1(lua.encode()).hexdigest())


async def run_script(lanes: NodeLanes, address: NodeAddress, script: LuaScript,
                     keys: Sequence[str | bytes],
                     args: Sequence[Any]) -> Any:
    """EVALSHA on the node's lean connection, loading the script first when the node lacks it (a
    fresh or promoted primary: NOSCRIPT); its reply, an error reply raised (MOVED included, for the
    caller's router to refresh the slot map and retry)."""
    command = ("EVALSHA", script.sha, len(keys), *keys, *args)
    (reply,) = await lanes.execute(address, [command], exclusive=False)
    if isinstance(reply, NoScriptError):
        _, reply = await lanes.execute(address, [("SCRIPT", "LOAD", script.lua), command],
                                       exclusive=False)
    if isinstance(reply, BaseException):
        raise reply
    return reply


APPEND_SCRIPT = LuaScript.of(APPEND_LUA)
APPEND_SHA = APPEND_SCRIPT.sha
APPEND_BATCH_SCRIPT = LuaScript.of(APPEND_BATCH_LUA)


class PartitionCall(Protocol):
    """One partition's write, as the appender sends it.

    A redis-py pipeline sends ``evalsha_command`` (one script call, one reply). The lean connections
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
        can be read folded, ``storage.transactions.read_transactions``), else None."""
        ...

    def evalsha_command(self) -> tuple[Any, ...]:
        """The command as values (for a redis-py pipeline)."""
        ...

    def wire(self) -> bytes:
        """The call as RESP bytes (for the lean connections)."""
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
        """The same command as RESP bytes (what the lean connections send)."""
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
    straight to RESP for the lean connections.

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
        """Whether the lean wire is a script (the records or the batch have idempotency keys) or
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
            keyed_head, keyless_head = _xadd_heads(self.topic, self.partition, max_length, fmt,
                                                   2 if shared else 0)
            suffix = FORMAT_WIRE[fmt] + (_headers_field_wire(shared) if shared else b"")
            return xadd_transaction(keyed_head, keyless_head, suffix, records.values,
                                    records.keys)
        head, base = _xadd_head(log_key(self.topic, self.partition), max_length)
        chunks = [_MULTI_WIRE]
        for fields, count in records_fields_wire(records):
            chunks.append(b"*%d\r\n%b%b" % (base + count, head, fields))
        chunks.append(_EXEC_WIRE)
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
                chunks += (_INDEX_WIRE[fields], fields_wire)
                count += 1 + fields
            chunks[0] = b"*%d\r\n" % count
            return b"".join(chunks)
        for (fields_wire, fields), dedup_index in zip(records_fields_wire(self.records),
                                                      self._dedup_indexes(), strict=True):
            index = (_INDEX_WIRE[dedup_index] if dedup_index < 1024
                     else b"$%d\r\n%d\r\n" % (len(str(dedup_index)), dedup_index))
            chunks.append(b"%b%b%b" % (index, _INDEX_WIRE[fields], fields_wire))
            count += 2 + fields
        chunks[0] = b"*%d\r\n" % count
        return b"".join(chunks)


def _xadd_head(stream: str, max_length: int | None) -> tuple[bytes, int]:
    """An XADD's bulk strings before its fields (name, stream, trim, ``*``), without the array
    header, and how many there are."""
    if max_length:
        return without_array_header(
            encode_command(("XADD", stream, "MAXLEN", "~", max_length, "*")), 6), 6
    return without_array_header(encode_command(("XADD", stream, "*")), 3), 3


@functools.lru_cache(maxsize=4096)
def _xadd_heads(topic: str, partition: int, max_length: int | None,
                value_format: ValueFormat, more_fields: int = 0) -> tuple[bytes, bytes]:
    """The start of a keyed and of a keyless plain record's XADD: array header, name, stream, trim,
    ``*`` (the same bytes: either has one name and value, then the format's, then
    ``more_fields``)."""
    bulk, base = _xadd_head(log_key(topic, partition), max_length)
    # K+key or v, the value; f and the format where there is one
    fields = 2 + FORMAT_FIELD_COUNT[value_format] + more_fields
    head = b"*%d\r\n%b" % (base + fields, bulk)
    return head, head


def xadd_transaction_python(keyed_head: bytes, keyless_head: bytes, value_format: bytes,
                            values: list[bytes], keys: list[bytes | None]) -> bytes:
    """MULTI, one XADD per value (``keyed_head`` then ``K`` + the key as the field name, or
    ``keyless_head`` then ``v``; the value; ``value_format``'s ``f`` field, empty for JSON), EXEC,
    as RESP bytes. The reference of the compiled ``storage._wire.xadd_transaction``."""
    chunks = [_MULTI_WIRE]
    append = chunks.append
    for value, key in zip(values, keys, strict=True):
        if key is None:
            append(b"%b$1\r\nv\r\n$%d\r\n%b\r\n%b" % (keyless_head, len(value), value,
                                                      value_format))
        else:
            append(_KEYED_XADD % (keyed_head, len(key) + 1, key, len(value), value, value_format))
    append(_EXEC_WIRE)
    return b"".join(chunks)


PartitionColumns = tuple[list[int], list[bytes], list[bytes | None]]  # indexes, values, keys


def split_by_partition_python(partitions: list[int], values: list[bytes],
                              keys: list[bytes | None]) -> dict[int, PartitionColumns]:
    """Plain records' columns grouped by partition, in order of first appearance: each partition's
    record indexes, values and keys. The reference of the compiled
    ``storage._wire.split_by_partition``."""
    groups: dict[int, PartitionColumns] = {}
    for index, (partition, value, key) in enumerate(zip(partitions, values, keys, strict=True)):
        group = groups.get(partition)
        if group is None:
            group = groups[partition] = ([], [], [])
        group[0].append(index)
        group[1].append(value)
        group[2].append(key)
    return groups


def reply_offsets_python(partition: int, reply: list[Any]) -> list[str]:
    """The offsets of the script's flat ``[offset, dupflag, ...]`` reply (or a folded
    transaction's). The reference of the compiled ``reply_offsets``."""
    return [offset.decode() if isinstance(offset, bytes) else offset for offset in reply[0::2]]


def in_input_order_python(count: int, groups: dict[int, PartitionColumns],
                          written: dict[int, list[str]]) -> list[str]:
    """A split batch's offsets back in input order: ``groups`` (``split_by_partition``) says where
    each partition's records were, ``written`` what they got. The reference of the compiled
    ``in_input_order``."""
    ordered = [""] * count
    for partition, (indexes, _, _) in groups.items():
        for index, offset in zip(indexes, written[partition], strict=True):
            ordered[index] = offset
    return ordered


def without_array_header(command: bytes, count: int) -> bytes:
    """The bulk strings of an encoded command, without its ``*<count>`` array header."""
    return command[len(b"*%d\r\n" % count):]


_MULTI_WIRE = encode_command(("MULTI",))
_EXEC_WIRE = encode_command(("EXEC",))
# The f field as RESP: JSON values carry none (storage.codec), binary ones ``f`` ``b``.
FORMAT_WIRE = {ValueFormat.JSON: b"", ValueFormat.BINARY: b"$1\r\nf\r\n$1\r\nb\r\n"}
FORMAT_FIELD_COUNT = {ValueFormat.JSON: 0, ValueFormat.BINARY: 2}
_INDEX_WIRE = [b"$%d\r\n%d\r\n" % (len(str(i)), i) for i in range(1024)]
# K and the key, the value, f (formatted, maybe none)
_KEYED_FIELDS = b"$%d\r\nK%b\r\n$%d\r\n%b\r\n%b"
_KEYED_XADD = b"%b" + _KEYED_FIELDS  # the same after its XADD's header


def small_int_wire(number: int) -> bytes:
    """A non-negative integer as a RESP bulk string (the common small ones precomputed)."""
    return _INDEX_WIRE[number] if number < 1024 else b"$%d\r\n%d\r\n" % (len(str(number)),
                                                                          number)


def shared_headers(column: Sequence[Mapping[str, str]] | None) -> Mapping[str, str] | None:
    """The one non-empty headers object every record of the column has, else None."""
    if not column or not column[0]:
        return None
    first = column[0]
    return first if column.count(first) == len(column) else None


def records_fields_wire(records: Records) -> Iterator[tuple[bytes, int]]:
    """Each record's XADD fields as RESP, and how many there are (names and values); headers that
    are one object for several records (a request's trace context) are encoded once."""
    last_headers: Mapping[str, str] | None = None
    last_wire = b""
    for value, fmt, key, headers in record_columns(records):
        fields, count = _value_fields_wire(value, fmt, key)
        if not headers:
            yield fields, count
            continue
        if headers is not last_headers:
            last_headers, last_wire = headers, _headers_field_wire(headers)
        yield fields + last_wire, count + 2


def _value_fields_wire(value: bytes, fmt: ValueFormat, key: bytes | None) -> tuple[bytes, int]:
    """A record's fields before its headers (the value under its key, the format) as RESP."""
    fmt_wire, count = FORMAT_WIRE[fmt], 2 + FORMAT_FIELD_COUNT[fmt]
    if key is not None:
        return _KEYED_FIELDS % (len(key) + 1, key, len(value), value, fmt_wire), count
    return b"$1\r\nv\r\n$%d\r\n%b\r\n%b" % (len(value), value, fmt_wire), count


def _headers_field_wire(headers: Mapping[str, str]) -> bytes:
    """The ``h`` field (headers as an orjson map) as RESP, as ``encode_fields`` writes it."""
    encoded = orjson.dumps(dict(headers))
    return b"$1\r\nh\r\n$%d\r\n%b\r\n" % (len(encoded), encoded)


def record_columns(
    records: Records,
) -> Iterator[tuple[bytes, ValueFormat, bytes | None, Mapping[str, str]]]:
    """Each record's value, format, key and headers."""
    count = len(records.values)
    return zip(records.values, records.format_column(), records.keys,
               records.headers or [{}] * count, strict=True)


def flat_reply(partition: int, reply: list[Any]) -> list[Any]:
    """An append call's reply as the appender keeps it: the script's flat ``[offset, dupflag,
    ...]``."""
    return reply


def reply_duplicates(reply: list[Any]) -> list[bool]:
    """The duplicate flags of the script's flat ``[offset, dupflag, ...]`` reply."""
    return [bool(int(flag)) for flag in reply[1::2]]


try:
    refuse_if_off()
    from storage import _wire
except ImportError:  # built without a C compiler: the reference, same bytes
    WIRE_NATIVE = False
    xadd_transaction: Callable[[bytes, bytes, bytes, list[bytes], list[bytes | None]], bytes] = \
        xadd_transaction_python
    split_by_partition: Callable[[list[int], list[bytes], list[bytes | None]],
                                 dict[int, PartitionColumns]] = split_by_partition_python
    reply_offsets: Callable[[int, list[Any]], list[str]] = reply_offsets_python
    in_input_order: Callable[[int, dict[int, PartitionColumns], dict[int, list[str]]],
                             list[str]] = in_input_order_python
else:
    WIRE_NATIVE = True
    xadd_transaction = _wire.xadd_transaction
    split_by_partition = _wire.split_by_partition
    reply_offsets = _wire.reply_offsets
    in_input_order = _wire.in_input_order
