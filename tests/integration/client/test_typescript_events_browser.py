"""client.events() in a real headless Chromium: the browser's own EventSource, opened with a minted
event token, while Python publishes; a stream dropped from the server's side resumes with no gap
and no duplicate, by the browser's own reconnect or, once the token expired, by a new token."""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import orjson
import pytest
from chromium import browser_page, open_page, page_files, require_browser, run_scenario, watch_page
from node_package import built_package, require_node
from page_server import serve_page
from served import serve_gateway

from gateway.auth.keys import hash_api_key, new_api_key

PARTITIONS = 3
PER_PARTITION = 4

KEYED_AUTH = '''
[[api_keys]]
principal = "browser-user"
sha256 = "{key}"

[[rules]]
principals = ["browser-user"]
topics = ["*"]
actions = ["publish", "subscribe", "admin"]
'''


@pytest.fixture
def keyed_gateway(redis_cluster: Any, etcd_server: Any, tmp_path: Path
                  ) -> Iterator[tuple[str, str]]:
    """A gateway that requires credentials, and an API key that may do everything."""
    key = new_api_key()
    (tmp_path / "auth.toml").write_text(KEYED_AUTH.format(key=hash_api_key(key)))
    for url in serve_gateway(redis_cluster, etcd_server, {
            "STREAMGATE_AUTH_MODE": "required",
            "STREAMGATE_AUTH_CONFIG_PATH": str(tmp_path / "auth.toml")}):
        yield url, key


def call(gateway: str, method: str, path: str, body: Any, api_key: str | None) -> Any:
    headers = {"Content-Type": "application/json"}
    if api_key is not None:
        headers["Authorization"] = f"ApiKey {api_key}"
    request = urllib.request.Request(f"{gateway}{path}", data=orjson.dumps(body), method=method,
                                     headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return orjson.loads(response.read() or b"null")


def publish_round(gateway: str, topic: str, first: int, api_key: str | None,
                  end: bool = False) -> list[tuple[int, str]]:
    """``PER_PARTITION`` messages to each partition (then an end marker to each, when ``end``):
    their (partition, offset) in publish order."""
    messages: list[dict[str, Any]] = [
        {"partition": n % PARTITIONS, "value": {"n": first + n}}
        for n in range(PER_PARTITION * PARTITIONS)]
    if end:
        messages += [{"partition": p, "value": {"end": True}} for p in range(PARTITIONS)]
    answer = call(gateway, "POST", f"/v1/topics/{topic}/messages",
                  {"acks": "all", "messages": messages}, api_key)
    return [(r["partition"], r["offset"]) for r in answer["results"]]


def by_partition(pairs: list[tuple[int, str]]) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for partition, offset in pairs:
        found.setdefault(partition, []).append(offset)
    return found


def stream_across_a_cut(gateway: str, api_key: str | None, token_ttl_s: int,
                        after_expiry: bool, report_missing: Callable[[str], NoReturn],
                        tmp_path: Path) -> dict[str, Any]:
    """Open a stream in the page, publish, cut it server-side, publish more: what the page
    received, what was published, the stream's counters and every URL the page requested."""
    chromium = require_browser(report_missing)
    require_node(report_missing)
    topic = f"sse-browser-{uuid.uuid4().hex[:10]}"
    call(gateway, "POST", "/v1/topics", {"name": topic, "partitions": PARTITIONS}, api_key)
    log: list[str] = []
    requests: list[tuple[str, dict[str, str]]] = []
    with built_package(report_missing), serve_page(gateway, page_files()) as origin, \
            browser_page(chromium, tmp_path / "profile") as page:
        watch_page(page, log)
        page.on("request", lambda request: requests.append((request.url, request.headers)))
        try:
            open_page(page, f"{origin}/index.html", log)
            run_scenario(page, log, "openStream", topic, api_key, token_ttl_s)
            published = publish_round(gateway, topic, 0, api_key)
            run_scenario(page, log, "waitForMessages", len(published))
            assert run_scenario(page, log, "cutStream", after_expiry) == 1
            published += publish_round(gateway, topic, len(published), api_key, end=True)
            received = run_scenario(page, log, "takeUntilEnds", PARTITIONS)
            counters = run_scenario(page, log, "closeStream")
            page.screenshot(path=tmp_path / "events-chromium.png", full_page=True)
        finally:
            call(gateway, "DELETE", f"/v1/topics/{topic}", None, api_key)
    return {"published": published, "received": received, "counters": counters,
            "requests": requests, "origin": origin}


def assert_resumed_exactly(outcome: dict[str, Any], tokens_minted: int) -> None:
    """Every message published, each once, in publish order per partition, over two streams
    (the second opened with ``tokens_minted`` tokens in all)."""
    received = [(m["partition"], m["offset"]) for m in outcome["received"]]
    assert by_partition(received) == by_partition(outcome["published"])
    assert len(received) == len(outcome["published"])
    assert outcome["counters"]["connections"] == 2
    assert outcome["counters"]["tokensMinted"] == tokens_minted


@pytest.mark.timeout(300)
def test_a_browser_stream_resumes_with_a_new_token_after_its_token_expired(
        served_gateway: str, report_missing: Callable[[str], NoReturn], tmp_path: Path) -> None:
    outcome = stream_across_a_cut(served_gateway, None, 2, True, report_missing, tmp_path)
    # the browser's own reconnect met the expired token (401): the client minted a second one
    # and opened a new EventSource after the last event id
    assert_resumed_exactly(outcome, tokens_minted=2)
    streams = [url for url, _ in outcome["requests"] if "/events?" in url]
    assert any("last_event_id=" in url for url in streams), streams


@pytest.mark.timeout(300)
def test_a_keyed_browser_stream_never_puts_the_key_in_a_url_and_resumes_by_itself(
        keyed_gateway: tuple[str, str], report_missing: Callable[[str], NoReturn],
        tmp_path: Path) -> None:
    gateway, key = keyed_gateway
    outcome = stream_across_a_cut(gateway, key, 60, False, report_missing, tmp_path)
    # the token was still good: the browser reconnected with Last-Event-ID on its own
    assert_resumed_exactly(outcome, tokens_minted=1)
    requests = outcome["requests"]
    assert all(key not in url for url, _ in requests)
    streams = [(url, headers) for url, headers in requests if "/events?" in url]
    assert len(streams) >= 2
    assert all("access_token=sget1." in url and "authorization" not in headers
               for url, headers in streams)
    mints = [headers for url, headers in requests if url.endswith("/events/token")]
    assert [headers.get("authorization") for headers in mints] == [f"ApiKey {key}"]
