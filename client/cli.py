"""Client commands of ``streamgate`` (and of ``streamgate-client``, the client's own distribution):
``produce``, ``consume``, ``topics`` and ``groups``. Output is JSON lines on stdout; an error prints
the problem's detail to stderr and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.metadata
import os
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from typing import Any, TextIO

import orjson

from client import Admin, ClientError, Consumer, Gap, ProblemError, Producer, SendResult
from client.cli_bench import add_bench_command, bench
from client.cli_reading import (
    add_reading_commands,
    dlq,
    history,
    peek,
    print_messages,
    replay,
    snapshot,
    tail,
)
from client.completion import add_completion_command, completion_script
from client.output import emit

CLIENT_COMMANDS = frozenset({"produce", "consume", "topics", "groups", "tail", "replay",
                             "history", "snapshot", "peek", "dlq", "bench", "completion"})
DEFAULT_URL = "http://127.0.0.1:8080"
URL_ENV = "STREAMGATE_URL"
API_KEY_ENV = "STREAMGATE_API_KEY"
TOKEN_ENV = "STREAMGATE_TOKEN"
# stdin produce: blocks of lines in flight before waiting for the oldest's results
MAX_PENDING_BLOCKS = 16
STDIN_BLOCK = 1 << 18  # bytes of stdin read per thread hop


def add_client_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the client commands on the ``streamgate`` sub-command parser."""
    url = argparse.ArgumentParser(add_help=False)
    url.add_argument("--url", default=None,
                     help=f"gateway base URL (default: ${URL_ENV}, else {DEFAULT_URL})")
    url.add_argument("--api-key", default=None,
                     help=f"API key (default: ${API_KEY_ENV}; prefer the variable)")
    url.add_argument("--token", default=None, help=f"JWT bearer token (default: ${TOKEN_ENV})")
    _add_produce(commands, url)
    _add_consume(commands, url)
    _add_topics(commands, url)
    _add_groups(commands, url)
    add_reading_commands(commands, url)
    add_bench_command(commands, url)
    add_completion_command(commands)


def _add_produce(commands: argparse._SubParsersAction[argparse.ArgumentParser],
                 url: argparse.ArgumentParser) -> None:
    produce = commands.add_parser("produce", parents=[url],
                                  help="publish messages (arguments or stdin lines)")
    produce.add_argument("topic")
    produce.add_argument("values", nargs="*", metavar="VALUE",
                         help="one message each (JSON if it parses, else a string); none: read "
                              "stdin lines")
    produce.add_argument("--key", default=None, help="message key (partitioning)")
    produce.add_argument("--acks", default="1", choices=["0", "1", "all"])
    produce.add_argument("--header", action="append", default=[], metavar="K=V", help="repeatable")
    produce.add_argument("--ttl-ms", type=int, default=None,
                         help="time to live: not delivered once this long has passed")


def _add_consume(commands: argparse._SubParsersAction[argparse.ArgumentParser],
                 url: argparse.ArgumentParser) -> None:
    consume = commands.add_parser("consume", parents=[url],
                                  help="print messages as JSON lines, acking each")
    consume.add_argument("topic")
    consume.add_argument("--group", default=None)
    consume.add_argument("--mode", default=None,
                         choices=["exclusive", "shared", "key_shared", "broadcast"])
    consume.add_argument("--from", dest="from_", default=None, metavar="earliest|latest|CURSOR",
                         help="CURSOR is <partition>:<offset>[,...] (resume after those offsets)")
    consume.add_argument("--filter", action="append", default=[], metavar="HEADER:V1,V2",
                         help="repeatable; all must match")
    consume.add_argument("--max-in-flight", type=int, default=100)
    consume.add_argument("--ack-timeout-ms", type=int, default=None,
                         help="a group's message comes again once un-acked this long")
    consume.add_argument("--max-deliveries", type=int, default=None,
                         help="a group's message goes to <topic>.dlq after this many deliveries")
    consume.add_argument("--retry-backoff-ms", type=int, default=None,
                         help="a group's failed deliveries wait this long, longer each time")
    consume.add_argument("--retry-backoff-multiplier", type=float, default=None)
    consume.add_argument("--retry-backoff-max-ms", type=int, default=None)
    consume.add_argument("--max-messages", type=int, default=None,
                         help="exit after this many messages")
    consume.add_argument("--timeout-s", type=float, default=None,
                         help="exit after this long without a message")


def _add_topics(commands: argparse._SubParsersAction[argparse.ArgumentParser],
                url: argparse.ArgumentParser) -> None:
    topics = commands.add_parser("topics",
                                 help="list, create, grow, describe, purge and delete topics")
    actions = topics.add_subparsers(dest="action", required=True)
    actions.add_parser("list", parents=[url], help="one line per topic")
    create = actions.add_parser("create", parents=[url])
    create.add_argument("name")
    create.add_argument("--partitions", type=int, required=True)
    create.add_argument("--retention-ms", type=int, default=None)
    create.add_argument("--max-length", type=int, default=None)
    create.add_argument("--key-index", action="store_true",
                        help="keep each key's history (streamgate history, expected offsets)")
    create.add_argument("--compact", action="store_true",
                        help="keep each key's newest message (streamgate snapshot); retention is "
                             "then the compaction lag")
    grow = actions.add_parser("grow", parents=[url],
                              help="add partitions; every key keeps its order for consumers")
    grow.add_argument("name")
    grow.add_argument("--partitions", type=int, required=True)
    purge = actions.add_parser("purge", parents=[url],
                               help="remove every message (of one partition with --partition); "
                                    "consumer groups move past them")
    purge.add_argument("name")
    purge.add_argument("--partition", type=int, default=None)
    for name in ("describe", "delete"):
        actions.add_parser(name, parents=[url]).add_argument("name")


def _add_groups(commands: argparse._SubParsersAction[argparse.ArgumentParser],
                url: argparse.ArgumentParser) -> None:
    groups = commands.add_parser("groups",
                                 help="list, describe, seek consumer groups; unpark a parked key")
    actions = groups.add_subparsers(dest="action", required=True)
    actions.add_parser("list", parents=[url])
    describe = actions.add_parser("describe", parents=[url])
    describe.add_argument("group")
    describe.add_argument("--topic", default=None)
    parked = actions.add_parser("unpark", parents=[url],
                                help="let a key_shared group's parked key go on: its message "
                                     "again now, or to the dead letters")
    parked.add_argument("group")
    parked.add_argument("--topic", required=True)
    parked.add_argument("--partition", type=int, required=True)
    parked.add_argument("--key", required=True)
    parked.add_argument("--dead-letter", action="store_true")
    parked.add_argument("--reason", default=None)
    seek = actions.add_parser("seek", parents=[url])
    seek.add_argument("group")
    seek.add_argument("--topic", required=True)
    seek.add_argument("--to", required=True, metavar="earliest|latest|CURSOR")


def add_version(parser: argparse.ArgumentParser) -> None:
    """``--version``: the installed distribution's version (the server's or the client's own)."""
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")


def installed_version() -> str:
    """The version of the installed ``streamgate`` or ``streamgate-client`` distribution."""
    for distribution in ("streamgate", "streamgate-client"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``streamgate-client``: the client commands alone, without the server."""
    parser = argparse.ArgumentParser(prog="streamgate-client",
                                     description="streamgate's client commands")
    add_version(parser)
    add_client_commands(parser.add_subparsers(dest="command", required=True))
    return run_client_command(parser.parse_args(argv), os.environ)


def run_client_command(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    """Run one client command; 0 on success, 1 on a gateway or connection error.

    The gateway: ``--url``, else ``$STREAMGATE_URL``, else the local default. Credentials:
    ``--token``/``--api-key``, else ``$STREAMGATE_TOKEN``/``$STREAMGATE_API_KEY`` from ``env``.
    """
    if args.command == "completion":
        sys.stdout.write(completion_script(args.shell, args.completion_commands))
        return 0
    env = env or {}
    args.url = args.url or env.get(URL_ENV) or DEFAULT_URL
    args.token = args.token or env.get(TOKEN_ENV) or None
    args.api_key = args.api_key or env.get(API_KEY_ENV) or None
    command: Callable[[argparse.Namespace], Coroutine[Any, Any, int]] = _COMMANDS[args.command]
    try:
        return asyncio.run(command(args))
    except ProblemError as exc:
        print(f"streamgate {args.command}: {exc.describe()}", file=sys.stderr)
    except ClientError as exc:
        print(f"streamgate {args.command}: {exc}", file=sys.stderr)
    except ValueError as exc:
        print(f"streamgate {args.command}: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return 1


def parse_value(text: str) -> Any:
    """A message value from the command line: JSON if it parses, else the string itself."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def parse_headers(pairs: Sequence[str]) -> dict[str, str]:
    """``k=v`` pairs into a dict (a ValueError names a malformed one)."""
    headers: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--header must be K=V, not {pair!r}")
        headers[name] = value
    return headers


def _result_document(result: SendResult) -> dict[str, Any]:
    return {"partition": result.partition, "offset": result.offset, "duplicate": result.duplicate}


# --- produce --------------------------------------------------------------------------------------
async def _produce(args: argparse.Namespace) -> int:
    headers = parse_headers(args.header) or None
    async with Producer(args.url, args.topic, acks=args.acks, api_key=args.api_key,
                        token=args.token) as producer:
        if args.values:
            results = await producer.send_many(
                [{"value": parse_value(v), "key": args.key, "headers": headers,
                  "ttl_ms": args.ttl_ms} for v in args.values])
            for result in results:
                emit(_result_document(result))
            return 0
        progress = Progress(sys.stderr) if sys.stderr.isatty() else None
        await _produce_stdin(producer, args.key, headers, progress, args.ttl_ms)
        if progress is not None:
            progress.summary()
    return 0


class Progress:
    """Messages sent and answered, on one line of a terminal, at most twice a second; a summary
    at the end."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._started = self._shown = time.monotonic()
        self.sent = self.answered = self.duplicates = 0

    def update(self, sent: int = 0, results: Sequence[SendResult] = ()) -> None:
        self.sent += sent
        self.answered += len(results)
        self.duplicates += sum(1 for r in results if r.duplicate)
        now = time.monotonic()
        if now - self._shown >= 0.5:
            self._shown = now
            self._stream.write(f"\r{self.sent:,} sent, {self.answered:,} written "
                               f"({self.answered / (now - self._started):,.0f} msg/s)  ")
            self._stream.flush()

    def summary(self) -> None:
        elapsed = time.monotonic() - self._started
        duplicates = f", {self.duplicates:,} duplicates" if self.duplicates else ""
        self._stream.write(f"\r{self.answered:,} messages written in {elapsed:.1f} s "
                           f"({self.answered / max(elapsed, 1e-9):,.0f} msg/s){duplicates}\n")
        self._stream.flush()


async def _produce_stdin(producer: Producer, key: str | None, headers: dict[str, str] | None,
                         progress: Progress | None, ttl_ms: int | None = None) -> None:
    """Send stdin's lines a block at a time (each block's lines as batches of their own, several
    blocks in flight), print their results in input order as they come back."""
    head = message_head(key, headers, ttl_ms)
    pending: deque[asyncio.Future[list[SendResult]]] = deque()
    async for lines in _stdin_blocks():
        encoded = [head + json_or_string(line) + b"}" for line in lines]
        pending.append(asyncio.ensure_future(producer.send_encoded(encoded, key)))
        if progress is not None:
            progress.update(sent=len(encoded))
        while pending and (pending[0].done() or len(pending) >= MAX_PENDING_BLOCKS):
            _emit_results(await pending.popleft(), progress)
    while pending:
        _emit_results(await pending.popleft(), progress)


def message_head(key: str | None, headers: Mapping[str, str] | None,
                 ttl_ms: int | None = None) -> bytes:
    """A message's JSON up to its value: ``{"key":...,"headers":...,"ttl_ms":...,"value":``."""
    head = b"{"
    if key is not None:
        head += b'"key":' + orjson.dumps(key) + b","
    if headers:
        head += b'"headers":' + orjson.dumps(headers) + b","
    if ttl_ms is not None:
        head += b'"ttl_ms":%d,' % ttl_ms
    return head + b'"value":'


def json_or_string(line: bytes) -> bytes:
    """A line as a message value: as it is when it is JSON, else as a JSON string."""
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return orjson.dumps(line.decode(errors="replace"))
    return line


_RESULT_LINE = b'{"partition":%d,"offset":"%b","duplicate":%b}\n'


def result_lines(results: list[SendResult]) -> bytes:
    """One JSON line per result, as ``orjson.dumps`` writes its document (formatted directly:
    offsets are ASCII digits and a dash)."""
    return b"".join([_RESULT_LINE % (r.partition, r.offset.encode(),
                                     b"true" if r.duplicate else b"false")
                     if r.offset is not None and r.partition is not None
                     else orjson.dumps(_result_document(r)) + b"\n"
                     for r in results])


def _emit_results(results: list[SendResult], progress: Progress | None) -> None:
    sys.stdout.buffer.write(result_lines(results))
    sys.stdout.flush()
    if progress is not None:
        progress.update(results=results)


async def _stdin_blocks() -> AsyncIterator[list[bytes]]:
    """Non-empty stdin lines without their line ending, a block at a time: what a read returns
    (up to ``STDIN_BLOCK`` bytes), read off the event loop (one thread hop per block)."""
    stdin = sys.stdin.buffer
    read = getattr(stdin, "read1", stdin.read)  # what a pipe has ready, up to a block
    rest = b""
    while True:
        block: bytes = await asyncio.to_thread(read, STDIN_BLOCK)
        if not block:
            break
        lines = (rest + block).split(b"\n")
        rest = lines.pop()
        if kept := [line.rstrip(b"\r") for line in lines if line.rstrip(b"\r")]:
            yield kept
    if rest.rstrip(b"\r"):
        yield [rest.rstrip(b"\r")]


# --- consume --------------------------------------------------------------------------------------
async def _consume(args: argparse.Namespace) -> int:
    consumer = Consumer(args.url, args.topic, group=args.group, mode=args.mode, from_=args.from_,
                        filters=args.filter, max_in_flight=args.max_in_flight, api_key=args.api_key,
                        token=args.token, ack_timeout_ms=args.ack_timeout_ms,
                        max_deliveries=args.max_deliveries,
                        retry_backoff_ms=args.retry_backoff_ms,
                        retry_backoff_multiplier=args.retry_backoff_multiplier,
                        retry_backoff_max_ms=args.retry_backoff_max_ms, on_gap=_report_gap)
    async with consumer:
        await print_messages(consumer, args.max_messages, args.timeout_s, ack=True)
    return 0


def _report_gap(gap: Gap) -> None:
    """A resume past retention, on stderr as a JSON line (stdout keeps the messages)."""
    sys.stderr.write(orjson.dumps({"gap": dataclasses.asdict(gap)}).decode() + "\n")


# --- topics and groups ----------------------------------------------------------------------------
async def _topics(args: argparse.Namespace) -> int:
    async with Admin(args.url, api_key=args.api_key, token=args.token) as admin:
        if args.action == "list":
            for topic in await admin.list_topics():
                emit(topic)
        elif args.action == "create":
            emit(await admin.create_topic(args.name, args.partitions,
                                          retention_ms=args.retention_ms,
                                          max_length=args.max_length,
                                          key_index=args.key_index, compact=args.compact))
        elif args.action == "grow":
            emit(await admin.grow_topic(args.name, args.partitions))
        elif args.action == "describe":
            emit(await admin.describe_topic(args.name))
        elif args.action == "purge":
            emit(await admin.purge(args.name, args.partition))
        else:
            await admin.delete_topic(args.name)
            emit({"deleted": args.name})
    return 0


async def _groups(args: argparse.Namespace) -> int:
    async with Admin(args.url, api_key=args.api_key, token=args.token) as admin:
        if args.action == "list":
            for group in await admin.list_groups():
                emit(group)
        elif args.action == "describe":
            emit(await admin.describe_group(args.group, args.topic))
        elif args.action == "unpark":
            emit(await admin.settle_parked_key(args.group, args.topic, args.partition, args.key,
                                               dead_letter=args.dead_letter, reason=args.reason))
        else:
            emit(await admin.seek(args.group, args.topic, args.to))
    return 0


_COMMANDS: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, int]]] = {
    "produce": _produce, "consume": _consume, "topics": _topics, "groups": _groups,
    "tail": tail, "replay": replay, "history": history, "snapshot": snapshot, "peek": peek,
    "dlq": dlq,
    "bench": bench,
}
