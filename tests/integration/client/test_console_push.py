"""The console's push subscriptions page in Debian's headless Chromium against a gateway process
allowed to push to loopback: one created with its secret shown once, a message published from the
topic page reaching a local endpoint signed with that secret, its health, a rotation, a delete."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from served import serve_gateway
from test_console_browser import WAIT_MS, call, console_page, expect_heading, publish_in_form, timed

from streamgate_client import WebhookVerificationError, verify_webhook
from streamgate_devstack.ports import free_port

if TYPE_CHECKING:
    from playwright.sync_api import Page

__all__ = ["console_page"]  # the fixture this module's tests use
pytestmark = pytest.mark.integration
GROUP = "hooks"


class Endpoint:
    """A local push endpoint: verifies each request against the secrets the test gives it and
    keeps the messages of those it accepts (204); without secrets yet it asks for a retry."""

    def __init__(self) -> None:
        self.secrets: list[str] = []
        self.accepted: list[dict[str, Any]] = []
        self.refused = 0
        self.lock = threading.Lock()

    def answer(self, headers: dict[str, str], body: bytes) -> int:
        with self.lock:
            if not self.secrets:
                return 503
            try:
                verify_webhook(self.secrets, headers, body)
            except WebhookVerificationError:
                self.refused += 1
                return 401
            self.accepted += orjson.loads(body)["messages"]
            return 204

    def values(self) -> list[Any]:
        with self.lock:
            return [m.get("value") for m in self.accepted]


@pytest.fixture
def endpoint() -> Iterator[tuple[str, Endpoint]]:
    """The endpoint's URL and state, served from a thread for the test's length."""
    state = Endpoint()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(state.answer(dict(self.headers.items()), body))
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def push_gateway(redis_cluster: Any, etcd_server: Any) -> Iterator[str]:
    """A gateway process that may push to loopback over plain http."""
    yield from serve_gateway(redis_cluster, etcd_server, {
        "STREAMGATE_PUSH_ALLOWED_CIDRS": "127.0.0.0/8", "STREAMGATE_PUSH_ALLOW_HTTP": "true",
        "STREAMGATE_LAG_INTERVAL_S": "0.5"})


def values_reaching(endpoint: Endpoint, value: Any) -> list[Any]:
    """The endpoint's accepted values once ``value`` is among them (or the deadline passed)."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while value not in (values := endpoint.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return values


def shown_secret(page: Page, group: str) -> str:
    """The secret the page shows once, after checking it says so."""
    from playwright.sync_api import expect
    heading = page.get_by_role("heading", name=f"Signing secret of group {group}")
    expect(heading).to_be_focused(timeout=WAIT_MS)
    expect(page.get_by_text("Copy it now: it is shown only this once.")).to_be_visible()
    secret = page.get_by_role("textbox", name="Signing secret").input_value()
    assert secret.startswith("whsec_"), secret
    return secret


@pytest.mark.timeout(300)
def test_a_push_subscription_made_in_the_console_delivers_signed_and_is_rotated_and_deleted(
        push_gateway: str, endpoint: tuple[str, Endpoint], console_page: Page) -> None:
    from playwright.sync_api import expect
    base, page = push_gateway, console_page
    url, receiver = endpoint
    topic = f"push-{uuid.uuid4().hex[:8]}"
    assert call(base, "POST", "/v1/topics", {"name": topic, "partitions": 1})[0] == 201
    push_page = f"{base}/console/#/topics/{topic}/push"
    health = page.get_by_role("table", name=f"Endpoint health of group {GROUP}")
    try:
        page.goto(f"{base}/console/#/topics/{topic}")
        page.get_by_role("link", name="Push subscriptions of this topic").click()
        expect_heading(page, f"Push subscriptions of {topic}")
        expect(page.get_by_text("No push subscriptions yet.")).to_be_visible(timeout=WAIT_MS)

        with timed("create a push subscription: its secret shown once"):
            page.get_by_label("Group", exact=True).fill(GROUP)
            page.get_by_label("Endpoint", exact=True).fill(url)
            page.get_by_label("Batch size").fill("10")
            page.get_by_role("button", name="Create push subscription").click()
            receiver.secrets = [shown_secret(page, GROUP)]
            listed = page.get_by_role("table", name=f"Push subscriptions of {topic}")
            expect(listed).to_contain_text(url, timeout=WAIT_MS)
            expect(listed.get_by_role("link", name=GROUP)).to_have_attribute(
                "href", f"#/groups/{GROUP}/{topic}")
            stored = call(base, "GET", f"/v1/topics/{topic}/push/{GROUP}")[1]
            assert (stored["batch_max_messages"], stored["key_ordered"]) == (10, True)
            # the partition's owner posts the member's health once it is attached
            expect(health.get_by_role("cell", name="closed")).to_be_visible(timeout=WAIT_MS)

        with timed("publish from the topic page: the endpoint gets it signed, health healthy"):
            page.goto(f"{base}/console/#/topics/{topic}")
            expect_heading(page, f"Topic {topic}")
            publish_in_form(page, "k1", '{"pushed": 1}', "")
            assert values_reaching(receiver, {"pushed": 1}) == [{"pushed": 1}]
            assert receiver.refused == 0
            page.goto(push_page)
            expect(page.get_by_role("table", name=f"Push subscriptions of {topic}")
                   ).to_contain_text("healthy", timeout=WAIT_MS)
            expect(health.get_by_role("cell", name="204")).to_be_visible(timeout=WAIT_MS)

        with timed("rotate the secret: the new one shown once, both live"):
            page.get_by_role("button", name=f"Rotate the signing secret of group {GROUP}").click()
            rotated = shown_secret(page, GROUP)
            assert rotated != receiver.secrets[0]
            expect(page.get_by_text("The previous secret also signs until")).to_be_visible()
            assert len(call(base, "GET", f"/v1/topics/{topic}/push/{GROUP}")[1]["secrets"]) == 2
            receiver.secrets = [rotated]
            call(base, "POST", f"/v1/topics/{topic}/messages",
                 {"acks": "all", "messages": [{"key": "k1", "value": {"pushed": 2}}]})
            assert values_reaching(receiver, {"pushed": 2})[-1] == {"pushed": 2}
            page.get_by_role("button", name="Done, hide it").click()
            expect(page.get_by_role("textbox", name="Signing secret")).to_have_count(0)

        with timed("delete after a confirm, Cancel focused"):
            page.get_by_role("button", name=f"Delete the push subscription of group {GROUP}"
                             ).click()
            panel = page.get_by_role("dialog",
                                     name=f"Delete the push subscription of group {GROUP}?")
            expect(panel.get_by_role("button", name="Cancel")).to_be_focused(timeout=WAIT_MS)
            expect(panel).to_contain_text(f"{url} gets no more requests")
            assert call(base, "GET", f"/v1/topics/{topic}/push/{GROUP}")[0] == 200
            panel.get_by_role("button", name="Delete push subscription").click()
            expect(page.get_by_text(f"Deleted the push subscription of group {GROUP}.")
                   ).to_be_visible(timeout=WAIT_MS)
            expect(page.get_by_text("No push subscriptions yet.")).to_be_visible()
            assert call(base, "GET", f"/v1/topics/{topic}/push/{GROUP}")[0] == 404
    finally:
        call(base, "DELETE", f"/v1/topics/{topic}")
