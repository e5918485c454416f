"""The handlers of ``produce``, ``consume``, ``topics`` and ``groups`` (client.cli_args has their
options)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import orjson

from streamgate_client.admin import Admin
from streamgate_client.cli_contexts import connection
from streamgate_client.cli_reading import print_messages
from streamgate_client.consumer import Consumer
from streamgate_client.output import emit, write_listing
from streamgate_client.producer import Producer, SendResult
from streamgate_client.received import Gap

# stdin produce: blocks of lines in flight before waiting for the oldest's results
MAX_PENDING_BLOCKS = 16
STDIN_BLOCK = 1 << 18  # bytes of stdin read per thread hop

SendBlock = Callable[[list[bytes]], Awaitable[list[SendResult]]]


def parse_value(text: str | bytes) -> Any:
    """A message value from the command line: JSON if it parses, else the string itself."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text.decode(errors="replace") if isinstance(text, bytes) else text


def parse_headers(pairs: Sequence[str]) -> dict[str, str]:
    """``k=v`` pairs into a dict (a ValueError names a malformed one)."""
    headers: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--header must be K=V, not {pair!r}")
        headers[name] = value
    return headers


def message_fields(line: bytes, args: argparse.Namespace, headers: Mapping[str, str] | None,
                   *, whole_file: bool = False) -> dict[str, Any]:
    """One VALUE or stdin line as ``Producer.send_many`` arguments: its key split off at
    ``--key-delimiter`` (else ``--key``), its value bytes with ``--binary``, else JSON or a
    string. A ``--value-file``'s bytes are the value as they are."""
    key = args.key
    if args.key_delimiter and not whole_file:
        found, sep, rest = line.partition(args.key_delimiter.encode())
        if sep:
            key, line = found.decode(errors="replace"), rest
    value = {"value_b64": line} if args.binary or whole_file else {"value": parse_value(line)}
    return {**value, "key": key, "headers": headers, "partition": args.partition,
            "ttl_ms": args.ttl_ms}


def _result_document(result: SendResult) -> dict[str, Any]:
    return {"partition": result.partition, "offset": result.offset, "duplicate": result.duplicate}


# --- produce --------------------------------------------------------------------------------------
async def produce(args: argparse.Namespace) -> int:
    """Publish the VALUEs, the ``--value-file``s or stdin's lines; one JSON line per result."""
    headers = parse_headers(args.header) or None
    async with Producer(args.url, args.topic, acks=args.acks,
                        **connection(args)) as producer:
        if args.values or args.value_file:
            messages = ([message_fields(v.encode(), args, headers) for v in args.values]
                        + [message_fields(await _read_file(path), args, headers, whole_file=True)
                           for path in args.value_file])
            _emit_results(await producer.send_many(messages), None)
            return 0
        progress = Progress(sys.stderr) if sys.stderr.isatty() else None
        await _produce_stdin(_block_sender(producer, args, headers), progress)
        if progress is not None:
            progress.summary()
    return 0


async def _read_file(path: str) -> bytes:
    """A ``--value-file``'s bytes (``-``: all of stdin)."""
    if path == "-":
        return await asyncio.to_thread(sys.stdin.buffer.read)
    return await asyncio.to_thread(Path(path).read_bytes)


def _block_sender(producer: Producer, args: argparse.Namespace,
                  headers: dict[str, str] | None) -> SendBlock:
    """How a block of stdin lines is sent: already encoded (a line's JSON as it is) when every
    line shares one key and no partition; else each line's own fields, laned by key or
    partition so that their order holds."""
    if args.key_delimiter or args.binary or args.partition is not None:
        return lambda lines: producer.send_many(
            [message_fields(line, args, headers) for line in lines])
    head = message_head(args.key, headers, args.ttl_ms)
    return lambda lines: producer.send_encoded(
        [head + json_or_string(line) + b"}" for line in lines], args.key)


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


async def _produce_stdin(send_block: SendBlock, progress: Progress | None) -> None:
    """Send stdin's lines a block at a time (each block's lines as batches of their own, several
    blocks in flight), print their results in input order as they come back."""
    pending: deque[asyncio.Future[list[SendResult]]] = deque()
    async for lines in _stdin_blocks():
        pending.append(asyncio.ensure_future(send_block(lines)))
        if progress is not None:
            progress.update(sent=len(lines))
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
async def consume(args: argparse.Namespace) -> int:
    """Print a subscription's messages (acking each) until a limit."""
    consumer = Consumer(args.url, args.topic, group=args.group, mode=args.mode, from_=args.from_,
                        from_time_ms=args.from_time_ms, filters=args.filter,
                        max_in_flight=args.max_in_flight, **connection(args),
                        ack_timeout_ms=args.ack_timeout_ms,
                        max_deliveries=args.max_deliveries,
                        retry_backoff_ms=args.retry_backoff_ms,
                        retry_backoff_multiplier=args.retry_backoff_multiplier,
                        retry_backoff_max_ms=args.retry_backoff_max_ms, on_gap=_report_gap)
    async with consumer:
        await print_messages(consumer, args, ack=True)
    return 0


def _report_gap(gap: Gap) -> None:
    """A resume past retention, on stderr as a JSON line (stdout keeps the messages)."""
    sys.stderr.write(orjson.dumps({"gap": dataclasses.asdict(gap)}).decode() + "\n")


# --- topics and groups ----------------------------------------------------------------------------
async def topics(args: argparse.Namespace) -> int:
    """``topics list|create|grow|describe|purge|delete``: the gateway's answer as JSON;
    ``topics apply`` is client.cli_topics_apply's."""
    if args.action == "apply":
        from streamgate_client.cli_topics_apply import apply

        return await apply(args)
    async with Admin(args.url, **connection(args)) as admin:
        if args.action == "list":
            write_listing(await admin.list_topics(), args.output)
        elif args.action == "create":
            emit(await admin.create_topic(args.name, args.partitions,
                                          retention_ms=args.retention_ms,
                                          max_length=args.max_length,
                                          key_index=args.key_index, compact=args.compact))
        elif args.action == "grow":
            emit(await admin.grow_topic(args.name, args.partitions, dry_run=args.dry_run))
        elif args.action == "describe":
            emit(await admin.describe_topic(args.name))
        elif args.action == "purge":
            emit(await admin.purge(args.name, args.partition, dry_run=args.dry_run))
        else:
            await admin.delete_topic(args.name)
            emit({"deleted": args.name})
    return 0


async def groups(args: argparse.Namespace) -> int:
    """``groups list|describe|unpark|seek|pause|resume``: the gateway's answer as JSON."""
    async with Admin(args.url, **connection(args)) as admin:
        if args.action == "list":
            write_listing(await admin.list_groups(), args.output)
        elif args.action == "describe":
            described = await admin.describe_group(args.group, args.topic)
            if args.output == "table":
                write_listing(verdict_rows(described), "table")
            else:
                emit(described)
        elif args.action == "unpark":
            emit(await admin.settle_parked_key(args.group, args.topic, args.partition, args.key,
                                               dead_letter=args.dead_letter, reason=args.reason))
        elif args.action == "pause":
            emit(await admin.pause_group(args.group, args.topic, until_ms=pause_until_ms(args)))
        elif args.action == "resume":
            emit(await admin.resume_group(args.group, args.topic))
        else:
            emit(await admin.seek(args.group, args.topic, args.to, dry_run=args.dry_run))
    return 0


def pause_until_ms(args: argparse.Namespace) -> int | None:
    """When a pause ends by itself: ``--until-ms``, or ``--for-s`` from now (None: never)."""
    if args.for_s is not None:
        return int(time.time() * 1000 + args.for_s * 1000)
    return int(args.until_ms) if args.until_ms is not None else None


def verdict_rows(described: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A described group as a row per partition: its position and its owner's verdict (state
    ``unknown`` while none is posted)."""
    rows = []
    for topic in described["topics"]:
        for partition in topic["partitions"]:
            verdict = partition.get("verdict") or {}
            rows.append({"topic": topic["topic"], "partition": partition["partition"],
                         "lag": partition["lag"], "pending": partition["pending"],
                         "state": verdict.get("state", "unknown"),
                         "reason": verdict.get("reason") or "",
                         "warnings": ",".join(verdict.get("warnings", ())),
                         "detail": verdict.get("detail", "")})
    return rows
