"""Lua scripts on a node by their SHA1: ``LuaScript`` and ``run_script`` (EVALSHA, the script
loaded first where the node lacks it)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from storage.wire.connection import NodeAddress
from storage.wire.errors import NoScriptError
from storage.wire.lanes import NodeLanes


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
    """EVALSHA on the node's node connection, loading the script first when the node lacks it (a
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
