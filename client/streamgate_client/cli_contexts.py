"""Saved contexts (as ``nats context`` and ``rpk profile``): named gateways with their credentials
and TLS files, in ``$XDG_CONFIG_HOME/streamgate/contexts.toml`` (else ``~/.config/...``), mode 0600;
and how a command's connection settings are resolved: flag > variable > context > default."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl

DEFAULT_URL = "http://127.0.0.1:8080"
# a context's fields: the option's dest, its environment variable, and whether it is a secret
FIELDS = (("url", "STREAMGATE_URL", False), ("token", "STREAMGATE_TOKEN", True),
          ("api_key", "STREAMGATE_API_KEY", True), ("ca_file", "STREAMGATE_CA_FILE", False),
          ("cert", "STREAMGATE_CERT", False), ("cert_key", "STREAMGATE_KEY", False))
SECRETS = frozenset(name for name, _, secret in FIELDS if secret)
HIDDEN = "(set)"

Contexts = dict[str, dict[str, str]]


class ContextError(ValueError):
    """A context that does not exist, or a contexts file that does not parse."""


def config_path(env: Mapping[str, str]) -> Path:
    """Where the contexts live: under ``$XDG_CONFIG_HOME``, else ``~/.config``."""
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "streamgate" / "contexts.toml"


def load(path: Path) -> tuple[str | None, Contexts]:
    """The current context's name and every context; none when the file does not exist."""
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, {}
    except tomllib.TOMLDecodeError as exc:
        raise ContextError(f"{path}: {exc}") from exc
    contexts = {name: {k: str(v) for k, v in fields.items()}
                for name, fields in document.get("contexts", {}).items()}
    current = document.get("current")
    return (current if isinstance(current, str) else None), contexts


def save(path: Path, current: str | None, contexts: Contexts) -> None:
    """Write the file as TOML (strings written as JSON strings, which TOML reads alike), readable
    by its owner alone since it may hold tokens; replaced in one rename."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    lines = [] if current is None else [f"current = {json.dumps(current)}", ""]
    for name, fields in contexts.items():
        lines.append(f"[contexts.{json.dumps(name)}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in fields.items()]
        lines.append("")
    staged = path.with_name(path.name + ".tmp")
    descriptor = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write("\n".join(lines))
    os.replace(staged, path)


def resolve(args: argparse.Namespace, env: Mapping[str, str]) -> None:
    """Fill each connection field of ``args``: its flag, else its variable, else ``--context``'s
    (else the current context's) value, else the default."""
    current, contexts = load(config_path(env))
    name = getattr(args, "context", None) or current
    if name is not None and name not in contexts:
        if getattr(args, "context", None):
            raise ContextError(f"no context named {name!r} (streamgate context list)")
        name = None
    saved = contexts.get(name, {}) if name is not None else {}
    for field, variable, _ in FIELDS:
        value = getattr(args, field, None) or env.get(variable) or saved.get(field)
        setattr(args, field, value or None)
    args.url = args.url or DEFAULT_URL


def shown(fields: Mapping[str, str]) -> dict[str, str]:
    """A context as printed: secrets replaced by a mark that they are set."""
    return {key: HIDDEN if key in SECRETS else value for key, value in fields.items()}


# --- the context command --------------------------------------------------------------------------
def context_command(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """``streamgate context add|use|list|show|remove``; 1 with a message for a missing name."""
    path = config_path(env)
    try:
        current, contexts = load(path)
        return _ACTIONS[args.action](args, path, current, contexts)
    except ContextError as exc:
        print(f"streamgate context {args.action}: {exc}", file=sys.stderr)
        return 1


def _add(args: argparse.Namespace, path: Path, current: str | None, contexts: Contexts) -> int:
    fields = {field: getattr(args, field) for field, _, _ in FIELDS if getattr(args, field)}
    for field in ("ca_file", "cert", "cert_key"):
        if field in fields:
            fields[field] = str(Path(fields[field]).expanduser().resolve())
    contexts[args.name] = fields
    chosen = current if current in contexts and not args.use else args.name
    save(path, chosen, contexts)
    print(f"context {args.name!r} saved in {path}" + (" (current)" if chosen == args.name else ""),
          file=sys.stderr)
    return 0


def _use(args: argparse.Namespace, path: Path, current: str | None, contexts: Contexts) -> int:
    _known(args.name, contexts)
    save(path, args.name, contexts)
    return 0


def _remove(args: argparse.Namespace, path: Path, current: str | None,
            contexts: Contexts) -> int:
    _known(args.name, contexts)
    del contexts[args.name]
    save(path, None if current == args.name else current, contexts)
    return 0


def _list(args: argparse.Namespace, path: Path, current: str | None, contexts: Contexts) -> int:
    if args.output == "json":
        for name, fields in contexts.items():
            row = {"name": name, "current": name == current,
                   "url": fields.get("url", DEFAULT_URL)}
            sys.stdout.write(json.dumps(row) + "\n")
        return 0
    width = max([len(name) for name in contexts] + [4])
    sys.stdout.write(f"  {'NAME':<{width}}  URL\n")
    for name, fields in contexts.items():
        mark = "*" if name == current else " "
        sys.stdout.write(f"{mark} {name:<{width}}  {fields.get('url', DEFAULT_URL)}\n")
    return 0


def _show(args: argparse.Namespace, path: Path, current: str | None, contexts: Contexts) -> int:
    name = args.name or current
    if name is None:
        raise ContextError("no current context (streamgate context use NAME)")
    _known(name, contexts)
    document: dict[str, Any] = {"name": name, "current": name == current,
                                **shown(contexts[name])}
    sys.stdout.write(json.dumps(document) + "\n")
    return 0


def _known(name: str, contexts: Contexts) -> None:
    if name not in contexts:
        raise ContextError(f"no context named {name!r} (streamgate context list)")


_ACTIONS = {"add": _add, "use": _use, "remove": _remove, "list": _list, "show": _show}


# --- TLS ------------------------------------------------------------------------------------------
def ssl_of(args: argparse.Namespace) -> ssl.SSLContext | bool | None:
    """The ``ssl=`` of the clients: False with ``--insecure`` (said on stderr), a context trusting
    ``--ca-file`` and presenting ``--cert``, else None (the system's CAs)."""
    import ssl as tls

    if getattr(args, "insecure", False):
        print("streamgate: --insecure: the gateway's TLS certificate is NOT verified",
              file=sys.stderr)
        return False
    if not (args.ca_file or args.cert):
        return None
    try:
        context = tls.create_default_context(cafile=args.ca_file)
        if args.cert:
            context.load_cert_chain(args.cert, args.cert_key)
    except OSError as exc:  # ssl.SSLError too: a file that is not PEM, a key not the cert's
        raise ValueError(f"the TLS files (--ca-file, --cert, --cert-key): {exc}") from exc
    return context


def connection(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of ``Producer``, ``Consumer`` and ``Admin`` after ``resolve``."""
    return {"api_key": args.api_key, "token": args.token, "ssl": args.ssl}
