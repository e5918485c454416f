"""The web console (/console/) in Debian's headless Chromium, driven by Playwright against a gateway
process on the real cluster: a newcomer's round, keyboard only, a key_shared group's parked keys,
and a principal's ACLs.

Screenshots go to ``$STREAMGATE_ARTIFACTS`` (else the test's tmp dir); with
``STREAMGATE_UPDATE_SCREENSHOT=1`` the topic page is also saved as docs/console.png.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest
from chromium import browser_page, reload_when_the_network_changed, require_browser
from key_shared_member import key_shared_member
from node_package import build_console, require_node
from served import serve_gateway

from gateway.auth.keys import hash_api_key

if TYPE_CHECKING:
    from playwright.sync_api import Page

WAIT_MS = 30_000
DOCS_SCREENSHOT = Path(__file__).resolve().parents[3] / "docs" / "console.png"
TIMINGS: dict[str, float] = {}


def call(base: str, method: str, path: str, body: Any = None,
         api_key: str | None = None) -> tuple[int, Any]:
    headers = {"content-type": "application/json"} | ({"X-API-Key": api_key} if api_key else {})
    request = urllib.request.Request(f"{base}{path}", method=method, headers=headers,
                                     data=None if body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("STREAMGATE_ARTIFACTS") or tmp_path) / "console"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def console_page(report_missing: Callable[[str], NoReturn], tmp_path: Path) -> Iterator[Page]:
    """A page of a headless Chromium, after building the console; every console error (a CSP
    violation is one, a missing file another) and page error fails the test. API answers of 4xx,
    which the browser also logs, are the console's to show, not failures."""
    chromium = require_browser(report_missing)
    require_node(report_missing)
    build_console(report_missing)
    problems: list[str] = []
    with browser_page(chromium, tmp_path / "profile") as page:
        page.set_viewport_size({"width": 1280, "height": 900})
        page.on("console", lambda m: problems.append(f"{m.text} ({m.location.get('url')})")
                if m.type == "error" and "/v1/" not in m.location.get("url", "") else None)
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        reload_when_the_network_changed(page, problems)
        yield page
    assert problems == [], problems


@contextmanager
def timed(name: str) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        TIMINGS[name] = time.monotonic() - started
        print(f"scenario {name}: {TIMINGS[name]:.1f} s")


def expect_heading(page: Page, name: str) -> None:
    from playwright.sync_api import expect
    expect(page.get_by_role("heading", name=name, exact=True)).to_be_visible(timeout=WAIT_MS)


def published(page: Page) -> tuple[int, str]:
    """The partition and offset the publish form reported."""
    from playwright.sync_api import expect
    status = page.locator("#publish ~ form [role=status]")
    expect(status).to_contain_text("Published to partition", timeout=WAIT_MS)
    found = re.search(r"partition (\d+) at offset (\d+-\d+)", status.inner_text())
    assert found is not None
    return int(found.group(1)), found.group(2)


def publish_in_form(page: Page, key: str, value: str, headers: str) -> tuple[int, str]:
    page.locator("#publish ~ form [role=status]").evaluate("e => e.textContent = ''")
    page.get_by_label("Key", exact=True).fill(key)
    page.get_by_label("Value", exact=True).fill(value)
    page.get_by_label("Headers", exact=True).fill(headers)
    page.get_by_role("button", name="Publish", exact=True).click()
    return published(page)


def dead_letter(base: str, topic: str, value: str) -> None:
    """Publish ``value`` to a topic of two partitions and let a group give up on it (one
    delivery, never acked)."""
    assert call(base, "POST", f"/v1/topics/{topic}/messages",
                {"acks": "all", "messages": [{"key": "poison", "value": value}]})[0] == 200
    pull = {"topic": topic, "ack_timeout_ms": 200, "max_deliveries": 1, "wait_ms": 300}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        call(base, "POST", "/v1/groups/fails/pull", pull)
        if call(base, "GET", f"/v1/topics/{topic}.dlq")[0] == 200 and value in values_in(
                base, f"{topic}.dlq", 2):
            return
    raise AssertionError(f"{value!r} was not dead-lettered in 30 s")


def values_in(base: str, topic: str, partitions: int) -> list[Any]:
    found = []
    for partition in range(partitions):
        found += [m.get("value") for m in call(
            base, "GET", f"/v1/topics/{topic}/partitions/{partition}/messages?limit=1000")[1][
                "messages"]]
    return found


@pytest.mark.timeout(420)
def test_console_walkthrough_from_create_to_redrive(
        served_gateway: str, console_page: Page, artifacts: Path) -> None:
    from playwright.sync_api import expect
    base, topic = served_gateway, f"console-{uuid.uuid4().hex[:8]}"
    page = console_page
    try:
        with timed("open the console and create a topic"):
            response = page.goto(f"{base}/console/")
            assert response is not None
            assert "default-src 'none'" in response.headers["content-security-policy"]
            expect_heading(page, "Topics")
            page.get_by_label("Topic name").fill(topic)
            page.get_by_label("Partitions").fill("2")
            page.get_by_role("button", name="Create topic").click()
            expect_heading(page, f"Topic {topic}")
            expect(page.get_by_role("table", name=f"Partitions of {topic}")).to_be_visible()

        with timed("publish and see the message in the browser"):
            partition, offset = publish_in_form(page, "alice", '{"n": 1, "items": ["a", "b"]}',
                                                "tag=a")
            partitions = page.get_by_role("table", name=f"Partitions of {topic}")
            # the partition's range in Redis; this gateway has no archive tier
            expect(partitions).to_contain_text(f"1 ({offset} to {offset})", timeout=WAIT_MS)
            expect(partitions).to_contain_text("no archive tier")
            page.get_by_label("Browse partition").select_option(str(partition))
            page.get_by_role("button", name="Read messages").click()
            page.get_by_role("button", name=f"Show message {offset}").click()
            shown = page.get_by_label("Value as JSON")
            expect(shown).to_contain_text('"n": 1', timeout=WAIT_MS)
            expect(shown).to_contain_text('"items": [\n    "a",')
            status, answer = call(base, "POST", f"/v1/topics/{topic}/messages", {
                "messages": [{"value_b64": "AAEC/0hpIQ==", "partition": partition}]})
            assert status == 200, answer
            binary_offset = answer["results"][0]["offset"]
            page.get_by_role("button", name="Read messages").click()
            page.get_by_role("button", name=f"Show message {binary_offset}").click()
            expect(page.get_by_label("Value as base64")).to_have_text("AAEC/0hpIQ==")
            expect(page.get_by_label("Value as hex")).to_contain_text(
                "00 01 02 ff 48 69 21", timeout=WAIT_MS)
            expect(page.get_by_label("Value as hex")).to_contain_text("....Hi!")

        with timed("live tail with a header filter"):
            page.get_by_label("Tail filters").fill("tag=a")
            page.get_by_role("button", name="Start tail").click()
            tail = page.get_by_role("log", name="Tailed messages")
            expect(page.locator("#tail ~ form [role=status]")).to_contain_text(
                "Tail connected", timeout=WAIT_MS)
            # one key, so one partition: the filtered-out message comes first in the stream
            publish_in_form(page, "bob", '{"n": "filtered out"}', "tag=b")
            publish_in_form(page, "bob", '{"n": "tailed"}', "tag=a")
            expect(tail).to_contain_text('"tailed"', timeout=WAIT_MS)
            expect(tail).not_to_contain_text("filtered out")
            # paused, a message is dropped; the one after resuming shows, so the first was seen
            page.get_by_role("button", name="Pause").click()
            publish_in_form(page, "bob", '{"n": "while paused"}', "tag=a")
            page.get_by_role("button", name="Resume").click()
            publish_in_form(page, "bob", '{"n": "resumed"}', "tag=a")
            expect(tail).to_contain_text('"resumed"', timeout=WAIT_MS)
            expect(tail).not_to_contain_text("while paused")
            # the partitions table follows on its next poll: six messages in all
            page.wait_for_function("""() => [...document.getElementById('partitions')
                .parentElement.querySelectorAll('tbody tr')].reduce(
                (sum, row) => sum + Number(row.cells[1].textContent), 0) === 6""",
                                   timeout=WAIT_MS)
            page.screenshot(path=artifacts / "topic.png", full_page=True)
            if os.environ.get("STREAMGATE_UPDATE_SCREENSHOT") == "1":
                page.evaluate("window.scrollTo(0, 0)")
                page.screenshot(path=DOCS_SCREENSHOT, full_page=False)
            page.get_by_role("button", name="Clear").click()
            expect(tail.get_by_role("listitem")).to_have_count(0)
            page.get_by_role("button", name="Stop tail").click()
            expect(page.locator("#tail ~ form [role=status]")).to_contain_text("Tail stopped")

        with timed("the topic in the listing"):
            page.get_by_role("link", name="Topics", exact=True).click()
            expect_heading(page, "Topics")
            listed = page.get_by_role("table", name="Topics you may see").get_by_role(
                "row").filter(has=page.get_by_role("link", name=topic, exact=True))
            expect(listed).to_contain_text("14 d", timeout=WAIT_MS)
            page.screenshot(path=artifacts / "topics.png", full_page=True)

        with timed("a group's lag falls to 0"):
            call(base, "POST", f"/v1/topics/{topic}/messages",
                 {"acks": "all", "messages": [{"key": f"k{n}", "value": n} for n in range(20)]})
            first = call(base, "POST", "/v1/groups/readers/pull",
                         {"topic": topic, "max_messages": 1})[1]["messages"]
            page.get_by_role("link", name="Consumer groups").click()
            expect_heading(page, "Consumer groups")
            page.get_by_role("row").filter(has_text=topic).get_by_role(
                "link", name="readers").click()
            expect_heading(page, f"Group readers on {topic}")
            expect(page.get_by_text(re.compile(r"Total lag: [1-9]"))).to_be_visible(
                timeout=WAIT_MS)
            receipts = [m["receipt"] for m in first]
            while batch := call(base, "POST", "/v1/groups/readers/pull",
                                {"topic": topic, "max_messages": 100})[1]["messages"]:
                receipts += [m["receipt"] for m in batch]
            assert call(base, "POST", "/v1/groups/readers/ack", {"receipts": receipts})[0] == 200
            expect(page.get_by_text("Total lag: 0 messages")).to_be_visible(timeout=WAIT_MS)
            # the chart's text alternative names each series' newest sample
            expect(page.get_by_role("img", name=re.compile(
                r"^Lag per partition.*; now p0 0, p1 0$"))).to_be_visible(timeout=WAIT_MS)
            page.screenshot(path=artifacts / "group.png", full_page=True)

        with timed("inspect and redrive dead letters"):
            # the group that gives up starts after everything published so far
            assert call(base, "POST", "/v1/groups/fails/seek",
                        {"topic": topic, "to": "latest"})[0] == 200
            dead_letter(base, topic, "poison-1")
            dead_letter(base, topic, "poison-2")
            page.goto(f"{base}/console/#/topics/{topic}")
            page.get_by_role("link", name="Dead letters of this topic").click()
            expect_heading(page, f"Dead letters of {topic}")
            letters = page.get_by_role("table", name="2 dead letters")
            expect(letters).to_contain_text("fails", timeout=WAIT_MS)
            first_row = letters.get_by_role("row").filter(has_text="poison-1")
            first_row.get_by_role("button", name=re.compile("^Inspect letter")).click()
            expect(page.get_by_label("Value as JSON")).to_contain_text("poison-1")
            page.screenshot(path=artifacts / "dead-letters.png", full_page=True)
            first_row.get_by_role("button", name=re.compile("^Redrive letter")).click()
            expect(page.get_by_role("table", name="1 dead letters")).to_be_visible(
                timeout=WAIT_MS)
            page.get_by_role("button", name="Redrive all").click()
            question = page.get_by_role("dialog")
            expect(question).to_be_visible()
            expect(question).to_contain_text(f"1 of 1 dead letter would go back to {topic}")
            expect(question.get_by_role("button", name="Cancel")).to_be_focused()
            page.keyboard.press("Escape")
            expect(question).to_be_hidden()
            expect(page.get_by_role("table", name="1 dead letters")).to_be_visible()
            page.get_by_role("button", name="Redrive all").click()
            page.get_by_role("button", name="Confirm redrive").click()
            expect(page.get_by_text("No dead letters.")).to_be_visible(timeout=WAIT_MS)
            back = values_in(base, topic, 2)
            assert back.count("poison-1") == 2
            assert back.count("poison-2") == 2
    finally:
        call(base, "DELETE", f"/v1/topics/{topic}.dlq")
        call(base, "DELETE", f"/v1/topics/{topic}")
    print("timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in TIMINGS.items()))


HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'
RECORD_VIOLATIONS = """window.violations = [];
document.addEventListener('securitypolicyviolation',
    (e) => window.violations.push(`${e.violatedDirective} ${e.blockedURI}`));"""


@pytest.mark.timeout(300)
def test_console_pages_keep_csp_and_show_hostile_text(
        served_gateway: str, console_page: Page) -> None:
    from playwright.sync_api import expect
    base, topic = served_gateway, f"csp-{uuid.uuid4().hex[:8]}"
    page = console_page
    assert call(base, "POST", "/v1/topics", {"name": topic, "partitions": 1})[0] == 201
    try:
        assert call(base, "POST", f"/v1/topics/{topic}/messages", {"acks": "all", "messages": [
            {"key": HOSTILE, "value": HOSTILE, "headers": {"x": HOSTILE}}]})[0] == 200
        assert call(base, "POST", "/v1/groups/watchers/pull", {"topic": topic})[0] == 200
        responses: list[Any] = []
        page.on("response", lambda r: responses.append(r) if "/console" in r.url else None)
        page.add_init_script(RECORD_VIOLATIONS)
        with timed("every page under the CSP, hostile values as text"):
            for route, heading in [
                    ("#/topics", "Topics"), (f"#/topics/{topic}", f"Topic {topic}"),
                    ("#/groups", "Consumer groups"),
                    (f"#/groups/watchers/{topic}", f"Group watchers on {topic}"),
                    (f"#/topics/{topic}/dlq", f"Dead letters of {topic}"),
                    ("#/nowhere", "Not found")]:
                page.goto(f"{base}/console/{route}")
                expect_heading(page, heading)
                if route == f"#/topics/{topic}":
                    page.get_by_role("button", name="Read messages").click()
                    page.get_by_role("button", name=re.compile("^Show message")).click()
                    expect(page.get_by_label("Value as JSON")).to_have_text(json.dumps(HOSTILE))
                    expect(page.get_by_role("table", name="Messages")).to_contain_text(HOSTILE)
                    assert page.locator("main img, main script").count() == 0
                assert page.evaluate("window.violations") == [], route
                assert page.evaluate("window.pwned") is None, route
        assert {r.status for r in responses} <= {200, 301, 304, 308}, responses
        for response in (r for r in responses if r.status == 200):
            headers = response.headers
            assert "script-src 'self'" in headers["content-security-policy"], response.url
            assert "frame-ancestors 'none'" in headers["content-security-policy"], response.url
            assert headers["x-content-type-options"] == "nosniff", response.url
            assert headers["referrer-policy"] == "no-referrer", response.url
        assert {r.url.rsplit("/", 1)[-1] for r in responses} >= {
            "", "console.css", "main.js", "index.js", "chart.js"}
    finally:
        call(base, "DELETE", f"/v1/topics/{topic}")


@pytest.mark.timeout(300)
def test_admin_releases_and_dead_letters_parked_keys(
        served_gateway: str, console_page: Page, artifacts: Path) -> None:
    from playwright.sync_api import expect
    base, topic = served_gateway, f"parked-{uuid.uuid4().hex[:8]}"
    page = console_page
    assert call(base, "POST", "/v1/topics", {"name": topic, "partitions": 1})[0] == 201
    try:
        with key_shared_member(base, topic, "workers") as received, timed(
                "parked keys: one released, one sent to the dead letters"):
            assert call(base, "POST", f"/v1/topics/{topic}/messages", {"acks": "all", "messages": [
                {"key": "poison-a", "value": "a"}, {"key": "poison-b", "value": "b"},
                {"key": "fine", "value": "ok"}]})[0] == 200
            page.goto(f"{base}/console/#/groups/workers/{topic}")
            expect_heading(page, f"Group workers on {topic}")
            parked = page.get_by_role("table", name="2 parked keys")
            expect(parked).to_contain_text("poison-a", timeout=WAIT_MS)
            expect(parked).to_contain_text("poison-b")
            page.screenshot(path=artifacts / "parked-keys.png", full_page=True)
            status = page.locator("#parked ~ [role=status]")
            page.get_by_role("button", name="Release key poison-a of partition 0").focus()
            page.keyboard.press("Enter")
            expect(status).to_contain_text("Released key poison-a", timeout=WAIT_MS)
            # the member acks the message's second delivery: the key goes on, and its row with
            # the focused button; the focus lands on the result
            expect(page.get_by_role("table", name="1 parked keys")).not_to_contain_text(
                "poison-a", timeout=WAIT_MS)
            expect(status).to_be_focused()
            page.get_by_role("button", name="Dead-letter key poison-b of partition 0").click()
            expect(status).to_contain_text("to the dead letters", timeout=WAIT_MS)
            expect(page.get_by_text("No parked keys now.")).to_be_visible(timeout=WAIT_MS)
        assert [(m["key"], m["delivery_count"]) for m in received] == [
            ("poison-a", 1), ("poison-b", 1), ("fine", 1), ("poison-a", 2)]
        letters = call(base, "GET", f"/v1/topics/{topic}.dlq/partitions/0/messages")[1]
        assert [m["value"] for m in letters["messages"]] == ["b"]
    finally:
        call(base, "DELETE", f"/v1/topics/{topic}.dlq")
        call(base, "DELETE", f"/v1/topics/{topic}")


def tab_to(page: Page, name: str, limit: int = 80) -> None:
    """Press Tab until the focused control's accessible name (label, aria-label or text) is
    ``name``."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        focused = page.evaluate("""() => {
            const e = document.activeElement;
            return (e.labels && e.labels[0] ? e.labels[0].textContent
                    : e.getAttribute('aria-label') || e.textContent || '').trim();
        }""")
        if focused == name:
            return
    raise AssertionError(f"Tab never reached {name!r}")


@pytest.mark.timeout(300)
def test_the_console_works_with_the_keyboard_alone(
        served_gateway: str, console_page: Page, artifacts: Path) -> None:
    from playwright.sync_api import expect
    base, topic = served_gateway, f"keys-{uuid.uuid4().hex[:8]}"
    page = console_page
    try:
        with timed("keyboard: create a topic, publish, reach its dead letters"):
            page.goto(f"{base}/console/")
            expect_heading(page, "Topics")
            tab_to(page, "Skip to content", limit=1)
            page.keyboard.press("Enter")
            assert page.evaluate("document.activeElement.textContent") == "Topics"
            tab_to(page, "Topic name")
            page.keyboard.type(topic)
            page.keyboard.press("Enter")
            expect_heading(page, f"Topic {topic}")
            assert page.evaluate("document.activeElement.tagName") == "H1"
            tab_to(page, "Value")
            page.keyboard.press("Control+A")
            page.keyboard.type('{"typed": true}')
            tab_to(page, "Publish")
            page.keyboard.press("Enter")
            partition, _ = published(page)
            tab_to(page, "Dead letters of this topic")
            page.keyboard.press("Enter")
            expect_heading(page, f"Dead letters of {topic}")
            expect(page.get_by_text("No dead letters.")).to_be_visible(timeout=WAIT_MS)
        status, page_of = call(base, "GET",
                               f"/v1/topics/{topic}/partitions/{partition}/messages")
        assert status == 200
        assert [m["value"] for m in page_of["messages"]] == [{"typed": True}]
    finally:
        call(base, "DELETE", f"/v1/topics/{topic}")


@pytest.fixture
def secured_gateway(redis_cluster: Any, etcd_server: Any, tmp_path: Path
                    ) -> Iterator[tuple[str, str, str]]:
    """A gateway requiring credentials: the URL, an admin's key and a key that may only touch
    topics named ``a-*``."""
    admin_key, tenant_key = f"admin-{uuid.uuid4().hex}", f"tenant-{uuid.uuid4().hex}"
    config = tmp_path / "auth.toml"
    config.write_text(f'''
[[api_keys]]
principal = "ops"
sha256 = "{hash_api_key(admin_key)}"

[[api_keys]]
principal = "tenant-a"
sha256 = "{hash_api_key(tenant_key)}"

[[rules]]
principals = ["ops"]
topics = ["*"]
actions = ["publish", "subscribe", "admin"]

[[rules]]
principals = ["tenant-a"]
topics = ["a-*"]
actions = ["publish", "subscribe", "admin"]
''')
    for url in serve_gateway(redis_cluster, etcd_server, {
            "STREAMGATE_AUTH_MODE": "required", "STREAMGATE_AUTH_CONFIG_PATH": str(config)}):
        yield url, admin_key, tenant_key


@pytest.mark.timeout(300)
def test_a_principal_signs_in_and_sees_only_what_it_may(
        secured_gateway: tuple[str, str, str], console_page: Page,
        artifacts: Path) -> None:
    from playwright.sync_api import expect
    base, admin_key, tenant_key = secured_gateway
    mine, theirs = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    for name in (mine, theirs):
        assert call(base, "POST", "/v1/topics", {"name": name, "partitions": 1},
                    api_key=admin_key)[0] == 201
    page = console_page
    try:
        with timed("sign in, see only permitted topics"):
            page.goto(f"{base}/console/")
            expect_heading(page, "Sign in")
            page.get_by_label("Credential", exact=True).fill("not-a-key")
            page.get_by_role("button", name="Sign in").click()
            expect(page.get_by_role("alert")).to_contain_text("Sign-in failed", timeout=WAIT_MS)
            page.get_by_label("Credential", exact=True).fill(tenant_key)
            page.get_by_role("button", name="Sign in").click()
            expect_heading(page, "Topics")
            topics = page.get_by_role("table", name="Topics you may see")
            expect(topics.get_by_role("link", name=mine)).to_be_visible(timeout=WAIT_MS)
            expect(topics).not_to_contain_text(theirs)
            page.screenshot(path=artifacts / "signed-in.png", full_page=True)
            page.goto(f"{base}/console/#/topics/{theirs}")
            expect(page.get_by_text("Not permitted").first).to_be_visible(timeout=WAIT_MS)
            page.get_by_role("button", name="Sign out").click()
            expect_heading(page, "Sign in")
    finally:
        for name in (mine, theirs):
            call(base, "DELETE", f"/v1/topics/{name}", api_key=admin_key)
