"""``streamgate quotas``: who the caller's use counts against, and per quota its cap and use."""

from __future__ import annotations

import argparse
import sys

from streamgate_client.admin import Admin
from streamgate_client.admin_types import Quotas, QuotaUsage
from streamgate_client.cli_contexts import connection
from streamgate_client.output import emit

# the quotas in the order a person reads them, with how each amount is written
_QUOTAS = (("retained_bytes", "bytes"), ("in_flight_messages", "messages"))
_BINARY_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


async def quotas(args: argparse.Namespace) -> int:
    """Print the caller's quotas (``-o table`` or ``json``)."""
    async with Admin(args.url, **connection(args)) as admin:
        answer = await admin.quotas()
    if args.output == "json":
        emit(answer)
    else:
        sys.stdout.write("".join(f"{line}\n" for line in quota_lines(answer)))
    return 0


def quota_lines(answer: Quotas) -> list[str]:
    """The subject, then one aligned line per quota: its use, its cap and the share used."""
    usages = answer.quotas
    lines = [f"subject  {answer.subject}"]
    width = max(len(name) for name, _ in _QUOTAS)
    lines += [f"  {name:<{width}}  {_usage(usages[name], unit)}" for name, unit in _QUOTAS]
    return lines


def _usage(usage: QuotaUsage, unit: str) -> str:
    if usage.limit is None:
        return "no cap"
    used = usage.used or 0
    share = f"{used / usage.limit:.0%}" if usage.limit else "-"
    return f"{_amount(used, unit)} of {_amount(usage.limit, unit)}  ({share})"


def _amount(n: int, unit: str) -> str:
    return human_bytes(n) if unit == "bytes" else f"{n:,}"


def human_bytes(n: int) -> str:
    """A size in bytes in binary units (``7.0 MiB``), as the console writes it."""
    size, unit = float(n), -1
    while size >= 1024 and unit < len(_BINARY_UNITS) - 1:
        size /= 1024
        unit += 1
    return f"{n} B" if unit < 0 else f"{size:.{1 if size < 10 else 0}f} {_BINARY_UNITS[unit]}"
