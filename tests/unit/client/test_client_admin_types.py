"""Admin's typed results: ``streamgate_client.admin_types`` is what
client/scripts/gen_admin_types.py makes of gateway/openapi.json (a document that drifts from it
fails here), and each record keeps the document as the gateway sent it."""

from __future__ import annotations

import copy
import difflib
import importlib.util
import json
import pickle
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

from streamgate_client import admin_types
from streamgate_client.admin import Admin, Decoded
from streamgate_client.admin_types import MessageOut, ReplayPage, TopicDetails

ROOT = Path(__file__).resolve().parents[3]
DOCUMENT = ROOT / "gateway" / "openapi.json"
COMMITTED = ROOT / "client" / "streamgate_client" / "admin_types.py"
Schemas = dict[str, Any]


def load_generator() -> ModuleType:
    path = ROOT / "client" / "scripts" / "gen_admin_types.py"
    spec = importlib.util.spec_from_file_location("gen_admin_types", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


GENERATOR = load_generator()


def generated(schemas: Callable[[Schemas], None] | None = None) -> str:
    document = json.loads(DOCUMENT.read_text())
    if schemas is not None:
        schemas(document["components"]["schemas"])
    text: str = GENERATOR.render(document)
    return text


def test_committed_types_match_the_generator(tmp_path: Path) -> None:
    GENERATOR.main([str(DOCUMENT), str(tmp_path / "admin_types.py")])
    made, committed = (tmp_path / "admin_types.py").read_text(), COMMITTED.read_text()
    diff = "".join(difflib.unified_diff(committed.splitlines(True), made.splitlines(True),
                                        "admin_types.py", "generated", n=1))
    assert made == committed, (
        "admin_types.py is stale: run `python client/scripts/gen_admin_types.py`\n"
        + diff[:4000])


def properties(schemas: Schemas, name: str) -> Schemas:
    found: Schemas = schemas[name]["properties"]
    return found


# each a change of the document the committed types would then disagree with, and the line of
# the generated module it adds (or, for a removal, takes away)
DRIFTS: dict[str, tuple[Callable[[Schemas], None], str]] = {
    "a topic field added": (
        lambda s: properties(s, "Topic").update(labels={"type": "array",
                                                        "items": {"type": "string"}}),
        "    labels: Field[Sequence[str] | None] = Field(required=False)"),
    "a topic field removed": (
        lambda s: properties(s, "Topic").pop("owner"), "    owner: Field[str] = Field()"),
    "a replayed message's time as a string": (
        lambda s: properties(s, "MessageOut")["timestamp_ms"].update(type="string"),
        "    timestamp_ms: Field[str] = Field()"),
    "a group partition's optional field made required": (
        lambda s: s["GroupPartition"]["required"].append("oldest_pending_offset"),
        "    oldest_pending_offset: Field[str | None] = Field()"),
    "a nested field made nullable": (
        lambda s: properties(s, "PurgeResult")["partitions"]["items"]["properties"][
            "purged"].update(type=["integer", "null"]),
        "    purged: Field[int | None] = Field()"),
}


@pytest.mark.parametrize("drift", DRIFTS)
def test_a_drifted_document_disagrees_with_the_committed_types(drift: str) -> None:
    change, line = DRIFTS[drift]
    made, committed = generated(change).splitlines(), COMMITTED.read_text().splitlines()
    assert made != committed
    assert (line in made) is (line not in committed)


def test_each_admin_call_returns_the_record_of_its_response_schema() -> None:
    document = json.loads(DOCUMENT.read_text())
    calls = {"create_topic": ("post", "/v1/topics"), "grow_topic": ("patch", "/v1/topics/{topic}"),
             "describe_topic": ("get", "/v1/topics/{topic}"),
             "replay": ("get", "/v1/topics/{topic}/partitions/{partition}/messages"),
             "key_history": ("get", "/v1/topics/{topic}/history"),
             "snapshot_page": ("get", "/v1/topics/{topic}/partitions/{partition}/snapshot"),
             "describe_group": ("get", "/v1/groups/{group}"),
             "seek": ("post", "/v1/groups/{group}/seek"),
             "redrive": ("post", "/v1/topics/{topic}/dlq/redrive"),
             "settle_parked_key": ("post", "/v1/groups/{group}/parked"),
             "purge": ("post", "/v1/topics/{topic}/purge"),
             "push_subscription": ("get", "/v1/topics/{topic}/push/{group}"),
             "rotate_push_secret": ("post", "/v1/topics/{topic}/push/{group}/rotate-secret")}
    for method, (verb, path) in calls.items():
        responses = document["paths"][path][verb]["responses"]
        [schema] = [r["content"]["application/json"]["schema"] for status, r in responses.items()
                    if status.startswith("2")]
        returned = typing.get_type_hints(getattr(Admin, method))["return"]
        # a call with a dry run answers one of two records: the real one or the dry run's
        records = tuple(getattr(admin_types, option["$ref"].rsplit("/", 1)[-1])
                        for option in schema.get("oneOf", [schema]))
        assert (typing.get_args(returned) or (returned,)) == records, method


def test_validate_returns_the_publish_dry_run_record() -> None:
    publish = json.loads(DOCUMENT.read_text())["paths"]["/v1/topics/{topic}/messages"]["post"]
    answers = publish["responses"]["200"]["content"]["application/json"]["schema"]["oneOf"]
    assert {"$ref": "#/components/schemas/PublishDryRun"} in answers
    assert typing.get_type_hints(Admin.validate)["return"] is admin_types.PublishDryRun


def test_the_listings_return_the_items_of_their_list_schema() -> None:
    hints = {name: typing.get_type_hints(getattr(Admin, name))["return"]
             for name in ("list_topics", "list_groups", "replay_all")}
    replayed = typing.get_args(hints.pop("replay_all"))
    assert hints == {"list_topics": list[admin_types.Topic],
                     "list_groups": list[admin_types.GroupRef]}
    # without decode_as the replayed records; with it, each decoded beside its record
    assert replayed[0] == list[MessageOut]
    assert typing.get_origin(typing.get_args(replayed[1])[0]) is Decoded


DESCRIBED = (b'{"name":"orders","partitions":1,"retention_ms":60000,"max_length":null,'
             b'"created_at_ms":1700000000000,"owner":"ops","added_by_a_newer_gateway":{"x":1},'
             b'"partition_details":[{"partition":0,"length":2,"first_offset":"1-0",'
             b'"last_offset":"2-0","tiers":{"hot":{"first_offset":"1-0","last_offset":"2-0",'
             b'"entries":2},"archive":null},"top_keys":[{"key":"a","messages":2}]}]}')


def test_a_record_serializes_as_the_document_the_gateway_sent() -> None:
    topic = TopicDetails(orjson.loads(DESCRIBED))
    assert orjson.dumps(topic) == DESCRIBED
    assert topic["added_by_a_newer_gateway"] == {"x": 1}
    assert topic.to_dict() == orjson.loads(DESCRIBED)
    assert type(topic.to_dict()["partition_details"][0]) is dict


def test_a_records_attributes_are_typed_and_nested_objects_are_records() -> None:
    topic = TopicDetails(orjson.loads(DESCRIBED))
    [details] = topic.partition_details
    assert (topic.name, topic.partitions, topic.max_length) == ("orders", 1, None)
    assert (topic.key_index, topic.compact, topic.growing_to) == (None, None, None)
    assert (details.tiers.hot.entries, details.tiers.archive) == (2, None)
    assert [(k.key, k.messages) for k in details.top_keys or ()] == [("a", 2)]
    assert isinstance(topic["partition_details"][0], admin_types.PartitionDetails)


def test_a_record_is_read_only_and_copies_keep_its_type() -> None:
    page = ReplayPage({"messages": [{"partition": 0, "offset": "1-0", "key": None,
                                     "value": [1], "headers": {}, "timestamp_ms": 5}],
                       "next_offset": "1-1"})
    with pytest.raises(TypeError, match="read-only"):
        page["next_offset"] = "2-0"
    with pytest.raises(TypeError, match="read-only"):
        page.update(next_offset="2-0")
    for again in (copy.deepcopy(page), pickle.loads(pickle.dumps(page))):
        assert again == page
        assert type(again.messages[0]) is MessageOut
    assert repr(page).startswith("ReplayPage({'messages': [MessageOut({")


def test_a_missing_required_field_raises_and_a_missing_optional_one_reads_none() -> None:
    message = MessageOut({"partition": 0, "offset": "1-0"})
    assert (message.value, message.value_b64) == (None, None)
    with pytest.raises(KeyError):
        _ = message.timestamp_ms
