"""``streamgate push create|list|describe|delete|rotate-secret``: push subscriptions, a group whose
member is an HTTP endpoint the gateway POSTs signed messages to."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from streamgate_client.admin import Admin
from streamgate_client.admin_types import PushSecret, PushSubscriptionDescribed
from streamgate_client.cli_contexts import connection
from streamgate_client.output import emit, iso_time, write_listing

SECRET_LINE = "signing secret (shown once): "


async def push(args: argparse.Namespace) -> int:
    """Run one ``push`` action; ``-o json`` prints the gateway's answer as it is."""
    async with Admin(args.url, **connection(args)) as admin:
        if args.action == "create":
            await _create(admin, args)
        elif args.action == "list":
            await _list(admin, args)
        elif args.action == "describe":
            described = await admin.push_subscription(args.topic, args.group)
            if args.output == "json":
                emit(described)
            else:
                _describe_table(described)
        elif args.action == "delete":
            await admin.delete_push(args.topic, args.group)
            emit({"deleted": args.group, "topic": args.topic})
        else:
            await _rotate(admin, args)
    return 0


async def _create(admin: Admin, args: argparse.Namespace) -> None:
    created = await admin.put_push(
        args.topic, args.group, args.endpoint, format=args.format,
        batch_max_messages=args.batch, max_in_flight=args.max_in_flight,
        rate_per_s=args.rate, timeout_ms=args.timeout_ms,
        key_ordered=False if args.no_key_order else None, ack_timeout_ms=args.ack_timeout_ms,
        max_deliveries=args.max_deliveries, retry_backoff_ms=args.retry_backoff_ms,
        start=args.start, headers=dict(args.header) or None, filter=args.filter or None,
        secret=args.secret)
    if args.output == "json":
        emit(created)
        return
    sys.stdout.write(f"push subscription {created.group} of {created.topic} -> "
                     f"{created.endpoint} ({created.format})\n")
    if created.secret is not None:
        sys.stdout.write(f"{SECRET_LINE}{created.secret}\n")


async def _list(admin: Admin, args: argparse.Namespace) -> None:
    found = await admin.push_subscriptions(args.topic)
    if args.output == "json":
        write_listing(found, "json")
        return
    write_listing([{"group": s.group, "endpoint": s.endpoint, "format": s.format,
                    "batch": s.batch_max_messages, "max_in_flight": s.max_in_flight,
                    "key_ordered": s.key_ordered, "paused": s.paused} for s in found],
                  args.output)


async def _rotate(admin: Admin, args: argparse.Namespace) -> None:
    rotation = await admin.rotate_push_secret(args.topic, args.group, secret=args.secret,
                                              previous_expires_in_s=args.keep_old_s)
    if args.output == "json":
        emit(rotation)
        return
    lines = [f"{SECRET_LINE}{rotation.secret}"]
    lines += [f"  {s.id}  {_expiry(s)}" for s in rotation.secrets]
    sys.stdout.write("\n".join(lines) + "\n")


def _expiry(secret: PushSecret) -> str:
    if secret.expires_at_ms is None:
        return "signs until rotated"
    return f"signs until {iso_time(secret.expires_at_ms)}"


def _describe_table(described: PushSubscriptionDescribed) -> None:
    """The definition for a person, then a row per partition with its endpoint's health."""
    fields = {"topic": described.topic, "group": described.group,
              "endpoint": described.endpoint, "format": described.format,
              "batch": described.batch_max_messages, "max_in_flight": described.max_in_flight,
              "rate_per_s": described.rate_per_s or "no cap",
              "timeout_ms": described.timeout_ms, "key_ordered": described.key_ordered,
              "max_deliveries": described.max_deliveries, "start": described.start,
              "headers": ", ".join(described.headers) or "-",
              "filter": ", ".join(described.filter) or "-",
              "secrets": ", ".join(f"{s.id} ({_expiry(s)})" for s in described.secrets),
              "paused": described.paused, "health": described.health.state}
    sys.stdout.write("".join(f"{name:<16}{value}\n" for name, value in fields.items()))
    sys.stdout.flush()
    write_listing(health_rows(described.health.partitions), "table")


def health_rows(partitions: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A row per partition, in partition order: the gateway pushing it, its breaker, failures in a
    row, last status and error, requests in flight (``-`` for a partition no owner reported on
    lately)."""
    rows = []
    for partition, health in sorted(partitions.items(), key=lambda item: int(item[0])):
        known = health or {}
        rows.append({"partition": partition, "node": known.get("node", "-"),
                     "breaker": known.get("breaker", "-"),
                     "failures": known.get("consecutive_failures", "-"),
                     "last_status": known.get("last_status") or "-",
                     "last_error": known.get("last_error") or "",
                     "in_flight": known.get("in_flight", "-")})
    return rows

