"""The Python client's schema registry calls, the ``streamgate schemas`` commands and typed
decoding (``decode_as``) against a real gateway over the session's Redis Cluster and etcd."""

from __future__ import annotations

import asyncio
import enum
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import msgspec
import orjson
import pydantic
import pytest

from streamgate_client import (
    Admin,
    Consumer,
    DecodeFailed,
    Producer,
    SchemaIncompatible,
    SchemaMismatch,
)
from streamgate_client.received import Message

pytestmark = pytest.mark.integration
T = TypeVar("T")
WAIT_S = 30.0
ORDER: dict[str, Any] = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "total": {"type": "integer"},
                   "status": {"enum": ["open", "paid"]},
                   "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}}},
    "required": ["id", "total"],
    "$defs": {"line": {"type": "object", "properties": {"sku": {"type": "string"},
                                                        "qty": {"type": "integer"}},
                       "required": ["sku", "qty"]}},
}


class Status(enum.Enum):
    OPEN = "open"
    PAID = "paid"


@dataclass
class Line:
    sku: str
    qty: int


@dataclass
class Order:
    id: str
    total: int
    status: Status = Status.OPEN
    lines: list[Line] = field(default_factory=list)
    note: str | None = None


class OrderModel(pydantic.BaseModel):
    id: str
    total: int
    status: Literal["open", "paid"] = "open"


class LineStruct(msgspec.Struct):
    sku: str
    qty: int


class OrderStruct(msgspec.Struct):
    id: str
    total: int
    lines: list[LineStruct] = []
    note: str | None = None


async def test_admin_registers_lists_and_reads_schema_versions_typed(
        base_url: str, topic_name: str) -> None:
    async with Admin(base_url) as admin:
        await admin.create_topic(topic_name, 1)
        first = await admin.register_schema(topic_name, ORDER)
        widened = ORDER | {"required": ["id"]}
        second = await admin.register_schema(topic_name, widened, compatibility="backward")
        same = await admin.register_schema(topic_name, widened)
        listed = await admin.schemas(topic_name)
        latest = await admin.schema(topic_name)
        one = await admin.schema(topic_name, 1)
    assert (first.version, second.version, same.version) == (1, 2, 2)
    assert [(v.version, v.compatibility) for v in listed] == [(1, "backward"), (2, "backward")]
    assert latest.version == 2
    assert latest.schema["required"] == ["id"]
    assert one.schema == ORDER
    assert one.fingerprint == first.fingerprint


async def test_an_incompatible_schema_raises_a_typed_error_naming_each_change(
        base_url: str, topic_name: str) -> None:
    async with Admin(base_url) as admin:
        await admin.create_topic(topic_name, 1)
        await admin.register_schema(topic_name, ORDER)
        narrowed = ORDER | {"required": ["id", "total", "status"]}
        with pytest.raises(SchemaIncompatible) as refused:
            await admin.register_schema(topic_name, narrowed)
        assert len(await admin.schemas(topic_name)) == 1
    assert refused.value.status == 409
    assert refused.value.compatibility == "backward"
    assert [(c.path, c.change) for c in refused.value.changes] == [("/required",
                                                                     "required_added")]
    assert "required_added" in refused.value.describe()


async def test_a_publish_that_does_not_match_raises_schema_mismatch_with_its_pointer(
        base_url: str, topic_name: str) -> None:
    async with Admin(base_url) as admin:
        await admin.create_topic(topic_name, 1)
        await admin.register_schema(topic_name, ORDER)
        async with Producer(base_url, topic_name, acks="all", transport="http") as producer:
            with pytest.raises(SchemaMismatch) as refused:
                await producer.send_many([{"value": {"id": "a", "total": 1}},
                                          {"value": {"id": "b", "total": "ten"}}])
        assert (await admin.replay(topic_name, 0)).messages == []
    assert refused.value.pointer == "/messages/1/value/total"
    assert refused.value.schema_version == 1


async def test_admin_validate_answers_the_version_or_the_pointer_and_writes_nothing(
        base_url: str, topic_name: str) -> None:
    async with Admin(base_url) as admin:
        await admin.create_topic(topic_name, 1)
        await admin.register_schema(topic_name, ORDER)
        valid = await admin.validate(topic_name, [{"key": "k", "value": {"id": "a", "total": 1}}])
        with pytest.raises(SchemaMismatch) as refused:
            await admin.validate(topic_name, [{"value": {"id": "a", "total": 1}},
                                              {"value": {"id": "b", "total": "ten"}}])
        assert (await admin.replay(topic_name, 0)).messages == []
    assert (valid.dry_run, valid.valid, valid.messages) == (True, True, 1)
    assert (valid.schema_version, list(valid.partitions)) == (1, [0])
    assert refused.value.pointer == "/messages/1/value/total"


async def consumed_as(target: type[T], base_url: str, topic: str,
                      values: list[Any]) -> list[Message[T]]:
    """``values`` published to a new one-partition topic, then read back by a consumer decoding
    them as ``target``."""
    async with Admin(base_url) as admin:
        await admin.create_topic(topic, 1)
    async with Producer(base_url, topic, acks="all") as producer:
        await producer.send_many([{"value": value} for value in values])
    async with Consumer(base_url, topic, from_="earliest", decode_as=target) as consumer:
        return [await asyncio.wait_for(anext(consumer), WAIT_S) for _ in values]


async def test_a_consumer_decodes_each_value_into_a_dataclass_and_names_a_bad_ones_offset(
        base_url: str, topic_name: str) -> None:
    good, bad = await consumed_as(Order, base_url, topic_name, [
        {"id": "a", "total": 3, "status": "paid", "lines": [{"sku": "pear", "qty": 2}],
         "added_later": True},
        {"id": "b", "total": "ten"}])
    assert good.data == Order("a", 3, Status.PAID, [Line("pear", 2)])
    with pytest.raises(DecodeFailed) as failed:
        _ = bad.data
    assert (failed.value.partition, failed.value.offset) == (0, bad.offset)
    assert "/total" in failed.value.reason
    assert bad.offset in str(failed.value)


async def test_replay_decodes_into_a_pydantic_model(base_url: str, topic_name: str) -> None:
    async with Admin(base_url) as admin:
        await admin.create_topic(topic_name, 1)
        async with Producer(base_url, topic_name, acks="all") as producer:
            await producer.send_many([{"value": {"id": "a", "total": 1}},
                                      {"value": {"id": "b", "total": 2, "status": "paid"}}])
        replayed = await admin.replay_all(topic_name, 0, decode_as=OrderModel)
        async with Producer(base_url, topic_name, acks="all") as producer:
            bad = await producer.send_and_wait({"id": "c", "total": "lots"})
        with pytest.raises(DecodeFailed) as failed:
            await admin.replay_all(topic_name, 0, decode_as=OrderModel)
    assert [d.data for d in replayed] == [OrderModel(id="a", total=1),
                                          OrderModel(id="b", total=2, status="paid")]
    assert (failed.value.partition, failed.value.offset) == (bad.partition, bad.offset)
    assert "OrderModel" in str(failed.value)


async def test_a_consumer_decodes_into_a_msgspec_struct_and_names_a_bad_values_path(
        base_url: str, topic_name: str) -> None:
    nested, optional, bad = await consumed_as(OrderStruct, base_url, topic_name, [
        {"id": "a", "total": 3, "lines": [{"sku": "pear", "qty": 2}]},
        {"id": "b", "total": 1, "note": "gift"},
        {"id": "c", "total": 1, "lines": [{"sku": "fig", "qty": "two"}]}])
    assert nested.data == OrderStruct("a", 3, [LineStruct("pear", 2)])
    assert optional.data == OrderStruct("b", 1, note="gift")
    with pytest.raises(DecodeFailed) as failed:
        _ = bad.data
    assert (failed.value.partition, failed.value.offset) == (0, bad.offset)
    assert "$.lines[0].qty" in failed.value.reason
    assert "OrderStruct" in str(failed.value)


def test_decode_as_refuses_a_type_it_cannot_build() -> None:
    with pytest.raises(TypeError, match="decode_as takes"):
        Consumer("http://127.0.0.1:1", "t", decode_as=int)


async def run_cli(base_url: str, *args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    """The CLI as a subprocess (the gateway answers in this event loop meanwhile): its exit
    status, stdout and stderr; ``stdin`` piped in when given (else none: a command that never
    reads it could exit before a write)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGATE_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "--log-level", "warning", *args, "--url", base_url,
        stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=env | {"XDG_CONFIG_HOME": "/nonexistent"})
    out, err = await asyncio.wait_for(process.communicate(stdin), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_the_schemas_commands_register_list_and_show_a_version(
        base_url: str, topic_name: str, tmp_path: Path) -> None:
    async with Admin(base_url) as admin:
        await admin.create_topic(topic_name, 1)
    path = tmp_path / "order.json"
    path.write_bytes(orjson.dumps(ORDER))
    registered = await run_cli(base_url, "schemas", "register", topic_name, "--file", str(path),
                               "-o", "json")
    narrowed = orjson.dumps(ORDER | {"required": ["id", "total", "status"]})
    refused = await run_cli(base_url, "schemas", "register", topic_name, stdin=narrowed)
    table = await run_cli(base_url, "schemas", "list", topic_name)
    shown = await run_cli(base_url, "schemas", "get", topic_name, "--version", "1")
    assert registered[0] == 0
    assert orjson.loads(registered[1])["version"] == 1
    assert refused[0] == 1
    assert "/required: required_added" in refused[2]
    header, row = table[1].splitlines()
    assert header.split()[:3] == ["VERSION", "COMPATIBILITY", "FINGERPRINT"]
    assert row.split()[:2] == ["1", "backward"]
    assert shown[0] == 0
    assert '"required": [' in shown[1]
    assert "fingerprint" in shown[1]
