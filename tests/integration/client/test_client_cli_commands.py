"""The CLI's reading, purging and bench commands (tail, replay, peek, dlq, purge, bench) as a user
runs them: subprocesses against a gateway process (conftest's ``served_gateway``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

from served import json_lines, streamgate

from streamgate_client import Admin, Consumer, Producer
from streamgate_client.cursors import offset_key


async def cli(base_url: str, *args: str) -> tuple[int, list[Any], str]:
    """Run ``streamgate args... --url base_url`` (off the loop): exit code, JSON lines, stderr."""
    done = await asyncio.to_thread(streamgate, *args, "--url", base_url)
    return done.returncode, json_lines(done.stdout), done.stderr


def run(test: Any) -> Any:
    """A sync test body: the gateway is another process, so the client needs its own loop."""
    return asyncio.run(test)


def test_tail_prints_what_is_published_after_it_starts_in_order(
        served_gateway: str, topic_name: str) -> None:
    tail = subprocess.Popen([sys.executable, "-m", "gateway.cli", "tail", topic_name,
                             "--max-messages", "3", "--timeout-s", "30", "--url", served_gateway],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    async def publish_until_tail_exits() -> list[str | None]:
        async with Admin(served_gateway) as admin, Producer(served_gateway, topic_name) as producer:
            await admin.create_topic(topic_name, 1)
            await producer.send_and_wait("before")
            sent = []
            while tail.poll() is None:
                sent.append((await producer.send_and_wait({"n": len(sent)})).offset)
                await asyncio.sleep(0.05)
            return sent

    try:
        sent = run(publish_until_tail_exits())
        out, err = tail.communicate(timeout=30)
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait()
    assert tail.returncode == 0, err
    lines = json_lines(out.decode())
    assert [m["value"]["n"] for m in lines] == sorted(m["value"]["n"] for m in lines)
    assert len(lines) == 3
    assert {m["offset"] for m in lines} <= set(sent)
    assert all(m["topic"] == topic_name for m in lines)


def test_replay_prints_from_an_offset_or_time_up_to_a_limit(
        served_gateway: str, topic_name: str) -> None:
    run(_replay_body(served_gateway, topic_name))


async def _replay_body(base_url: str, topic_name: str) -> None:
    async with Admin(base_url) as admin, Producer(base_url, topic_name) as producer:
        await admin.create_topic(topic_name, 3)
        results = await producer.send_many([{"value": n, "key": f"k{n}"} for n in range(25)])
    code, everything, err = await cli(base_url, "replay", topic_name)
    assert code == 0, err
    assert sorted(m["value"] for m in everything) == list(range(25))
    one = sorted((r for r in results if r.partition == 1), key=lambda r: offset_key(r.offset or ""))
    code, two, _ = await cli(base_url, "replay", topic_name, "--partition", "1", "--from",
                             str(one[1].offset), "--max-messages", "2")
    assert [m["offset"] for m in two] == [r.offset for r in one[1:3]]
    code, none, _ = await cli(base_url, "replay", topic_name, "--from-time-ms", "99999999999999")
    assert (code, none) == (0, [])


def test_peek_shows_next_messages_and_leaves_the_group(
        served_gateway: str, topic_name: str) -> None:
    run(_peek_body(served_gateway, topic_name))


async def _peek_body(base_url: str, topic_name: str) -> None:
    async with Admin(base_url) as admin, Producer(base_url, topic_name) as producer:
        await admin.create_topic(topic_name, 1)
        await producer.send_many([{"value": n, "key": "one"} for n in range(5)])
        async with Consumer(base_url, topic_name, group="g", from_="earliest",
                            max_in_flight=2) as consumer:
            for _ in range(2):
                await (await asyncio.wait_for(anext(consumer), 20)).ack()
        for _ in range(2):  # twice: peeking changes nothing
            code, peeked, err = await cli(base_url, "peek", "g", "--topic", topic_name)
            assert code == 0, err
            assert [m["value"] for m in peeked] in ([2, 3, 4], [3, 4], [4])
        async with Consumer(base_url, topic_name, group="g") as consumer:
            later = [(await asyncio.wait_for(anext(consumer), 20)).value for _ in range(3)]
    assert later == [2, 3, 4]


def test_dlq_list_shows_dead_letters_and_redrive_sends_them_back(
        served_gateway: str, topic_name: str) -> None:
    run(_dlq_body(served_gateway, topic_name))


async def _dlq_body(base_url: str, topic_name: str) -> None:
    async with Admin(base_url) as admin, Producer(base_url, topic_name) as producer:
        await admin.create_topic(topic_name, 1)
        await producer.send_many([{"value": n, "key": "one"} for n in range(3)])
        async with Consumer(base_url, topic_name, group="fails", from_="earliest",
                            max_deliveries=1) as consumer:
            for _ in range(3):
                await (await asyncio.wait_for(anext(consumer), 20)).nack()
            for _ in range(200):
                code, dead, _ = await cli(base_url, "dlq", "list", topic_name)
                if code == 0 and len(dead) == 3:
                    break
                await asyncio.sleep(0.1)
    assert sorted(m["value"] for m in dead) == [0, 1, 2]
    assert all(m["headers"]["sg-dlq-group"] == "fails" for m in dead)
    first = min(dead, key=lambda m: m["value"])
    code, redriven, err = await cli(base_url, "dlq", "redrive", topic_name, "--letter",
                                    f"{first['partition']}:{first['offset']}")
    assert (code, redriven) == (0, [{"redriven": 1}]), err
    code, left, _ = await cli(base_url, "dlq", "list", topic_name)
    assert sorted(m["value"] for m in left) == [1, 2]
    code, redriven, err = await cli(base_url, "dlq", "redrive", topic_name, "--max-messages", "1")
    assert (code, redriven) == (0, [{"redriven": 1}]), err
    code, purged, err = await cli(base_url, "dlq", "purge", topic_name)
    assert (code, purged[0]["purged"]) == (0, 1), err
    code, left, _ = await cli(base_url, "dlq", "list", topic_name)
    assert (code, left) == (0, [])


def test_produce_with_a_time_to_live_and_purge_a_topic(served_gateway: str,
                                                       topic_name: str) -> None:
    run(_ttl_and_purge_body(served_gateway, topic_name))


async def _ttl_and_purge_body(base_url: str, topic_name: str) -> None:
    async with Admin(base_url) as admin:
        await admin.create_topic(topic_name, 2)
    code, _, err = await cli(base_url, "produce", topic_name, "1", "2", "--ttl-ms", "60000")
    assert code == 0, err
    code, replayed, err = await cli(base_url, "replay", topic_name)
    assert (code, len(replayed)) == (0, 2), err
    assert all(int(m["headers"]["sg-expires-at"]) > 0 for m in replayed)
    code, purged, err = await cli(base_url, "topics", "purge", topic_name)
    assert (code, purged[0]["purged"]) == (0, 2), err
    code, replayed, _ = await cli(base_url, "replay", topic_name)
    assert (code, replayed) == (0, [])


def test_bench_measures_broadcast_and_group_delivery(served_gateway: str, topic_name: str) -> None:
    run(_bench_body(served_gateway, topic_name))


async def _bench_body(base_url: str, topic_name: str) -> None:
    code, lines, err = await cli(base_url, "bench", topic_name, "--messages", "2000",
                                 "--subscribers", "2", "--partitions", "3")
    assert code == 0, err
    (broadcast,) = lines
    assert broadcast["publish"]["msg_per_s"] > 0
    assert broadcast["subscribe"]["received"] == 4000
    assert 0 < broadcast["subscribe"]["latency_ms"]["p50"] <= broadcast["subscribe"][
        "latency_ms"]["p99"]
    code, lines, err = await cli(base_url, "bench", topic_name, "--messages", "1000",
                                 "--subscribers", "2", "--group", "bench")
    assert code == 0, err
    (grouped,) = lines
    assert grouped["subscribe"]["received"] == 1000
