"""Entry points of the client commands (of ``streamgate`` and ``streamgate-client``): a command's
handler, and aiohttp with it, is imported when that command runs (client.cli_args has the parsers),
so ``--help`` and ``--version`` start at once; a closed stdout ends a command quietly."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from streamgate_client.cli_args import add_client_commands

__all__ = ["CLIENT_COMMANDS", "add_client_commands", "add_version", "installed_version", "main",
           "run_client_command"]

Handler = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]
# command -> the module and function that run it
_COMMANDS = "streamgate_client.cli_commands"
_READING = "streamgate_client.cli_reading"
_HANDLERS = {
    "produce": (_COMMANDS, "produce"), "consume": (_COMMANDS, "consume"),
    "topics": (_COMMANDS, "topics"), "groups": (_COMMANDS, "groups"),
    "tail": (_READING, "tail"), "replay": (_READING, "replay"),
    "history": (_READING, "history"), "snapshot": (_READING, "snapshot"),
    "peek": (_READING, "peek"), "dlq": (_READING, "dlq"),
    "bench": ("streamgate_client.cli_bench", "bench"),
    "status": ("streamgate_client.cli_status", "status"),
    "quotas": ("streamgate_client.cli_quotas", "quotas"),
    "schemas": ("streamgate_client.cli_schemas", "schemas"),
    "push": ("streamgate_client.cli_push", "push"),
}
CLIENT_COMMANDS = frozenset({*_HANDLERS, "completion", "context"})
# what a process killed by SIGPIPE reports (128 + 13), as kcat and coreutils do under `| head`
CLOSED_PIPE_STATUS = 141


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        sys.stdout.write(f"{parser.prog} {installed_version()}\n")
        parser.exit()


def add_version(parser: argparse.ArgumentParser) -> None:
    """``--version``: the installed distribution's version (the server's or the client's own)."""
    parser.add_argument("--version", action=_VersionAction,
                        help="print the installed version and exit")


def installed_version() -> str:
    """The version of the installed ``streamgate`` or ``streamgate-client`` distribution."""
    import importlib.metadata

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
    """Run one client command; 0 on success, 1 on a gateway or connection error, 141 when stdout
    was closed (``| head``), quietly.

    The gateway, credentials and TLS files: each flag, else its variable in ``env``
    (``$STREAMGATE_URL``...), else the field of ``--context`` or of the current context, else
    the default (client.cli_contexts).
    """
    try:
        if args.command == "completion":
            from streamgate_client.completion import completion_script

            sys.stdout.write(completion_script(args.shell, args.completion_commands))
            sys.stdout.flush()
            return 0
        if args.command == "context":
            from streamgate_client.cli_contexts import context_command

            return context_command(args, env or {})
        return _run_handler(args, env or {})
    except BrokenPipeError:
        return closed_stdout()


def _run_handler(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    import asyncio

    from streamgate_client.cli_contexts import resolve, ssl_of
    from streamgate_client.errors import ClientError, ProblemError

    module, name = _HANDLERS[args.command]
    command: Handler = getattr(importlib.import_module(module), name)
    try:
        resolve(args, env)
        args.ssl = ssl_of(args)
        return asyncio.run(command(args))
    except ProblemError as exc:
        print(f"streamgate {args.command}: {exc.describe()}", file=sys.stderr)
    except BrokenPipeError:
        raise  # run_client_command's: the reader went away
    except (ClientError, ValueError, OSError) as exc:  # OSError: a --value-file
        print(f"streamgate {args.command}: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return 1


def closed_stdout() -> int:
    """The reader of stdout went away: point stdout at /dev/null, so that the interpreter's last
    flush does not print a traceback either, and report it as SIGPIPE would."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return CLOSED_PIPE_STATUS
