"""The quota ledger on the real Redis Cluster: charges from several writers add up per subject and
field, subjects spread over nodes are read in one call, and forgetting keeps what came later."""

from __future__ import annotations

import uuid

import pytest

from storage.quota_ledger import RedisQuotaLedger, ledger_key
from storage.redis_store import RedisStreamStore

pytestmark = pytest.mark.integration


@pytest.fixture
def ledger(store: RedisStreamStore) -> RedisQuotaLedger:
    return store.quotas


def subjects(count: int) -> list[str]:
    run = uuid.uuid4().hex[:8]
    return [f"tenant:{{odd}} name {run}/{i}" for i in range(count)]


async def test_charges_add_up_per_subject_and_field_across_nodes(ledger: RedisQuotaLedger) -> None:
    names = subjects(12)
    await ledger.charge({name: {"t\x1f1\x1f60000": 10, "u\x1f2\x1f60000": i}
                         for i, name in enumerate(names)})
    await ledger.charge({names[0]: {"t\x1f1\x1f60000": 5}})
    read = await ledger.buckets([*names, f"never charged {uuid.uuid4().hex}"])
    assert read[names[0]] == {"t\x1f1\x1f60000": 15}  # a zero charge writes nothing
    assert read[names[3]] == {"t\x1f1\x1f60000": 10, "u\x1f2\x1f60000": 3}
    assert all(fields == {} for name, fields in read.items() if name not in names)


async def test_forgetting_takes_back_what_was_read_and_keeps_later_charges(
        ledger: RedisQuotaLedger) -> None:
    (name,) = subjects(1)
    await ledger.charge({name: {"old": 40, "current": 7}})
    counted = await ledger.buckets([name])
    await ledger.charge({name: {"old": 2}})  # lands between the read and the drop
    await ledger.forget({name: {"old": counted[name]["old"]}})
    assert (await ledger.buckets([name]))[name] == {"old": 2, "current": 7}
    await ledger.forget({name: {"old": 2}})
    assert (await ledger.buckets([name]))[name] == {"current": 7}


def test_subjects_with_braces_get_a_hash_tag_of_their_own() -> None:
    assert ledger_key("tenant:{a}") != ledger_key("tenant:{b}")
    assert ledger_key("tenant:{a}").count("{") == 1
