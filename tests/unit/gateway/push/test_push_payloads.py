"""The requests a push sends: JSON batches and binary CloudEvents as the AsyncAPI document
describes them, signed so that the client library's verifier accepts them."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import jsonschema
import orjson
import pytest

from gateway.documents import entry_document
from gateway.push.payload import build_request, message_id
from gateway.push.signing import new_secret, secret_key
from gateway.routes.health import api_document
from storage.models import Delivery, StoredEntry, ValueFormat
from streamgate_client import verify_webhook

DOCUMENT: dict[str, Any] = orjson.loads(api_document("asyncapi.json"))
SECRET = new_secret()
KEYS = [secret_key(SECRET)]
JSON_ENTRY = StoredEntry(3, "1795418703164-0", b'{"total":42}', ValueFormat.JSON, b"alice",
                         {"tag": "a"}, 1795418703164)
BINARY_ENTRY = StoredEntry(3, "1795418703170-0", b"\x00\x01", ValueFormat.BINARY, None, {},
                           1795418703170)
EVENT_ENTRY = StoredEntry(
    0, "1795418703200-0", b"<order/>", ValueFormat.BINARY, b"bob",
    {"ce-specversion": "1.0", "ce-id": "evt-1", "ce-source": "/shop", "ce-type": "order.placed",
     "content-type": "application/xml"}, 1795418703200)


def conforms(schema_name: str, instance: Any) -> None:
    """Validate against a component schema of the AsyncAPI document (local refs resolved)."""
    schema = {"$ref": f"#/components/schemas/{schema_name}", "components": DOCUMENT["components"]}
    jsonschema.Draft202012Validator(schema).validate(instance)


def headers_conform(message: str, headers: dict[str, str]) -> None:
    schema = DOCUMENT["components"]["messages"][message]["headers"]
    jsonschema.Draft202012Validator(schema).validate(headers)


def test_a_json_batch_is_the_documented_envelope_and_verifies() -> None:
    deliveries = [Delivery(JSON_ENTRY, 1), Delivery(BINARY_ENTRY, 2)]
    request = build_request("orders", "billing", "json", deliveries, KEYS, {"X-Team": "pay"})
    body = orjson.loads(request.body)
    conforms("PushBatch", body)
    headers_conform("pushBatch", request.headers)
    assert body["messages"] == [
        orjson.loads(orjson.dumps({"type": "message", "topic": "orders", **entry_document(d.entry),
                                   "delivery_count": d.delivery_count})) for d in deliveries]
    assert body["subscription"] == {"topic": "orders", "group": "billing"}
    assert request.headers["X-Team"] == "pay"
    assert request.headers["webhook-id"] == "orders:3:1795418703164-0+2"
    verify_webhook(SECRET, request.headers, request.body)


def test_a_retry_keeps_the_webhook_id_whatever_its_delivery_count() -> None:
    first = message_id("orders", [Delivery(JSON_ENTRY, 1)])
    assert first == message_id("orders", [Delivery(JSON_ENTRY, 4)]) == "orders:3:1795418703164-0"


def test_an_event_keeps_its_own_attributes_in_binary_mode() -> None:
    request = build_request("orders", "billing", "cloudevents", [Delivery(EVENT_ENTRY, 2)], KEYS,
                            {})
    headers = request.headers
    headers_conform("pushEvent", headers)
    assert request.body == b"<order/>"
    assert headers["Content-Type"] == "application/xml"
    assert (headers["ce-id"], headers["ce-source"], headers["ce-type"]) == (
        "evt-1", "/shop", "order.placed")
    assert headers["ce-sgdeliverycount"] == "2"
    assert headers["ce-partitionkey"] == "bob"
    verify_webhook([new_secret(), SECRET], headers, request.body)


def test_a_plain_message_becomes_an_event_of_its_own_in_binary_mode() -> None:
    request = build_request("orders", "billing", "cloudevents", [Delivery(JSON_ENTRY, 1)], KEYS,
                            {})
    headers = request.headers
    headers_conform("pushEvent", headers)
    assert request.body == b'{"total":42}'
    assert headers["Content-Type"] == "application/json"
    assert headers["ce-id"] == JSON_ENTRY.offset
    assert headers["ce-type"] == "streamgate.message"
    assert headers["ce-sgoffset"] == JSON_ENTRY.offset


def test_two_live_secrets_give_two_signatures_each_verifying() -> None:
    other = new_secret()
    request = build_request("orders", "g", "json", [Delivery(JSON_ENTRY, 1)],
                            [secret_key(other), *KEYS], {})
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    verify_webhook(other, request.headers, request.body)
    verify_webhook(SECRET, request.headers, request.body)


@pytest.mark.parametrize(("value", "sent"), [
    ("a\r\nX-Injected: 1", "a%0D%0AX-Injected:%201"), ("nul\x00", "nul%00"),
    ('caf\u00e9 "50%"', "caf%C3%A9%20%2250%25%22"), ("plain/ascii-{ok}", "plain/ascii-{ok}")])
def test_attributes_are_percent_encoded_as_the_http_binding_says(value: str, sent: str) -> None:
    entry = StoredEntry(0, "1-0", b"1", ValueFormat.JSON, None, {"ce-subject": value}, 1)
    request = build_request("orders", "g", "cloudevents", [Delivery(entry, 1)], KEYS, {})
    assert request.headers["ce-subject"] == sent
    assert unquote(sent) == value


def test_a_header_value_with_a_line_break_is_refused_before_sending() -> None:
    with pytest.raises(ValueError, match="control character"):
        build_request("orders", "g", "json", [Delivery(JSON_ENTRY, 1)], KEYS,
                      {"X-Team": "a\r\nX-Injected: 1"})
