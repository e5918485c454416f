"""The CLI's reading commands: ``tail``, ``replay``, ``history``, ``snapshot``, ``peek`` and
``dlq``; JSON lines on stdout.

None of them moves a group: ``tail`` is a broadcast subscription, ``replay``, ``peek`` and
``dlq list`` read partitions by offset.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from client.admin import Admin
from client.consumer import Consumer, offset_key
from client.errors import ProblemError
from client.output import emit

PAGE = 1000


def add_reading_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser],
                         url: argparse.ArgumentParser) -> None:
    """Register ``tail``, ``replay``, ``history``, ``snapshot``, ``peek`` and ``dlq`` (their
    handlers are the functions of the same names)."""
    tail_parser = commands.add_parser("tail", parents=[url],
                                      help="follow a topic from now (a broadcast subscription)")
    tail_parser.add_argument("topic")
    tail_parser.add_argument("--filter", action="append", default=[], metavar="HEADER:V1,V2",
                             help="repeatable; all must match")
    _add_limits(tail_parser)

    replay_parser = commands.add_parser("replay", parents=[url],
                                        help="print a topic's or a partition's stored messages")
    replay_parser.add_argument("topic")
    replay_parser.add_argument("--partition", type=int, default=None,
                               help="one partition (default: every partition, one after another)")
    start = replay_parser.add_mutually_exclusive_group()
    start.add_argument("--from", dest="from_", default="earliest", metavar="earliest|OFFSET",
                       help="first offset, inclusive")
    start.add_argument("--from-time-ms", type=int, default=None,
                       help="from the first message at or after this time (epoch ms)")
    replay_parser.add_argument("--max-messages", type=int, default=None)

    history_parser = commands.add_parser("history", parents=[url],
                                         help="print one key's messages (a topic with a key index)")
    history_parser.add_argument("topic")
    history_parser.add_argument("key")
    history_parser.add_argument("--newest-first", action="store_true")
    history_parser.add_argument("--from", dest="from_", default=None, metavar="OFFSET",
                                help="first offset printed, inclusive")
    history_parser.add_argument("--max-messages", type=int, default=None)

    snapshot_parser = commands.add_parser(
        "snapshot", parents=[url],
        help="print every key's newest value of a compacted topic, as of one offset per partition "
             "(the cursor to follow on stderr)")
    snapshot_parser.add_argument("topic")
    snapshot_parser.add_argument("--partition", type=int, default=None,
                                 help="one partition (default: every partition)")

    peek_parser = commands.add_parser("peek", parents=[url],
                                      help="a group's next messages, without delivering them")
    peek_parser.add_argument("group")
    peek_parser.add_argument("--topic", required=True)
    peek_parser.add_argument("--max-messages", type=int, default=10)

    dlq_parser = commands.add_parser("dlq", help="list, redrive or purge a topic's dead letters")
    actions = dlq_parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", parents=[url], help="print the dead letters")
    listing.add_argument("topic", help="the source topic (its dead letters are in <topic>.dlq)")
    listing.add_argument("--max-messages", type=int, default=None)
    redrive = actions.add_parser("redrive", parents=[url],
                                 help="send dead letters back to their topic")
    redrive.add_argument("topic")
    redrive.add_argument("--max-messages", type=int, default=None)
    redrive.add_argument("--rate-per-s", type=int, default=None)
    redrive.add_argument("--letter", type=dead_letter, default=None, metavar="PARTITION:OFFSET",
                         help="only this dead letter (its partition and offset in <topic>.dlq)")
    purge = actions.add_parser("purge", parents=[url], help="remove the dead letters (admin)")
    purge.add_argument("topic")
    purge.add_argument("--partition", type=int, default=None)


def dead_letter(text: str) -> tuple[int, str]:
    """``--letter``'s ``<partition>:<offset>``."""
    partition, sep, offset = text.partition(":")
    if not sep or not partition.isdigit() or not offset:
        raise argparse.ArgumentTypeError(f"{text!r}: expected <partition>:<offset>, e.g. 0:1700-0")
    return int(partition), offset


def _add_limits(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-messages", type=int, default=None,
                        help="exit after this many messages")
    parser.add_argument("--timeout-s", type=float, default=None,
                        help="exit after this long without a message")


async def tail(args: argparse.Namespace) -> int:
    """Every message published from now on (like ``kcat -C -o end``), until a limit."""
    consumer = Consumer(args.url, args.topic, from_="latest", filters=args.filter,
                        api_key=args.api_key, token=args.token)
    async with consumer:
        await print_messages(consumer, args.max_messages, args.timeout_s, ack=False)
    return 0


async def print_messages(consumer: Consumer, max_messages: int | None, timeout_s: float | None,
                         *, ack: bool) -> None:
    """Print messages as they come (acking each after printing, with ``ack``), until
    ``max_messages`` or ``timeout_s`` without one."""
    count = 0
    while max_messages is None or count < max_messages:
        try:
            message = await asyncio.wait_for(anext(consumer), timeout_s)
        except (TimeoutError, StopAsyncIteration):
            break
        emit(message.to_dict())
        if ack:
            await message.ack()
        count += 1


async def replay(args: argparse.Namespace) -> int:
    """A partition's (or every partition's) messages from an offset or a time to its end."""
    async with Admin(args.url, api_key=args.api_key, token=args.token) as admin:
        partitions = ([args.partition] if args.partition is not None
                      else range((await admin.describe_topic(args.topic))["partitions"]))
        left = args.max_messages
        for partition in partitions:
            left = await _print_partition(admin, args.topic, partition, args.from_,
                                          args.from_time_ms, left)
            if left == 0:
                break
    return 0


async def _print_partition(admin: Admin, topic: str, partition: int, from_: str,
                           from_time_ms: int | None, left: int | None) -> int | None:
    """Print one partition page by page up to its end or ``left`` messages; what is left."""
    start: str | None = None if from_time_ms is not None else from_
    while left is None or left > 0:
        limit = PAGE if left is None else min(PAGE, left)
        page = await admin.replay(topic, partition, from_=start,
                                  from_time_ms=from_time_ms if start is None else None,
                                  limit=limit)
        for message in page["messages"]:
            emit(message)
        if left is not None:
            left -= len(page["messages"])
        if len(page["messages"]) < limit:
            break
        start = page["next_offset"]
    return left


async def history(args: argparse.Namespace) -> int:
    """A key's messages, oldest (or newest) first, page by page up to the end of its history."""
    async with Admin(args.url, api_key=args.api_key, token=args.token) as admin:
        start, left = args.from_, args.max_messages
        while left is None or left > 0:
            limit = PAGE if left is None else min(PAGE, left)
            page = await admin.key_history(args.topic, args.key, newest_first=args.newest_first,
                                           from_=start, limit=limit)
            for message in page["messages"]:
                emit(message)
            if left is not None:
                left -= len(page["messages"])
            start = page["next_offset"]
            if len(page["messages"]) < limit or start is None:
                break
    return 0


async def snapshot(args: argparse.Namespace) -> int:
    """Each partition's snapshot as JSON lines; on stderr the cursor to follow them from
    (``consume --from`` / ``tail``-like readers resume strictly after it)."""
    async with Admin(args.url, api_key=args.api_key, token=args.token) as admin:
        partitions = ([args.partition] if args.partition is not None
                      else range((await admin.describe_topic(args.topic))["partitions"]))
        cursor = []
        for partition in partitions:
            as_of, messages = await admin.snapshot(args.topic, partition)
            for message in messages:
                emit(message)
            cursor.append(f"{partition}:{as_of}")
    print(f"as of {','.join(cursor)}", file=sys.stderr)
    return 0


async def peek(args: argparse.Namespace) -> int:
    """The messages a group has not been delivered yet, oldest first, read by offset: the group,
    its pending messages and its position stay as they are."""
    async with Admin(args.url, api_key=args.api_key, token=args.token) as admin:
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
    for message in waiting[:args.max_messages]:
        emit(message)
    return 0


async def dlq(args: argparse.Namespace) -> int:
    """``list``: the dead letters of a topic; ``redrive``: send them back to it; ``purge``: remove
    them."""
    if args.action in ("redrive", "purge"):
        async with Admin(args.url, api_key=args.api_key, token=args.token) as admin:
            if args.action == "purge":
                emit(await admin.purge(args.topic, args.partition, dead_letters=True))
            else:
                emit(await admin.redrive(args.topic, args.max_messages,
                                         rate_per_s=args.rate_per_s, letter=args.letter))
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
    async with Admin(args.url, api_key=args.api_key, token=args.token) as admin:
        await admin.describe_topic(source)
    return 0
