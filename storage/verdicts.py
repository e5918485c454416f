"""The verdict board of a partition: one small hash beside its stream, group -> the owner's
latest verdict and flow (opaque bytes), replaced whole each round and expiring unless renewed, so
any gateway reads what the owner judged and a gone owner's verdicts vanish instead of going
stale."""

from __future__ import annotations

from collections.abc import Mapping

from storage.cluster import ClusterRouter
from storage.keys import PREFIX, partition_tag, slot_of
from storage.wire.lanes import NodeLanes
from storage.wire.scripts import LuaScript, run_script

POST = LuaScript.of("""
redis.call('DEL', KEYS[1])
if #ARGV > 1 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 2))
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return 1
""")


def verdicts_key(topic: str, partition: int) -> str:
    """The hash of a partition's group verdicts (in the partition's slot)."""
    return f"{PREFIX}:{partition_tag(topic, partition)}:verdicts"


class RedisVerdictBoard:
    """Posts and reads the verdicts of a partition's groups on the store's connections."""

    def __init__(self, router: ClusterRouter, lanes: NodeLanes) -> None:
        self._router, self._lanes = router, lanes

    async def post(self, topic: str, partition: int, verdicts: Mapping[str, bytes],
                   ttl_ms: int) -> None:
        """Replace the partition's verdicts (none: the hash goes), kept ``ttl_ms`` unless posted
        again."""
        slot, args = slot_of(topic, partition), [str(ttl_ms).encode()]
        for group, verdict in verdicts.items():
            args += [group.encode(), verdict]

        async def op() -> object:
            return await run_script(self._lanes, self._router.node_for_slot(slot), POST,
                                    [verdicts_key(topic, partition)], args)

        await self._router.call("post_verdicts", self._router.settings.write_deadline_s, op)

    async def read(self, topic: str, partition: int, group: str) -> bytes | None:
        """The group's verdict on the partition, None when the owner has posted none lately."""
        reply = await self._router.call_on_slot(
            self._lanes, "read_verdict", self._router.settings.read_deadline_s,
            slot_of(topic, partition), ("HGET", verdicts_key(topic, partition), group))
        return None if reply is None else bytes(reply)
