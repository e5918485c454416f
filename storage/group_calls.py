"""The calls every consumer-group room makes: one command or script on the primary of a key's
slot, inside the store's read or write deadline, a missing group raised as ``MissingGroup``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from storage.cluster import ClusterRouter
from storage.group_keys import MissingGroup
from storage.group_replies import is_missing_group
from storage.group_scripts import ACK_SCRIPT, CREATE_GROUP_SCRIPT
from storage.keys import slot_of_key
from storage.wire.errors import NoScriptError, ResponseError
from storage.wire.lanes import NodeLanes
from storage.wire.resp import encode_command_with_ids
from storage.wire.scripts import LuaScript, run_script

T = TypeVar("T")


class GroupCalls:
    """The router and node lanes of a RedisStreamStore, as the group rooms use them: everything
    is retried on transient errors inside a deadline (``ClusterRouter.call``)."""

    def __init__(self, router: ClusterRouter, lanes: NodeLanes) -> None:
        self.router = router
        self.settings = router.settings
        self.lanes = lanes  # reads (blocking ones on connections of their own) and XACK

    async def read(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        return await self.router.call(what, self.settings.read_deadline_s, op)

    async def write(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        return await self.router.call(what, self.settings.write_deadline_s, op)

    async def on(self, key: str, command: tuple[Any, ...]) -> Any:
        """One command on the node connection of the primary of ``key``'s slot (asked at each
        attempt); an error reply is raised."""
        return await self.router.execute_on(self.lanes, slot_of_key(key), command)

    async def group_command(self, key: str, command: tuple[Any, ...]) -> Any:
        """One command on a group of ``key``; ``MissingGroup`` when the key holds no group."""
        try:
            return await self.on(key, command)
        except ResponseError as exc:
            if is_missing_group(exc):
                raise MissingGroup(str(exc)) from exc
            raise

    async def group_script(self, slot: int, script: LuaScript, key: str,
                           args: Sequence[Any]) -> Any:
        """A script on a group of ``key`` (in ``slot``); ``MissingGroup`` when the key holds no
        group."""
        try:
            return await run_script(self.lanes, self.router.node_for_slot(slot), script, [key],
                                    args)
        except ResponseError as exc:
            if is_missing_group(exc):
                raise MissingGroup(str(exc)) from exc
            raise

    async def create(self, key: str, group: str, first_id: str) -> bool:
        """XGROUP CREATE ... MKSTREAM, on a full node too; False when the group already
        existed."""
        created = await run_script(self.lanes, self.router.node_for_slot(slot_of_key(key)),
                                   CREATE_GROUP_SCRIPT, [key], [group, first_id])
        return bool(created)

    async def ack_on_node(self, slot: int, keys: Sequence[str], group: str,
                          ids: Sequence[str]) -> int:
        """XACK on every key of ``keys`` at once (``ACK_SCRIPT`` for more than one), on the node
        connection of the slot's primary (far less client CPU than through redis-py); an error
        reply is raised for ``write`` to retry (MOVED refreshes the slot map first)."""
        head: tuple[Any, ...] = (("XACK", keys[0], group) if len(keys) == 1 else
                                 ("EVALSHA", ACK_SCRIPT.sha, len(keys), *keys, group))
        command = encode_command_with_ids(head, ids)
        address = self.router.node_for_slot(slot)
        (reply,) = await self.lanes.execute(address, [command], exclusive=False)
        if isinstance(reply, NoScriptError):
            _, reply = await self.lanes.execute(address, [("SCRIPT", "LOAD", ACK_SCRIPT.lua),
                                                          command], exclusive=False)
        if isinstance(reply, BaseException):
            if is_missing_group(reply):
                return 0
            raise reply
        return int(reply)
