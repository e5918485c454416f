"""``streamgate auth hash-key``: make a new API key (or hash an existing one) for the auth
config."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from gateway.auth.keys import hash_api_key, new_api_key


def add_auth_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``auth`` and its sub-commands on the ``streamgate`` sub-command parser."""
    auth = commands.add_parser("auth", help="authentication helpers")
    actions = auth.add_subparsers(dest="auth_action", required=True)
    hash_key = actions.add_parser("hash-key",
                                  help="print a new random API key and the [[api_keys]] entry "
                                                   "(its SHA-256) for the auth config")
    hash_key.add_argument("--principal", default="PRINCIPAL",
                          help="the principal the key authenticates")
    hash_key.add_argument("--stdin", action="store_true",
                          help="hash the key read from stdin instead")


def run_auth_command(args: argparse.Namespace, stdin: TextIO) -> int:
    """Print the key (unless it came from stdin) and the TOML to paste into the auth config."""
    key = stdin.readline().strip() if args.stdin else new_api_key()
    if not key:
        print("streamgate auth hash-key: no key on stdin", file=sys.stderr)
        return 2
    # not as a TOML comment: pasted into the config, the key would sit there in clear
    if not args.stdin:
        print(f"API key for {args.principal} (give it to the client; it is stored nowhere): {key}")
        print()
    print("[[api_keys]]")
    print(f'principal = "{args.principal}"')
    print(f'sha256 = "{hash_api_key(key)}"')
    return 0
