"""``streamgate schemas list|get|register <topic>``: a topic's JSON Schema versions, one with its
schema, a new one registered from a file or stdin."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import orjson

from streamgate_client.admin import Admin
from streamgate_client.admin_types import SchemaVersion
from streamgate_client.cli_contexts import connection
from streamgate_client.output import emit, iso_time, write_listing


async def schemas(args: argparse.Namespace) -> int:
    """Run one ``schemas`` action (``-o table`` or ``json``)."""
    async with Admin(args.url, **connection(args)) as admin:
        if args.action == "list":
            versions = await admin.schemas(args.topic)
            rows = versions if args.output == "json" else [_row(v) for v in versions]
            write_listing(rows, args.output)
            return 0
        if args.action == "get":
            version = args.version if args.version == "latest" else int(args.version)
            _show(await admin.schema(args.topic, version), args.output)
            return 0
        schema = await _read_schema(args.file)
        _show(await admin.register_schema(args.topic, schema, compatibility=args.compatibility),
              args.output)
        return 0


def _row(version: Any) -> dict[str, Any]:
    """A version as a table row: its time written for a person."""
    return {"version": version.version, "compatibility": version.compatibility,
            "fingerprint": version.fingerprint[:12], "created": iso_time(version.created_at_ms),
            "created_by": version.created_by}


def _show(version: SchemaVersion, output: str) -> None:
    if output == "json":
        emit(version)
        return
    lines = [f"{name:<14}{value}" for name, value in _row(version).items()]
    schema = orjson.dumps(version.schema, option=orjson.OPT_INDENT_2).decode()
    sys.stdout.write("\n".join([*lines, "schema", schema]) + "\n")


async def _read_schema(path: str) -> dict[str, Any]:
    """The schema document of ``--file`` (``-`` or none: stdin); a JSON object."""
    if path == "-":
        text = await asyncio.to_thread(sys.stdin.buffer.read)
    else:
        text = await asyncio.to_thread(Path(path).read_bytes)
    try:
        schema = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise ValueError(f"{path}: a schema is a JSON object")
    return schema
