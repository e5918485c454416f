"""The Lua append script and the argument layout it expects.

One call appends a whole batch to one partition, so a partition's batch is atomic and the idempotency check
(GET of the dedup key) and the XADD cannot interleave with another writer.

KEYS[1]  = the partition's stream; KEYS[2..] = dedup keys of the records that carry an idempotency key.
ARGV[1]  = approximate max length (0 = unbounded); ARGV[2] = dedup TTL in ms;
then per record: dedup index (0 = none, i means KEYS[i + 1]), field count, fields...
Reply: a flat array ``[offset, dupflag, offset, dupflag, ...]`` in record order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from storage.codec import encode_fields
from storage.keys import dedup_key, log_key
from storage.models import AppendOptions, AppendResult, Record

APPEND_LUA = """
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
    -- A replicated write on the duplicate path, so a following WAIT on this connection also covers the
    -- original entry (replication is in order); a bare GET would let acks=all confirm an unreplicated write.
    redis.call('SET', KEYS[d + 1], found, 'KEEPTTL')
    out[#out + 1] = found
    out[#out + 1] = 1
  else
    local id
    if maxlen > 0 then
      id = redis.call('XADD', log, 'MAXLEN', '~', maxlen, '*', unpack(ARGV, i + 2, last))
    else
      id = redis.call('XADD', log, '*', unpack(ARGV, i + 2, last))
    end
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



@dataclass(frozen=True, slots=True)
class LuaScript:
    """A Lua script's text and the SHA1 that EVALSHA names it by."""

    lua: str
    sha: str

    @classmethod
    def of(cls, lua: str) -> LuaScript:
        """The script with its SHA computed from the text."""
        return cls(lua, hashlib.sha1(lua.encode()).hexdigest())


APPEND_SCRIPT = LuaScript.of(APPEND_LUA)
APPEND_SHA = APPEND_SCRIPT.sha


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """Keys and arguments of one script call on one partition (the append script unless told otherwise)."""

    partition: int
    keys: list[str]
    args: list[Any]
    script: LuaScript = APPEND_SCRIPT

    def evalsha_command(self) -> tuple[Any, ...]:
        """The raw ``EVALSHA`` command (script SHA, key count, keys, args)."""
        return ("EVALSHA", self.script.sha, len(self.keys), *self.keys, *self.args)


def build_append_call(topic: str, partition: int, records: Sequence[Record], options: AppendOptions) -> ScriptCall:
    """Lay out one partition's records as the script's KEYS and ARGV."""
    keys = [log_key(topic, partition)]
    args: list[Any] = [options.max_length or 0, options.dedup_ttl_ms]
    for record in records:
        fields = encode_fields(record)
        dedup_index = 0
        if record.idempotency_key is not None:
            keys.append(dedup_key(topic, partition, record.idempotency_key))
            dedup_index = len(keys) - 1
        args += (dedup_index, len(fields), *fields)
    return ScriptCall(partition, keys, args)


def parse_append_reply(partition: int, reply: Sequence[Any]) -> list[AppendResult]:
    """Turn the script's flat ``[offset, dupflag, ...]`` reply into results in record order."""
    return [
        AppendResult(partition, _text(offset), bool(int(flag)))
        for offset, flag in zip(reply[0::2], reply[1::2], strict=True)
    ]


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw
