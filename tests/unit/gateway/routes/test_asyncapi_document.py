"""gateway/asyncapi.json against the implementation: the frames the server builds and accepts, its
examples, the close codes, the subscribe parameters, and GET /asyncapi.json."""

from __future__ import annotations

import ast
import asyncio
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import jsonschema
import orjson
import pytest
from aiohttp.test_utils import TestClient

from gateway import errors as gateway_errors
from gateway.auth.errors import Unauthenticated
from gateway.auth.gatekeeper import ALWAYS_PUBLIC_PATHS, Gatekeeper
from gateway.auth.keys import hash_api_key
from gateway.auth.principal import Principal
from gateway.delivery import params as subscribe_params
from gateway.delivery import ws_frames
from gateway.delivery.pause_gate import paused_frame, resumed_frame
from gateway.delivery.reauth import AUTH_FRAME_BURST, AUTH_FRAME_REFILL_S
from gateway.delivery.settle_frames import SETTLE_ACTIONS, parse_settle
from gateway.delivery.wire import (
    assignment_frame,
    authenticated_frame,
    batched,
    error_frame,
    gap_frame,
    message_frame,
    message_frames,
    quota_frame,
)
from gateway.errors import Problem, invalid_field
from gateway.publish.channel import PublishChannel
from gateway.publish.flow import PublishAnswer
from gateway.publish.frames import BadFrame, problem_frame, publish_frame_of, published_frame
from gateway.publish.validation import PublishLimits
from gateway.routes import events as events_route
from gateway.routes.health import API_DOCUMENTS, api_document, openapi_document
from gateway.routes.subscribe import principal_from_first_frame
from gateway.settings import GatewaySettings
from partitioner.group_pause import GroupPause
from storage.models import Delivery, LostRange, StoredEntry, ValueFormat

Client = TestClient[Any, Any]
ROOT = Path(__file__).resolve().parents[4]
# the modules that build or parse subscription and publish frames
FRAME_MODULES = [*sorted((ROOT / "gateway" / "delivery").glob("*.py")),
                 *sorted((ROOT / "gateway" / "publish").glob("*.py")),
                 ROOT / "gateway" / "routes" / "subscribe.py",
                 ROOT / "gateway" / "routes" / "publish_socket.py"]
DOCUMENT: dict[str, Any] = orjson.loads(api_document("asyncapi.json"))
CHANNEL: dict[str, Any] = DOCUMENT["channels"]["subscribe"]


def resolved(node: Any) -> Any:
    """``node`` with every local ``$ref`` replaced by what it points to (a missing target fails)."""
    if isinstance(node, list):
        return [resolved(item) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target: Any = DOCUMENT
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        return resolved(target)
    return {key: resolved(value) for key, value in node.items()}


def documented(action: str, channel: str = "subscribe") -> dict[str, dict[str, Any]]:
    """Frame type -> message, for the messages of ``channel``'s operations with ``action``."""
    found: dict[str, dict[str, Any]] = {}
    for operation in DOCUMENT["operations"].values():
        if (operation["action"], operation["channel"]["$ref"]) == (action,
                                                                    f"#/channels/{channel}"):
            for message in resolved(operation["messages"]):
                found[message["payload"]["properties"]["type"]["const"]] = message
    return found


SERVER = documented("receive")  # the subscriber receives the server's frames
CLIENT = documented("send")
PUBLISHER_SERVER = documented("receive", "publish")  # a publish socket's
PUBLISHER_CLIENT = documented("send", "publish")


def fits(message: dict[str, Any], frame: Any) -> bool:
    return jsonschema.Draft7Validator(message["payload"]).is_valid(frame)


def examples(messages: dict[str, dict[str, Any]]) -> Iterator[tuple[str, Any]]:
    for frame_type, message in messages.items():
        assert message["examples"], frame_type
        for example in message["examples"]:
            yield frame_type, example["payload"]


# --- the document itself -----------------------------------------------------------------------
def test_document_is_asyncapi_3_with_resolving_refs() -> None:
    assert DOCUMENT["asyncapi"] == "3.0.0"
    resolved(DOCUMENT)
    assert set(SERVER) | set(CLIENT) == set(CHANNEL["messages"])
    assert not set(SERVER) & set(CLIENT)
    publish_channel = DOCUMENT["channels"]["publish"]
    assert set(PUBLISHER_SERVER) | set(PUBLISHER_CLIENT) == set(publish_channel["messages"])
    assert set(PUBLISHER_CLIENT) == {"auth", "publish"}


# --- (a) frames the server sends ---------------------------------------------------------------
JSON_ENTRY = StoredEntry(3, "1795418703164-0", b'{"total":42}', ValueFormat.JSON, b"alice",
                         {"tag": "a"}, 1795418703164)
BINARY_ENTRY = StoredEntry(0, "1795418703170-0", b"\x00\x01", ValueFormat.BINARY, None, {},
                           1795418703170)


def frames_the_server_builds() -> list[Any]:
    """One frame of each kind, from the real builders."""
    messages = [message_frame("orders", JSON_ENTRY, 1), message_frame("orders", BINARY_ENTRY, 2)]
    messages += message_frames("orders", [Delivery(JSON_ENTRY, 3), Delivery(BINARY_ENTRY, 1)])
    return [*(orjson.loads(frame) for frame in messages + batched(messages)),
            assignment_frame([0, 3], 7), assignment_frame(range(4)),
            gap_frame(LostRange(2, "1700000000000-5", "1700000042000-0", 41)),
            gap_frame(LostRange(0, "5-0", None)),
            error_frame("bad-frame", "frames must be JSON text"),
            error_frame("slow-consumer", "closing: too slow to drain", cursor="0:1-0,3:2-5"),
            authenticated_frame("billing"), authenticated_frame("billing", 1796000000.0),
            paused_frame("orders", "billing", GroupPause(1795418703164)),
            paused_frame("orders", "billing", GroupPause(1795418703164, 1796000000000)),
            resumed_frame("orders", "billing"), quota_frame(100, 100), *publish_answers()]


def publish_answers() -> list[Any]:
    """A publish frame's answers, from the real builders."""
    written = PublishAnswer(200, b'{"results":[{"partition":0,"offset":"1-0","duplicate":false}]}',
                            {})
    problem = Problem(503, "unavailable", "Unavailable", "later", retry_after_s=1.5)
    return [orjson.loads(published_frame("7", written)),
            orjson.loads(published_frame("8", PublishAnswer(202, b'{"accepted":3}', {}))),
            orjson.loads(problem_frame("9", problem, "/v1/publish")),
            orjson.loads(problem_frame("10", invalid_field("/messages", "empty"), "/v1/publish"))]


def test_every_server_frame_is_documented_and_valid() -> None:
    built = frames_the_server_builds()
    assert {frame["type"] for frame in built} == set(SERVER)
    for frame in built:
        assert fits(SERVER[frame["type"]], frame), frame


def test_every_publish_socket_frame_is_documented_and_valid() -> None:
    services = SimpleNamespace(settings=GatewaySettings())
    ready = PublishChannel(cast(Any, services), Gatekeeper(None), Principal("p", "api_key"),
                           cast(Any, None)).ready_frame()
    built = [ready, authenticated_frame("p"), authenticated_frame("p", 1796000000.0),
             error_frame("bad-frame", "not JSON"),
             *publish_answers()]
    assert {frame["type"] for frame in built} == set(PUBLISHER_SERVER)
    for frame in built:
        assert fits(PUBLISHER_SERVER[frame["type"]], frame), frame


def frame_types_in_source() -> set[str]:
    """The ``type`` of every frame literal in the frame modules: ``{"type": "x", ...}`` dicts and
    ``b'{"type":"x"...'`` byte strings."""
    found: set[str] = set()
    for path in FRAME_MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if (isinstance(key, ast.Constant) and key.value == "type"
                            and isinstance(value, ast.Constant)):
                        found.add(value.value)
            elif isinstance(node, ast.Constant) and isinstance(node.value, bytes):
                match = re.match(rb'\{"type":"([a-z-]+)"', node.value)
                if match:
                    found.add(match.group(1).decode())
    return found


def test_every_delivery_frame_type_is_documented() -> None:
    assert frame_types_in_source() == set(SERVER) | set(PUBLISHER_SERVER)


def error_codes_in_source() -> set[str]:
    """The code of every ``error_frame("<code>", ...)`` call in the frame modules."""
    codes: set[str] = set()
    for path in FRAME_MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "error_frame"):
                first = node.args[0]
                assert isinstance(first, ast.Constant), f"{path}: error_frame code not a literal"
                codes.add(first.value)
    return codes


def test_every_error_code_the_gateway_sends_is_documented() -> None:
    documented_codes = SERVER["error"]["payload"]["properties"]["code"]["enum"]
    stream_ends = {*events_route.ERROR_CODES.values(), "unavailable"}  # an event stream's last
    assert error_codes_in_source() | stream_ends == set(documented_codes)


# --- (b) frames the server accepts -------------------------------------------------------------
class FirstFrame:
    """A socket whose first frame is ``text``."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def receive(self, timeout_s: float) -> str:
        return self.text


def accepted_as_first_frame(frame: Any) -> bool:
    socket = cast(Any, FirstFrame(orjson.dumps(frame).decode()))
    try:
        asyncio.run(principal_from_first_frame(socket, Gatekeeper(None), 1.0))
    except Unauthenticated:
        return False
    return True


def accepted_as_settle_frame(frame: Any) -> bool:
    try:
        parse_settle(frame)
    except ValueError:
        return False
    return True


def accepted_as_publish_frame(frame: Any) -> bool:
    """As a socket takes it: a ``publish`` type, then an id to answer and a topic."""
    if frame.get("type") != "publish":
        return False
    try:
        publish_frame_of(frame, 100)
    except BadFrame:
        return False
    return True


def test_only_documented_client_frames_are_accepted() -> None:
    candidates = {*SETTLE_ACTIONS, *CLIENT, *SERVER, *PUBLISHER_SERVER, "ping", "pong", "credit",
                  "subscribe", "unsubscribe", "revoked", "seek", "close", "", "ACK", "Auth",
                  "Publish", "produce"}
    for frame_type in candidates:
        # everything the parsers ask for besides the type
        frame = {"type": frame_type, "messages": [{"partition": 0, "offset": "1-0"}],
                 "token": "a.b.c", "id": "1", "topic": "t"}
        accepted = (accepted_as_first_frame(frame) or accepted_as_settle_frame(frame)
                    or accepted_as_publish_frame(frame))
        assert accepted == (frame_type in CLIENT), frame_type


def test_auth_is_the_only_frame_taken_first() -> None:
    for frame_type, example in examples(CLIENT):
        assert accepted_as_first_frame(example) == (frame_type == "auth"), example
        assert accepted_as_settle_frame(example) == (frame_type in SETTLE_ACTIONS), example
        assert accepted_as_publish_frame(example) == (frame_type == "publish"), example


def test_the_documented_auth_frame_rate_is_the_gateways() -> None:
    described = CLIENT["auth"]["description"]
    assert (f"takes {AUTH_FRAME_BURST} auth frames in a row, then one per "
            f"{AUTH_FRAME_REFILL_S:g} s") in described


# --- (c) the examples --------------------------------------------------------------------------
def test_documented_client_examples_are_valid() -> None:
    for frame_type, example in examples(CLIENT):
        assert fits(CLIENT[frame_type], example), example
        if frame_type == "auth":
            assert accepted_as_first_frame(example)
            continue
        if frame_type == "publish":
            limits = PublishLimits.from_settings(GatewaySettings())
            batch = publish_frame_of(example, 100).batch(limits)
            assert len(batch) == len(example["messages"])
            continue
        action, refs, delay_ms, _ = parse_settle(example)
        assert action == frame_type
        assert refs == [(m["partition"], m["offset"]) for m in example["messages"]]
        assert delay_ms == example.get("delay_ms", 0)


def test_every_documented_server_example_fits_its_schema() -> None:
    for frame_type, example in examples(SERVER):
        assert example["type"] == frame_type
        assert fits(SERVER[frame_type], example), example


@pytest.mark.parametrize("messages", [
    [], [{"partition": True, "offset": "1-0"}], [{"partition": 0, "offset": 1}],
    [{"partition": 0}], ["0:1-0"], [{"partition": 0, "offset": "1-0"}] * 10_001,
])
def test_a_settle_frame_outside_the_schema_is_refused(messages: list[Any]) -> None:
    frame = {"type": "ack", "messages": messages}
    assert not fits(CLIENT["ack"], frame)
    assert not accepted_as_settle_frame(frame)


@pytest.mark.parametrize("delay_ms", [-1, 86_400_001, 1.5, "5", True])
def test_a_nack_delay_outside_the_schema_is_refused(delay_ms: Any) -> None:
    frame = {"type": "nack", "messages": [{"partition": 0, "offset": "1-0"}], "delay_ms": delay_ms}
    assert not fits(CLIENT["nack"], frame)
    assert not accepted_as_settle_frame(frame)


# --- (d) close codes ---------------------------------------------------------------------------
def close_codes_in_source() -> set[int]:
    """The WebSocket close codes the gateway sends: gateway.errors' ``WS_CLOSE_*`` and the RFC 6455
    ones of gateway.delivery.ws_frames (``CLOSE_*``)."""
    codes = set()
    for module in (gateway_errors, ws_frames):
        for name, value in vars(module).items():
            if (re.fullmatch(r"(WS_)?CLOSE_[A-Z_]+", name) and type(value) is int
                    and 1000 <= value <= 4999):
                codes.add(value)
    return codes


def test_every_close_code_is_documented() -> None:
    documented_codes = {entry["code"]: entry for entry in CHANNEL["x-close-codes"]}
    assert set(documented_codes) == close_codes_in_source()
    for code, entry in documented_codes.items():
        assert entry["reconnect"] in CHANNEL["x-reconnect-values"], code
        assert str(code) in CHANNEL["description"], code


# --- the subscribe parameters ------------------------------------------------------------------
def query_names_in_source() -> set[str]:
    """The query parameters ``parse_subscribe_params`` reads (``query.get*("x")``,
    ``_int(query, "x", ...)``)."""
    tree = ast.parse(Path(subscribe_params.__file__).read_text())
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func, args = node.func, node.args
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.value.id == "query" and func.attr in ("get", "getall")):
            name = args[0]
        elif isinstance(func, ast.Name) and func.id in ("_int", "_number"):
            name = args[1]
        else:
            continue
        if isinstance(name, ast.Constant):  # _int's own query.get(name) is not a parameter
            names.add(name.value)
    return names


def test_query_parameters_match_the_code_and_openapi() -> None:
    query = CHANNEL["bindings"]["ws"]["query"]["properties"]
    assert set(query) == query_names_in_source()
    subscribe = orjson.loads(openapi_document())["paths"]["/v1/subscribe"]["get"]
    assert set(query) == {parameter["name"] for parameter in subscribe["parameters"]}
    assert query["max_in_flight"]["default"] == str(subscribe_params.DEFAULT_MAX_IN_FLIGHT)
    assert query["ack_timeout_ms"]["default"] == str(subscribe_params.DEFAULT_ACK_TIMEOUT_MS)
    assert query["max_deliveries"]["default"] == str(subscribe_params.DEFAULT_MAX_DELIVERIES)


# --- (e) served like /openapi.json -------------------------------------------------------------
@pytest.fixture
def settings(tmp_path: Path) -> GatewaySettings:
    """Credentials required: the API descriptions are served without them."""
    config = tmp_path / "auth.toml"
    config.write_text(f'[[api_keys]]\nprincipal = "alice"\nsha256 = "{hash_api_key("k")}"\n')
    return GatewaySettings(auth_config_path=str(config))


async def test_asyncapi_document_is_served_without_credentials(client: Client) -> None:
    assert (await client.get("/v1/topics")).status == 401
    for name in API_DOCUMENTS:
        response = await client.get(f"/{name}")
        assert response.status == 200, name
        assert response.content_type == "application/json"
        assert await response.read() == api_document(name)


def test_api_documents_are_public_and_shipped() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    shipped = pyproject["tool"]["setuptools"]["package-data"]["gateway"]
    for name in API_DOCUMENTS:
        assert f"/{name}" in ALWAYS_PUBLIC_PATHS
        assert name in shipped


def test_every_event_a_stream_ends_with_is_documented_on_the_events_channel() -> None:
    channel = DOCUMENT["channels"]["events"]
    assert set(channel["messages"]) == {"message", "gap", "error"}
    error_schema = DOCUMENT["components"]["messages"]["error"]["payload"]
    for code in {*events_route.ERROR_CODES.values(), "unavailable"}:
        raw = events_route.error_event(code, "ended", "0:1-0")
        data = orjson.loads(raw.split(b"data: ", 1)[1])
        jsonschema.validate(data, error_schema)
