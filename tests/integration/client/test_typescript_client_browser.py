"""The TypeScript client (client/typescript) in a real headless Chromium, driven by Playwright,
against a gateway process: the browser's own fetch and WebSocket, publish to subscribe."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest
from chromium import browser_page, open_page, page_files, require_browser, run_scenario, watch_page
from node_package import built_package, require_node
from page_server import serve_page

COUNT = 30
PARTITIONS = 3
OFFSET = re.compile(r"^\d+-\d+$")


def delete_topic(gateway: str, topic: str) -> None:
    request = urllib.request.Request(f"{gateway}/v1/topics/{topic}", method="DELETE")
    try:
        urllib.request.urlopen(request, timeout=10).close()
    except urllib.error.HTTPError as error:
        if error.code != 404:  # never created: the test failed before that
            raise


@pytest.mark.timeout(300)
def test_typescript_client_works_in_headless_chromium(
        served_gateway: str, report_missing: Callable[[str], NoReturn], tmp_path: Path) -> None:
    chromium = require_browser(report_missing)
    require_node(report_missing)
    topic, group = f"browser-{uuid.uuid4().hex[:10]}", f"g-{uuid.uuid4().hex[:8]}"
    log: list[str] = []
    timings: dict[str, float] = {}
    screenshot = tmp_path / "typescript-client-chromium.png"

    # The gateway sends no CORS headers: a page on an origin of its own could not read its answers,
    # so the page's server passes the gateway's paths on to it (one origin, as behind an ingress).
    with built_package(report_missing), serve_page(served_gateway, page_files()) as origin, \
            browser_page(chromium, tmp_path / "profile") as page:
        watch_page(page, log)

        def scenario(name: str, *args: Any) -> Any:
            started = time.monotonic()
            try:
                return run_scenario(page, log, name, *args)
            finally:
                timings[name] = time.monotonic() - started

        try:
            open_page(page, f"{origin}/index.html", log)
            scenario("createTopic", topic, PARTITIONS)
            published = scenario("publish", topic, COUNT)
            broadcast = scenario("broadcast", topic, COUNT)
            grouped = scenario("group", topic, group, COUNT)
            refused = scenario("publishToUnknownTopic", f"no-such-{topic}")
        finally:
            try:
                page.screenshot(path=screenshot, full_page=True)
                print(f"screenshot: {screenshot}")
            except Exception as error:  # a crashed page: the failure being raised says more
                print(f"no screenshot: {error}")
            delete_topic(served_gateway, topic)
    print("timings (s): " + ", ".join(f"{name} {s:.2f}" for name, s in timings.items()))

    # publish (sent in one tick): offsets in send order per partition; a key keeps its partition
    assert [r["n"] for r in published] == list(range(COUNT))
    assert all(OFFSET.match(r["offset"]) and r["duplicate"] is False for r in published)
    assert {r["partition"] for r in published} <= set(range(PARTITIONS))
    for n in range(5, COUNT):
        assert published[n]["partition"] == published[n % 5]["partition"]
    by_partition: dict[int, list[str]] = {}
    for result in published:
        by_partition.setdefault(result["partition"], []).append(result["offset"])
    for offsets in by_partition.values():
        assert offsets == sorted(offsets, key=lambda o: tuple(map(int, o.split("-"))))
    n_at = {(r["partition"], r["offset"]): r["n"] for r in published}

    # broadcast from earliest: every message, each partition in publish order, as it was sent
    for partition, offsets in by_partition.items():
        assert [m["offset"] for m in broadcast if m["partition"] == partition] == offsets
    assert len(broadcast) == COUNT
    for message in broadcast:
        n = n_at[(message["partition"], message["offset"])]
        assert message["value"] == {"n": n}
        assert message["key"] == f"k{n % 5}"
        assert message["headers"] == {"source": "chromium"}

    # a group: every message exactly once, all acked, nothing more to come
    delivered = [(m["partition"], m["offset"]) for m in grouped["messages"]]
    assert sorted(delivered) == sorted(n_at)
    assert all(m["deliveryCount"] == 1 for m in grouped["messages"])
    assert grouped["more"] is None
    assert sorted(grouped["assignment"]) == list(range(PARTITIONS))
    assert len(grouped["partitions"]) == PARTITIONS
    assert all(p["pending"] == 0 and p["lag"] == 0 for p in grouped["partitions"])

    # a 4xx rejects with a typed ProblemError carrying the problem document's fields
    assert refused["rejected"], refused
    assert refused["isProblemError"], refused
    assert refused["status"] == 404
    assert refused["type"] == "https://streamgate.dev/problems/topic-not-found"
    assert refused["retriable"] is False
    assert screenshot.stat().st_size > 0
