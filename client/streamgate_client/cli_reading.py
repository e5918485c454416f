"""The CLI's reading commands: ``tail``, ``replay``, ``history``, ``snapshot``, ``peek`` and
``dlq`` (client.cli_args has their options); JSON lines on stdout, or as ``-o``/``-f`` ask.

None of them moves a group: ``tail`` is a broadcast subscription, ``replay``, ``peek`` and
``dlq list`` read partitions by offset.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from streamgate_client.admin import Admin
from streamgate_client.cli_contexts import connection
from streamgate_client.consumer import Consumer
from streamgate_client.cursors import offset_key
from streamgate_client.errors import ProblemError
from streamgate_client.output import MessageWriter, emit, message_writer

PAGE = 1000


async def tail(args: argparse.Namespace) -> int:
    """Every message published from now on (like ``kcat -C -o end``), until a limit."""
    consumer = Consumer(args.url, args.topic, from_="latest", filters=args.filter,
                        **connection(args))
    async with consumer:
        await print_messages(consumer, args, ack=False)
    return 0


async def print_messages(consumer: Consumer, args: argparse.Namespace, *, ack: bool) -> None:
    """Print messages as they come, as ``-o``/``-f`` ask (acking each after printing, with
    ``ack``), until ``--max-messages`` or ``--timeout-s`` without one."""
    write = message_writer(args)
    count = 0
    while args.max_messages is None or count < args.max_messages:
        try:
            message = await asyncio.wait_for(anext(consumer), args.timeout_s)
        except (TimeoutError, StopAsyncIteration):
            break
        write(message.to_dict())
        if ack:
            await message.ack()
        count += 1


async def replay(args: argparse.Namespace) -> int:
    """A partition's (or every partition's) messages from an offset or a time to its end."""
    async with Admin(args.url, **connection(args)) as admin:
        partitions = ([args.partition] if args.partition is not None
                      else range((await admin.describe_topic(args.topic))["partitions"]))
        left, write = args.max_messages, message_writer(args)
        for partition in partitions:
            left = await _print_partition(admin, args.topic, partition, args.from_,
                                          args.from_time_ms, left, write)
            if left == 0:
                break
    return 0


async def _print_partition(admin: Admin, topic: str, partition: int, from_: str,
                           from_time_ms: int | None, left: int | None,
                           write: MessageWriter) -> int | None:
    """Print one partition page by page up to its end or ``left`` messages; what is left."""
    start: str | None = None if from_time_ms is not None else from_
    while left is None or left > 0:
        limit = PAGE if left is None else min(PAGE, left)
        page = await admin.replay(topic, partition, from_=start,
                                  from_time_ms=from_time_ms if start is None else None,
                                  limit=limit)
        for message in page["messages"]:
            write(message)
        if left is not None:
            left -= len(page["messages"])
        if len(page["messages"]) < limit:
            break
        start = page["next_offset"]
    return left


async def history(args: argparse.Namespace) -> int:
    """A key's messages, oldest (or newest) first, page by page up to the end of its history."""
    async with Admin(args.url, **connection(args)) as admin:
        start, left, write = args.from_, args.max_messages, message_writer(args)
        while left is None or left > 0:
            limit = PAGE if left is None else min(PAGE, left)
            page = await admin.key_history(args.topic, args.key, newest_first=args.newest_first,
                                           from_=start, limit=limit)
            for message in page["messages"]:
                write(message)
            if left is not None:
                left -= len(page["messages"])
            start = page["next_offset"]
            if len(page["messages"]) < limit or start is None:
                break
    return 0


async def snapshot(args: argparse.Namespace) -> int:
    """Each partition's snapshot as JSON lines; on stderr the cursor to follow them from
    (``consume --from`` / ``tail``-like readers resume strictly after it)."""
    async with Admin(args.url, **connection(args)) as admin:
        partitions = ([args.partition] if args.partition is not None
                      else range((await admin.describe_topic(args.topic))["partitions"]))
        cursor, write = [], message_writer(args)
        for partition in partitions:
            as_of, messages = await admin.snapshot(args.topic, partition)
            for message in messages:
                write(message)
            cursor.append(f"{partition}:{as_of}")
    print(f"as of {','.join(cursor)}", file=sys.stderr)
    return 0


async def peek(args: argparse.Namespace) -> int:
    """The messages a group has not been delivered yet, oldest first, read by offset: the group,
    its pending messages and its position stay as they are."""
    async with Admin(args.url, **connection(args)) as admin:
        described = await admin.describe_group(args.group, args.topic)
        positions = {p["partition"]: p.get("last_delivered_offset")
                     for t in described.get("topics", []) if t.get("topic") == args.topic
                     for p in t.get("partitions", [])}
        waiting: list[dict[str, Any]] = []
        for partition, delivered in sorted(positions.items()):
            page = await admin.replay(args.topic, partition, from_=delivered or "earliest",
                                      limit=args.max_messages + 1)
            waiting += [m for m in page["messages"] if m["offset"] != delivered]
    waiting.sort(key=lambda m: (m["timestamp_ms"], offset_key(m["offset"]), m["partition"]))
    write = message_writer(args)
    for message in waiting[:args.max_messages]:
        write(message)
    return 0


async def dlq(args: argparse.Namespace) -> int:
    """``list``: the dead letters of a topic; ``redrive``: send them back to it; ``purge``: remove
    them."""
    if args.action in ("redrive", "purge"):
        async with Admin(args.url, **connection(args)) as admin:
            if args.action == "purge":
                emit(await admin.purge(args.topic, args.partition, dead_letters=True,
                                       dry_run=args.dry_run))
            else:
                emit(await admin.redrive(args.topic, args.max_messages,
                                         rate_per_s=args.rate_per_s, letter=args.letter,
                                         dry_run=args.dry_run))
        return 0
    source = args.topic
    args.topic, args.partition, args.from_, args.from_time_ms = (f"{source}.dlq", None,
                                                                 "earliest", None)
    try:
        return await replay(args)
    except ProblemError as exc:
        if exc.status != 404:
            raise
    # the dead-letter topic is created with the first dead letter: none yet, if the topic exists
    async with Admin(args.url, **connection(args)) as admin:
        await admin.describe_topic(source)
    return 0
