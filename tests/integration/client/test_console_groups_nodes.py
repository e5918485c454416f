"""The console's groups and nodes pages in Debian's headless Chromium against a gateway process on
the real cluster: lag and a stall verdict in the groups list, pause and resume, a seek previewed
then confirmed, the nodes and their health; and the console's files revalidated by ETag."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from email.message import Message
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest
from node_package import build_console, require_node
from served import serve_gateway
from test_console_browser import (
    TIMINGS,
    WAIT_MS,
    artifacts,
    call,
    console_page,
    expect_heading,
    timed,
)

if TYPE_CHECKING:
    from playwright.sync_api import Page

__all__ = ["artifacts", "console_page"]  # fixtures this module's tests use
NODE = f"console-gw-{uuid.uuid4().hex[:6]}"
ACK_TIMEOUT_MS = 1000
SCENARIOS: list[str] = []


@pytest.fixture(scope="module")
def judging_gateway(redis_cluster: Any, etcd_server: Any) -> Iterator[str]:
    """A gateway whose partition owners judge groups every 0.2 s, named ``NODE``."""
    yield from serve_gateway(redis_cluster, etcd_server, {
        "STREAMGATE_NODE_ID": NODE, "STREAMGATE_LAG_INTERVAL_S": "0.2"})


@pytest.fixture(scope="module", autouse=True)
def print_timings() -> Iterator[None]:
    yield
    print("console scenario timings (s): "
          + ", ".join(f"{name} {TIMINGS[name]:.1f}" for name in SCENARIOS if name in TIMINGS))


def scenario(name: str) -> Any:
    SCENARIOS.append(name)
    return timed(name)


@pytest.fixture
def held_group(judging_gateway: str) -> Iterator[tuple[str, str]]:
    """A topic of one partition with five messages and group ``g`` that pulled one, which it
    never acks: it waits, four unread and one pending, with no progress (stalled)."""
    base, topic = judging_gateway, f"groups-{uuid.uuid4().hex[:8]}"
    assert call(base, "POST", "/v1/topics", {"name": topic, "partitions": 1})[0] == 201
    try:
        assert call(base, "POST", f"/v1/topics/{topic}/messages", {"acks": "all", "messages": [
            {"key": f"k{n}", "value": n} for n in range(5)]})[0] == 200
        status, pulled = call(base, "POST", "/v1/groups/g/pull", {
            "topic": topic, "max_messages": 1, "ack_timeout_ms": ACK_TIMEOUT_MS,
            "max_deliveries": 100})
        assert status == 200, pulled
        assert len(pulled["messages"]) == 1, pulled
        yield base, topic
    finally:
        call(base, "DELETE", f"/v1/topics/{topic}")


def described(base: str, topic: str) -> dict[str, Any]:
    status, answer = call(base, "GET", f"/v1/groups/g?topic={topic}")
    assert status == 200, answer
    return dict(answer["topics"][0])


@pytest.mark.timeout(300)
def test_groups_list_shows_lag_and_a_stalled_verdict(
        held_group: tuple[str, str], console_page: Page, artifacts: Path) -> None:
    from playwright.sync_api import expect
    (base, topic), page = held_group, console_page
    with scenario("groups list: lag and a stalled verdict"):
        page.goto(f"{base}/console/#/groups")
        expect_heading(page, "Consumer groups")
        row = page.get_by_role("table", name="Consumer groups you may see").get_by_role(
            "row").filter(has=page.get_by_role("link", name=topic, exact=True))
        expect(row.get_by_role("cell").nth(1)).to_have_text("4", timeout=WAIT_MS)
        expect(row).to_contain_text("stalled", timeout=WAIT_MS)
        page.screenshot(path=artifacts / "groups.png", full_page=True)
        reason = described(base, topic)["partitions"][0]["verdict"]["reason"]
        expect(row).to_contain_text(f"stalled: {reason}")
    with scenario("group page: the verdict per partition"):
        row.get_by_role("link", name="g", exact=True).click()
        expect_heading(page, f"Group g on {topic}")
        partitions = page.get_by_role("table", name="Position and verdict per partition")
        expect(partitions).to_contain_text("stalled", timeout=WAIT_MS)
        verdict = described(base, topic)["partitions"][0]["verdict"]
        expect(partitions).to_contain_text(verdict["detail"].split(" ")[0])
        page.screenshot(path=artifacts / "group-verdicts.png", full_page=True)


@pytest.mark.timeout(300)
def test_pause_then_resume_from_the_group_page(
        held_group: tuple[str, str], console_page: Page) -> None:
    from playwright.sync_api import expect
    (base, topic), page = held_group, console_page
    with scenario("pause for five minutes, pause until resumed, resume"):
        page.goto(f"{base}/console/#/groups/g/{topic}")
        expect_heading(page, f"Group g on {topic}")
        state = page.locator("#pause ~ p.total")
        expect(state).to_have_text("Delivering (not paused).", timeout=WAIT_MS)
        page.get_by_label("Pause for (minutes)").fill("5")
        asked = time.time() * 1000
        page.get_by_role("button", name="Pause", exact=True).click()
        expect(state).to_contain_text("Paused until", timeout=WAIT_MS)
        paused = described(base, topic)
        assert paused["paused"] is True
        assert asked + 4 * 60_000 < paused["until_ms"] < asked + 6 * 60_000
        page.get_by_label("Pause for (minutes)").fill("")
        page.get_by_role("button", name="Pause", exact=True).click()
        expect(state).to_have_text("Paused until resumed.", timeout=WAIT_MS)
        assert (described(base, topic)["paused"], described(base, topic)["until_ms"]) == (
            True, None)
        page.get_by_role("button", name="Resume", exact=True).focus()
        page.keyboard.press("Enter")
        expect(state).to_have_text("Delivering (not paused).", timeout=WAIT_MS)
        assert described(base, topic)["paused"] is False


@pytest.mark.timeout(300)
def test_seek_shows_its_dry_run_before_the_confirm(
        held_group: tuple[str, str], console_page: Page, artifacts: Path) -> None:
    from playwright.sync_api import expect
    (base, topic), page = held_group, console_page
    status, preview = call(base, "POST", "/v1/groups/g/seek?dry_run=true",
                           {"topic": topic, "to": "latest"})
    assert status == 200, preview
    assert preview["partitions"][0]["skipped"] == 4, preview
    with scenario("seek: the dry run, cancelled, then confirmed"):
        page.goto(f"{base}/console/#/groups/g/{topic}")
        expect_heading(page, f"Group g on {topic}")
        page.get_by_label("Move the group to").select_option("latest")
        page.get_by_role("button", name="Preview the seek").click()
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("Skipped: 4 · delivered again: 0", timeout=WAIT_MS)
        impact = dialog.get_by_role("table", name="What the seek would do per partition")
        expect(impact.get_by_role("row").nth(1).get_by_role("cell")).to_have_text(
            [preview["partitions"][0]["from"], preview["partitions"][0]["to"], "4", "0", "1"])
        page.screenshot(path=artifacts / "seek-preview.png", full_page=True)
        expect(dialog.get_by_role("button", name="Cancel")).to_be_focused()
        page.keyboard.press("Escape")
        expect(dialog).to_be_hidden()
        assert described(base, topic)["partitions"][0]["lag"] == 4
        page.get_by_role("button", name="Preview the seek").click()
        page.get_by_role("dialog").get_by_role("button", name="Seek", exact=True).click()
        expect(page.locator("#seek ~ form [role=status]")).to_contain_text(
            "Moved", timeout=WAIT_MS)
        partition = described(base, topic)["partitions"][0]
        assert (partition["lag"], partition["pending"]) == (0, 1)
        expect(page.get_by_text("Total lag: 0 messages")).to_be_visible(timeout=WAIT_MS)


@pytest.mark.timeout(300)
def test_nodes_page_lists_this_gateway_its_health_and_partition_owners(
        judging_gateway: str, console_page: Page, artifacts: Path) -> None:
    from playwright.sync_api import expect
    base, topic, page = judging_gateway, f"nodes-{uuid.uuid4().hex[:8]}", console_page
    assert call(base, "POST", "/v1/topics", {"name": topic, "partitions": 2})[0] == 201
    try:
        with scenario("nodes: this gateway, its backends and the owners"):
            cluster = call(base, "GET", "/v1/cluster")[1]
            me = next(node for node in cluster["nodes"] if node["node_id"] == NODE)
            assert me["address"], cluster
            page.goto(f"{base}/console/")
            expect_heading(page, "Topics")
            page.get_by_role("link", name="Nodes", exact=True).click()
            expect_heading(page, "Nodes")
            gateways = page.get_by_role("table", name="Live gateway nodes")
            mine = gateways.get_by_role("row").filter(has_text=f"{NODE} (this gateway)")
            expect(mine).to_contain_text(me["address"], timeout=WAIT_MS)
            expect(mine).to_contain_text(cluster["version"])
            checks = page.get_by_role("table", name="Backend checks of the gateway that answered")
            for backend in ("redis", "etcd"):
                expect(checks.get_by_role("row").filter(has_text=backend)).to_contain_text("ok")
            owners = page.get_by_role("table", name="Owner of each partition, per topic")
            row = owners.get_by_role("row").filter(
                has=page.get_by_role("link", name=topic, exact=True))
            expect(row).to_contain_text(f"{NODE}: 0, 1", timeout=WAIT_MS)
            expect(row.get_by_role("cell").last).to_have_text("none")
            page.screenshot(path=artifacts / "nodes.png", full_page=True)
    finally:
        call(base, "DELETE", f"/v1/topics/{topic}")


def fetched(url: str, headers: dict[str, str]) -> tuple[int, Message, bytes]:
    """The status, headers (looked up in any case) and body of a GET."""
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


@pytest.mark.timeout(240)
def test_console_files_fetched_again_with_their_etag_answer_304(
        judging_gateway: str, report_missing: Callable[[str], NoReturn]) -> None:
    require_node(report_missing)
    build_console(report_missing)
    with scenario("console files revalidated by ETag"):
        for path in ("/console/", "/console/js/console/main.js", "/console/console.css"):
            status, headers, body = fetched(f"{judging_gateway}{path}", {})
            assert status == 200, path
            assert body, path
            assert headers["Cache-Control"] == "no-cache"
            again = fetched(f"{judging_gateway}{path}", {"If-None-Match": headers["ETag"]})
            assert (again[0], again[1]["ETag"], again[2]) == (304, headers["ETag"], b""), path
