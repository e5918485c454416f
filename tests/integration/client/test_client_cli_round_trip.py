"""The client CLI as a user runs it: subprocesses against a gateway started with
``python -m gateway.cli serve`` (conftest's ``served_gateway``)."""

from __future__ import annotations

import uuid

import orjson
from served import json_lines, streamgate


def test_produce_then_consume_round_trips_through_the_cli(served_gateway: str) -> None:
    url, topic = served_gateway, f"cli-{uuid.uuid4().hex[:8]}"
    created = streamgate("topics", "create", topic, "--partitions", "3", "--url", url)
    assert created.returncode == 0, created.stderr
    assert json_lines(created.stdout)[0]["name"] == topic

    produced = streamgate("produce", topic, "--acks", "all", "--header", "source=cli", "--url", url,
                          stdin='{"total": 42}\nhello\n7\n\n[1, 2]\n')
    assert produced.returncode == 0, produced.stderr
    results = json_lines(produced.stdout)
    assert len(results) == 4
    assert all(isinstance(r["offset"], str) and not r["duplicate"] for r in results)

    consumed = streamgate(
        "consume", topic, "--group", "cli", "--from", "earliest", "--max-messages", "4",
        "--timeout-s", "20", "--url", url,
    )
    assert consumed.returncode == 0, consumed.stderr
    messages = json_lines(consumed.stdout)
    assert sorted(map(repr, (m["value"] for m in messages))) == sorted(
        map(repr, [{"total": 42}, "hello", 7, [1, 2]])
    )
    assert all(m["headers"] == {"source": "cli"} for m in messages)
    assert {(m["partition"], m["offset"]) for m in messages} == {
        (r["partition"], r["offset"]) for r in results
    }

    # Every message was acked after printing: the group has nothing left for the next run.
    again = streamgate(
        "consume", topic, "--group", "cli", "--max-messages", "1", "--timeout-s", "2", "--url", url
    )
    assert (again.returncode, again.stdout) == (0, "")

    described = streamgate("groups", "describe", "cli", "--topic", topic, "--url", url)
    assert described.returncode == 0, described.stderr
    assert (
        sum(p["pending"] for p in json_lines(described.stdout)[0]["topics"][0]["partitions"]) == 0
    )
    assert {"topic": topic, "group": "cli"} in json_lines(
        streamgate("groups", "list", "--url", url).stdout
    )
    sought = streamgate("groups", "seek", "cli", "--topic", topic, "--to", "earliest", "--url", url)
    assert sought.returncode == 0, sought.stderr
    replayed = streamgate(
        "consume", topic, "--group", "cli", "--max-messages", "4", "--timeout-s", "20", "--url", url
    )
    assert len(json_lines(replayed.stdout)) == 4

    listed = streamgate("topics", "list", "--url", url)
    assert topic in [t["name"] for t in json_lines(listed.stdout)]
    grown = streamgate("topics", "grow", topic, "--partitions", "6", "--url", url)
    assert grown.returncode == 0, grown.stderr
    assert (json_lines(grown.stdout)[0]["partitions"], json_lines(grown.stdout)[0]["growing_to"]) \
        == (6, None)


def test_cli_errors_print_detail_and_exit_non_zero(served_gateway: str) -> None:
    missing = streamgate("topics", "describe", "no-such-topic", "--url", served_gateway)
    assert missing.returncode == 1
    assert missing.stdout == ""
    assert "404" in missing.stderr
    assert "no-such-topic" in missing.stderr

    bad = streamgate("produce", "no-such-topic", "x", "--url", served_gateway)
    assert bad.returncode == 1
    assert "404" in bad.stderr


def test_produce_writes_each_stdin_line_once_in_order(served_gateway: str) -> None:
    url, topic = served_gateway, f"cli-{uuid.uuid4().hex[:8]}"
    assert streamgate("topics", "create", topic, "--partitions", "4", "--url", url).returncode == 0
    lines = [f'{{"n": {n}}}' if n % 2 else f"line {n}\r" for n in range(20_000)]
    keyed = streamgate("produce", topic, "--key", "one", "--url", url,
                       stdin="\n".join(lines) + "\n\n")
    assert keyed.returncode == 0, keyed.stderr
    results = json_lines(keyed.stdout)
    assert len(results) == 20_000
    assert len({r["partition"] for r in results}) == 1
    offsets = [tuple(map(int, r["offset"].split("-"))) for r in results]
    bad = [i for i in range(1, len(offsets)) if offsets[i] < offsets[i - 1]]
    assert not bad, (bad[:5], [results[i - 1:i + 1] for i in bad[:3]], results[:2])
    assert keyed.stderr == ""  # no progress line when stderr is not a terminal

    keyless = streamgate("produce", topic, "--url", url, stdin="\n".join(lines))
    assert keyless.returncode == 0, keyless.stderr
    assert len(json_lines(keyless.stdout)) == 20_000
    described = orjson.loads(streamgate("topics", "describe", topic, "--url", url).stdout)
    assert sum(d["length"] for d in described["partition_details"]) == 40_000
    replay = streamgate("consume", topic, "--group", "check", "--from", "earliest",
                        "--max-messages", "2", "--timeout-s", "20", "--url", url)
    values = [m["value"] for m in json_lines(replay.stdout)]
    assert all(v == "line 0" or isinstance(v, dict | str) for v in values)


def test_consume_in_a_key_shared_group_with_delivery_options(served_gateway: str) -> None:
    url, topic = served_gateway, f"cli-{uuid.uuid4().hex[:8]}"
    assert streamgate("topics", "create", topic, "--partitions", "2", "--url", url).returncode == 0
    produced = streamgate("produce", topic, "--key", "cart-1", "--url", url, stdin="1\n2\n3\n")
    assert produced.returncode == 0, produced.stderr
    consumed = streamgate(
        "consume", topic, "--group", "ks", "--mode", "key_shared", "--max-messages", "3",
        "--timeout-s", "20", "--ack-timeout-ms", "5000", "--max-deliveries", "4",
        "--retry-backoff-ms", "100", "--retry-backoff-multiplier", "3",
        "--retry-backoff-max-ms", "2000", "--url", url,
    )
    assert consumed.returncode == 0, consumed.stderr
    assert [m["value"] for m in json_lines(consumed.stdout)] == [1, 2, 3]  # one key, in order
