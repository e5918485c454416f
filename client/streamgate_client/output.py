"""The CLI's output on stdout: JSON lines (the default), raw values, aligned tables, or format
strings like kcat's ``-f``."""

from __future__ import annotations

import argparse
import base64
import dataclasses
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

OUTPUTS = ("json", "raw", "table")
FORMAT_HELP = ("print each message by this template instead of -o, like kcat's -f: %%t topic, "
               "%%p partition, %%o offset, %%k key, %%s value, %%T timestamp (ms), %%h headers "
               "(k=v,...), %%%% a percent sign; \\n \\t \\r \\\\ escapes; no newline unless given")

Document = Mapping[str, Any]
MessageWriter = Callable[[Document], None]
Field = Callable[[Document], bytes]

_TABLE_COLUMNS = (("PARTITION", 9), ("OFFSET", 20), ("KEY", 16), ("TIME", 24), ("VALUE", 0))
_TOKENS = re.compile(r"%.|\\.|[^%\\]+|[%\\]", re.DOTALL)
_ESCAPES = {"\\n": b"\n", "\\t": b"\t", "\\r": b"\r", "\\\\": b"\\", "%%": b"%"}


def emit(document: Any) -> None:
    """Write one JSON line to stdout."""
    sys.stdout.write(orjson.dumps(document).decode() + "\n")
    sys.stdout.flush()


def write_bytes(data: bytes) -> None:
    """Write bytes to stdout now (after whatever text went before them)."""
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def value_bytes(message: Document) -> bytes:
    """A message's value alone: a string as it is, binary values decoded, other JSON as JSON."""
    if message.get("value_b64") is not None:
        return base64.b64decode(message["value_b64"])
    value = message.get("value")
    return value.encode() if isinstance(value, str) else orjson.dumps(value)


def _text(item: Any) -> bytes:
    if item is None:
        return b""
    return item.encode() if isinstance(item, str) else orjson.dumps(item)


def _headers(message: Document) -> bytes:
    headers = message.get("headers") or {}
    return ",".join(f"{name}={value}" for name, value in headers.items()).encode()


_FIELDS: dict[str, Field] = {
    "%t": lambda m: _text(m.get("topic")), "%p": lambda m: _text(m.get("partition")),
    "%o": lambda m: _text(m.get("offset")), "%k": lambda m: _text(m.get("key")),
    "%s": value_bytes, "%T": lambda m: _text(m.get("timestamp_ms")), "%h": _headers,
}


def compile_format(template: str) -> list[bytes | Field]:
    """A ``-f`` template as literal bytes and field getters (argparse's ``type``: a template with
    an unknown ``%`` field is a usage error)."""
    parts: list[bytes | Field] = []
    for token in _TOKENS.findall(template):
        if token in _FIELDS:
            parts.append(_FIELDS[token])
        elif token in _ESCAPES:
            parts.append(_ESCAPES[token])
        elif token.startswith("%"):
            raise argparse.ArgumentTypeError(f"unknown format field {token!r} (known: "
                                             f"{' '.join(_FIELDS)} %%)")
        else:
            parts.append(token.encode())
    return parts


def format_writer(parts: Sequence[bytes | Field], topic: str | None = None) -> MessageWriter:
    """Write each message as a compiled ``-f`` template; ``topic`` stands for ``%t`` where the
    message does not name its topic (a replay page's do not)."""
    def write(message: Document) -> None:
        if topic is not None and "topic" not in message:
            message = {**message, "topic": topic}
        write_bytes(b"".join(p if isinstance(p, bytes) else p(message) for p in parts))
    return write


def write_raw(message: Document) -> None:
    """The value alone, one per line (as kcat prints by default)."""
    write_bytes(value_bytes(message) + b"\n")


def iso_time(timestamp_ms: Any) -> str:
    """Epoch milliseconds as UTC ISO 8601 with milliseconds ("" when absent)."""
    if not isinstance(timestamp_ms, int):
        return ""
    moment = datetime.fromtimestamp(timestamp_ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _table_value(message: Document) -> str:
    if message.get("value_b64") is not None:
        return f"base64:{message['value_b64']}"
    value = message.get("value")
    return value if isinstance(value, str) else orjson.dumps(value).decode()


class MessageTable:
    """Messages as aligned columns (partition, offset, key, time, value), the header line first;
    a longer cell pushes the rest of its line, since a stream's widths are never all known."""

    def __init__(self) -> None:
        self._started = False

    def __call__(self, message: Document) -> None:
        if not self._started:
            self._started = True
            self._line([name for name, _ in _TABLE_COLUMNS])
        self._line([str(message.get("partition", "")), str(message.get("offset", "")),
                    str(message.get("key") or ""), iso_time(message.get("timestamp_ms")),
                    _table_value(message)])

    @staticmethod
    def _line(cells: Sequence[str]) -> None:
        widths = [width for _, width in _TABLE_COLUMNS]
        line = "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))
        write_bytes(line.rstrip().encode() + b"\n")


def message_writer(args: argparse.Namespace) -> MessageWriter:
    """The writer of ``-f`` when given, else of ``-o``."""
    if getattr(args, "format", None) is not None:
        return format_writer(args.format, getattr(args, "topic", None))
    output = getattr(args, "output", "json")
    if output == "raw":
        return write_raw
    if output == "table":
        return MessageTable()
    return emit


def as_document(item: Any) -> Document:
    """A listing's row as a mapping (typed results are dataclasses)."""
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return dataclasses.asdict(item)
    return dict(item)


def write_listing(rows: Sequence[Any], output: str) -> None:
    """A listing (topics, groups): JSON lines; with ``table`` one aligned column per field (in
    the order the rows first name them) under an upper-case header; with ``names`` each distinct
    name (or group) on a line, for scripts and shell completion."""
    if output == "names":
        names = (as_document(row) for row in rows)
        found = dict.fromkeys(str(d.get("name", d.get("group", ""))) for d in names)
        write_bytes("".join(f"{name}\n" for name in found if name).encode())
        return
    if output != "table":
        for row in rows:
            emit(row)
        return
    documents = [as_document(row) for row in rows]
    columns = list(dict.fromkeys(name for document in documents for name in document))
    cells = [[name.upper() for name in columns]]
    cells += [[_text(document.get(name)).decode() for name in columns] for document in documents]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    write_bytes(b"".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths,
                                                                           strict=True))
                         .rstrip().encode() + b"\n" for line in cells))
