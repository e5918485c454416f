"""The argument parsers of the client commands (standard library only, so that ``--help`` and
``--version`` start without the client's network stack)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TypeAlias

from streamgate_client.cli_contexts import DEFAULT_URL
from streamgate_client.completion import add_completion_command
from streamgate_client.output import FORMAT_HELP, OUTPUTS, compile_format

if TYPE_CHECKING:
    Commands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


def add_client_commands(commands: Commands) -> None:
    """Register the client commands on a sub-command parser (``streamgate``'s or
    ``streamgate-client``'s)."""
    url = argparse.ArgumentParser(add_help=False)
    url.add_argument("--context", default=None, metavar="NAME",
                     help="a saved context (streamgate context); default: the current one")
    add_connection_options(url)
    url.add_argument("--insecure", action="store_true",
                     help="skip TLS verification of the gateway (tests only; warns)")
    messages = argparse.ArgumentParser(add_help=False, parents=[url])
    messages.add_argument("-o", "--output", default="json", choices=OUTPUTS,
                          help="json: one JSON line per message (default); raw: the value alone "
                               "(strings as they are, bytes decoded); table: aligned columns")
    messages.add_argument("-f", "--format", type=compile_format, default=None, metavar="FMT",
                          help=FORMAT_HELP)
    listing = argparse.ArgumentParser(add_help=False, parents=[url])
    listing.add_argument("-o", "--output", default="json", choices=("json", "table", "names"),
                         help="json: one JSON line each (default); table: aligned columns; "
                              "names: one name a line")
    _add_produce(commands, url)
    _add_consume(commands, messages)
    _add_topics(commands, url, listing)
    _add_groups(commands, url, listing)
    _add_reading(commands, url, messages)
    _add_bench(commands, url)
    _add_report(commands, url, "status", "the gateway's version and readiness, its Redis and "
                "etcd checks, its partitions")
    _add_report(commands, url, "quotas",
                "who your use counts against, and each quota's cap and use across gateways")
    _add_schemas(commands, url)
    _add_push(commands, url, listing)
    _add_context(commands)
    add_completion_command(commands)


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """The gateway's URL, credentials and TLS files (each also a variable and a context field)."""
    parser.add_argument("--url", default=None,
                        help=f"gateway base URL (default: $STREAMGATE_URL, else the context's, "
                             f"else {DEFAULT_URL})")
    parser.add_argument("--api-key", default=None,
                        help="API key (default: $STREAMGATE_API_KEY; prefer the variable)")
    parser.add_argument("--token", default=None,
                        help="JWT bearer token (default: $STREAMGATE_TOKEN)")
    parser.add_argument("--ca-file", default=None, metavar="PATH",
                        help="PEM CA certificates the gateway's certificate must chain to "
                             "(default: $STREAMGATE_CA_FILE, else the system's)")
    parser.add_argument("--cert", default=None, metavar="PATH",
                        help="PEM client certificate, for mutual TLS (default: $STREAMGATE_CERT)")
    parser.add_argument("--cert-key", default=None, metavar="PATH",
                        help="PEM private key of --cert when not in its file (default: "
                             "$STREAMGATE_KEY)")


def _add_report(commands: Commands, url: argparse.ArgumentParser, name: str,
                help_text: str) -> None:
    """A command printing one document of the gateway's, for a person or as JSON (``status``:
    client.cli_status; ``quotas``: client.cli_quotas)."""
    report = commands.add_parser(name, parents=[url], help=help_text)
    report.add_argument("-o", "--output", default="table", choices=("table", "json"),
                        help="table: for a person (default); json: one JSON document")


def _add_schemas(commands: Commands, url: argparse.ArgumentParser) -> None:
    """``schemas list|get|register <topic>`` (client.cli_schemas)."""
    shown = argparse.ArgumentParser(add_help=False, parents=[url])
    shown.add_argument("-o", "--output", default="table", choices=("table", "json"),
                       help="table: for a person (default); json: the gateway's documents")
    actions = commands.add_parser(
        "schemas", help="a topic's JSON Schema versions: list, get, register").add_subparsers(
        dest="action", required=True)
    actions.add_parser("list", parents=[shown],
                       help="the topic's versions, oldest first").add_argument("topic")
    get = actions.add_parser("get", parents=[shown], help="one version with its schema")
    get.add_argument("topic")
    get.add_argument("--version", default="latest", help="a number or latest (default)")
    register = actions.add_parser(
        "register", parents=[shown],
        help="register a new version (admin); refused with each incompatible change named")
    register.add_argument("topic")
    register.add_argument("--file", default="-", metavar="PATH",
                          help="the JSON Schema (default: - , stdin)")
    register.add_argument("--compatibility", default=None,
                          choices=("backward", "backward_transitive", "forward",
                                   "forward_transitive", "full", "full_transitive", "none"),
                          help="default: the latest version's mode, else backward")


def _add_push(commands: Commands, url: argparse.ArgumentParser,
              listing: argparse.ArgumentParser) -> None:
    """``push create|list|describe|delete|rotate-secret`` (client.cli_push)."""
    shown = argparse.ArgumentParser(add_help=False, parents=[url])
    shown.add_argument("-o", "--output", default="table", choices=("table", "json"),
                       help="table: for a person (default); json: the gateway's document")
    actions = commands.add_parser(
        "push", help="push subscriptions: a group whose member is an HTTP endpoint, sent signed "
                     "messages").add_subparsers(dest="action", required=True)
    actions.add_parser("list", parents=[listing],
                       help="the topic's push subscriptions, one line each (-o table: aligned "
                            "columns; -o names: their groups)").add_argument("topic")
    _add_push_create(actions, shown)
    actions.add_parser("describe", parents=[shown],
                       help="the subscription and, per partition, its endpoint's health")
    actions.add_parser("delete", parents=[url],
                       help="stop pushing (the group and its positions stay)")
    rotate = actions.add_parser(
        "rotate-secret", parents=[shown],
        help="a new signing secret (shown once); the old one signs beside it for a while")
    rotate.add_argument("--keep-old-s", type=int, default=None, metavar="N",
                        help="the old secret signs this many seconds more (0: stop now; "
                             "default: a day)")
    rotate.add_argument("--secret", default=None, metavar="whsec_...",
                        help="bring your own new secret (default: a new random one)")
    for name in ("describe", "delete", "rotate-secret"):
        actions.choices[name].add_argument("topic")
        actions.choices[name].add_argument("group")


def _add_push_create(actions: Commands, shown: argparse.ArgumentParser) -> None:
    create = actions.add_parser(
        "create", parents=[shown],
        help="create (or replace) a group's push subscription; prints its signing secret once")
    create.add_argument("topic")
    create.add_argument("group")
    create.add_argument("--endpoint", required=True, metavar="URL",
                        help="https URL the gateway POSTs to (the gateway's policy must allow "
                             "it)")
    create.add_argument("--format", default=None, choices=("json", "cloudevents"),
                        help="json: batches of messages (default); cloudevents: binary mode, "
                             "one message a request")
    create.add_argument("--batch", type=int, default=None, metavar="N",
                        help="messages per request at most (json; default 1)")
    create.add_argument("--max-in-flight", type=int, default=None, metavar="N")
    create.add_argument("--rate", type=float, default=None, metavar="R",
                        help="requests per second at most (default: no cap)")
    create.add_argument("--timeout-ms", type=int, default=None, metavar="N")
    create.add_argument("--no-key-order", action="store_true",
                        help="several messages of a key may be in flight at once")
    create.add_argument("--ack-timeout-ms", type=int, default=None, metavar="N")
    create.add_argument("--max-deliveries", type=int, default=None, metavar="N",
                        help="then the message goes to <topic>.dlq")
    create.add_argument("--retry-backoff-ms", type=int, default=None, metavar="N")
    create.add_argument("--start", default=None, choices=("earliest", "latest"),
                        help="where a new group starts (default: latest)")
    create.add_argument("--header", type=request_header, action="append", default=[],
                        metavar="'NAME: VALUE'",
                        help="repeatable: sent with every request (never shown back)")
    create.add_argument("--filter", action="append", default=[], metavar="HEADER:V1,V2",
                        help="repeatable; only messages matching all are pushed")
    create.add_argument("--secret", default=None, metavar="whsec_...",
                        help="bring your own signing secret (default: a new random one)")


def request_header(text: str) -> tuple[str, str]:
    """``push create --header``'s ``Name: value``."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected 'Name: value'")
    return name.strip(), value.strip()


def _add_context(commands: Commands) -> None:
    """``context add|use|list|show|remove`` (handled by client.cli_contexts.context_command)."""
    actions = commands.add_parser(
        "context", help="save gateways with their credentials and TLS files under a name",
        description="Contexts live in $XDG_CONFIG_HOME/streamgate/contexts.toml (else "
                    "~/.config/streamgate/contexts.toml), readable by you alone. A flag or "
                    "variable overrides the context's field; --context NAME picks another "
                    "context than the current one.").add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="save (or replace) a context; the first is current")
    add.add_argument("name")
    add_connection_options(add)
    add.add_argument("--use", action="store_true", help="make it the current context")
    actions.add_parser("use", help="make a context the current one").add_argument("name")
    actions.add_parser("list", help="every context, the current one marked *").add_argument(
        "-o", "--output", default="table", choices=("table", "json"))
    actions.add_parser("show", help="a context's fields (secrets hidden)").add_argument(
        "name", nargs="?", default=None, help="default: the current context")
    actions.add_parser("remove", help="forget a context").add_argument("name")


def _add_produce(commands: Commands, url: argparse.ArgumentParser) -> None:
    produce = commands.add_parser(
        "produce", parents=[url], help="publish messages (arguments, stdin lines or files)",
        description="Publish each VALUE, else each stdin line, as a message (JSON if it parses, "
                    "else a string); prints one JSON line per result.")
    produce.add_argument("topic")
    produce.add_argument("values", nargs="*", metavar="VALUE",
                         help="one message each (JSON if it parses, else a string); none: read "
                              "stdin lines")
    produce.add_argument("-k", "--key", default=None, help="message key (partitioning)")
    produce.add_argument("-K", "--key-delimiter", default=None, metavar="DELIM",
                         help="each stdin line (or VALUE) is KEY<DELIM>VALUE; a line without "
                              "DELIM has no key (or --key)")
    produce.add_argument("--partition", type=int, default=None,
                         help="write to this partition instead of the key's")
    produce.add_argument("--binary", action="store_true",
                         help="send each VALUE or stdin line as bytes (value_b64), never parsed")
    produce.add_argument("--value-file", action="append", default=[], metavar="PATH",
                         help="repeatable: the file's bytes are one message (- reads all of "
                              "stdin)")
    produce.add_argument("--acks", default="1", choices=["0", "1", "all"])
    produce.add_argument("--header", action="append", default=[], metavar="K=V", help="repeatable")
    produce.add_argument("--ttl-ms", type=int, default=None,
                         help="time to live: not delivered once this long has passed")


def _add_consume(commands: Commands, messages: argparse.ArgumentParser) -> None:
    consume = commands.add_parser("consume", parents=[messages],
                                  help="print messages (JSON lines, -o or -f), acking each")
    consume.add_argument("topic")
    consume.add_argument("--group", default=None)
    consume.add_argument("--mode", default=None,
                         choices=["exclusive", "shared", "key_shared", "broadcast"])
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from", dest="from_", default=None, metavar="earliest|latest|CURSOR",
                       help="CURSOR is <partition>:<offset>[,...] (resume after those offsets)")
    start.add_argument("--from-time-ms", type=int, default=None, metavar="MS",
                       help="without a group: from the first message at or after this time "
                            "(epoch ms)")
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
    _add_limits(consume)


def _add_limits(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-messages", type=int, default=None,
                        help="exit after this many messages")
    parser.add_argument("--timeout-s", type=float, default=None,
                        help="exit after this long without a message")


def _listing_command(commands: Commands, name: str, help_text: str,
                     listing: argparse.ArgumentParser) -> Commands:
    """A command of actions, the first of them ``list`` (JSON lines, or ``-o table``)."""
    actions = commands.add_parser(name, help=help_text).add_subparsers(dest="action",
                                                                         required=True)
    actions.add_parser("list", parents=[listing],
                       help=f"one line per {name[:-1]} (-o table: aligned columns)")
    return actions


def _add_topics(commands: Commands, url: argparse.ArgumentParser,
                listing: argparse.ArgumentParser) -> None:
    actions = _listing_command(
        commands, "topics", "list, create, grow, describe, purge, delete and apply topics", listing)
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
    add_dry_run(grow)
    purge = actions.add_parser("purge", parents=[url],
                               help="remove every message (of one partition with --partition); "
                                    "consumer groups move past them")
    purge.add_argument("name")
    purge.add_argument("--partition", type=int, default=None)
    add_dry_run(purge)
    for name in ("describe", "delete"):
        actions.add_parser(name, parents=[url]).add_argument("name")
    _add_topics_apply(actions, url)


def _add_topics_apply(actions: Commands, url: argparse.ArgumentParser) -> None:
    """``topics apply`` (handled by client.cli_topics_apply.apply)."""
    apply = actions.add_parser(
        "apply", parents=[url], help="bring the topics to a declared list (a JSON file)",
        description="Create missing topics, grow partitions and change retention_ms/max_length "
                    "to match FILE ({\"topics\": [{\"name\": ..., \"partitions\": ...}, ...]}); "
                    "never shrinks and never deletes a topic unless it is declared with "
                    "\"state\": \"absent\" or --delete-unlisted is given. One JSON line per "
                    "topic; exit 1 when a change was refused.")
    apply.add_argument("-f", "--file", required=True, metavar="FILE")
    apply.add_argument("--delete-unlisted", action="store_true",
                       help="delete the topics FILE does not list (their .dlq kept with them)")
    apply.add_argument("--dry-run", action="store_true", help="print the steps, change nothing")
    apply.add_argument("--wait-s", type=float, default=0.0,
                       help="retry this long while the gateway cannot answer yet")


def _add_groups(commands: Commands, url: argparse.ArgumentParser,
                listing: argparse.ArgumentParser) -> None:
    actions = _listing_command(commands, "groups",
                               "list, describe, seek, pause, resume consumer groups; unpark a "
                               "parked key", listing)
    describe = actions.add_parser("describe", parents=[url],
                                  help="a group's topics and partitions: positions, pending, "
                                       "verdicts (ok, idle, behind, stalled and why)")
    describe.add_argument("group")
    describe.add_argument("--topic", default=None)
    describe.add_argument("-o", "--output", default="json", choices=("json", "table"),
                          help="table: a row per partition with its lag, pending and verdict")
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
    add_dry_run(seek)
    _add_pause(actions, url)


def _add_pause(actions: Commands, url: argparse.ArgumentParser) -> None:
    pause = actions.add_parser("pause", parents=[url],
                               help="no delivery to the group's members on any gateway until "
                                    "resumed (members stay connected and are told)")
    resume = actions.add_parser("resume", parents=[url],
                                help="a paused group's deliveries go on where they stopped")
    for parser in (pause, resume):
        parser.add_argument("group")
        parser.add_argument("--topic", required=True)
    until = pause.add_mutually_exclusive_group()
    until.add_argument("--until-ms", type=int, default=None,
                       help="resume by itself at this time (epoch ms)")
    until.add_argument("--for-s", type=float, default=None,
                       help="resume by itself after this many seconds")


def _add_reading(commands: Commands, url: argparse.ArgumentParser,
                 messages: argparse.ArgumentParser) -> None:
    """``tail``, ``replay``, ``history``, ``snapshot``, ``peek`` and ``dlq`` (handled in
    client.cli_reading by the functions of the same names)."""
    tail = commands.add_parser("tail", parents=[messages],
                               help="follow a topic from now (a broadcast subscription)")
    tail.add_argument("topic")
    tail.add_argument("--filter", action="append", default=[], metavar="HEADER:V1,V2",
                      help="repeatable; all must match")
    _add_limits(tail)

    replay = commands.add_parser("replay", parents=[messages],
                                 help="print a topic's or a partition's stored messages")
    replay.add_argument("topic")
    replay.add_argument("--partition", type=int, default=None,
                        help="one partition (default: every partition, one after another)")
    start = replay.add_mutually_exclusive_group()
    start.add_argument("--from", dest="from_", default="earliest", metavar="earliest|OFFSET",
                       help="first offset, inclusive")
    start.add_argument("--from-time-ms", type=int, default=None, metavar="MS",
                       help="from the first message at or after this time (epoch ms)")
    replay.add_argument("--max-messages", type=int, default=None)

    history = commands.add_parser("history", parents=[messages],
                                  help="print one key's messages (a topic with a key index)")
    history.add_argument("topic")
    history.add_argument("key")
    history.add_argument("--newest-first", action="store_true")
    history.add_argument("--from", dest="from_", default=None, metavar="OFFSET",
                         help="first offset printed, inclusive")
    history.add_argument("--max-messages", type=int, default=None)

    snapshot = commands.add_parser(
        "snapshot", parents=[messages],
        help="print every key's newest value of a compacted topic, as of one offset per partition "
             "(the cursor to follow on stderr)")
    snapshot.add_argument("topic")
    snapshot.add_argument("--partition", type=int, default=None,
                          help="one partition (default: every partition)")

    peek = commands.add_parser("peek", parents=[messages],
                               help="a group's next messages, without delivering them")
    peek.add_argument("group")
    peek.add_argument("--topic", required=True)
    peek.add_argument("--max-messages", type=int, default=10)
    _add_dlq(commands, url, messages)


def _add_dlq(commands: Commands, url: argparse.ArgumentParser,
             messages: argparse.ArgumentParser) -> None:
    dlq = commands.add_parser("dlq", help="list, redrive or purge a topic's dead letters")
    actions = dlq.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", parents=[messages], help="print the dead letters")
    listing.add_argument("topic", help="the source topic (its dead letters are in <topic>.dlq)")
    listing.add_argument("--max-messages", type=int, default=None)
    redrive = actions.add_parser("redrive", parents=[url],
                                 help="send dead letters back to their topic")
    redrive.add_argument("topic")
    redrive.add_argument("--max-messages", type=int, default=None)
    redrive.add_argument("--rate-per-s", type=int, default=None)
    redrive.add_argument("--letter", type=dead_letter, default=None, metavar="PARTITION:OFFSET",
                         help="only this dead letter (its partition and offset in <topic>.dlq)")
    add_dry_run(redrive)
    purge = actions.add_parser("purge", parents=[url], help="remove the dead letters (admin)")
    purge.add_argument("topic")
    purge.add_argument("--partition", type=int, default=None)
    add_dry_run(purge)


def add_dry_run(parser: argparse.ArgumentParser) -> None:
    """``--dry-run`` on a destructive command: the gateway answers what it would do."""
    parser.add_argument("--dry-run", action="store_true",
                        help="print what it would do, per consumer group; change nothing")


def dead_letter(text: str) -> tuple[int, str]:
    """``--letter``'s ``<partition>:<offset>``."""
    partition, sep, offset = text.partition(":")
    if not sep or not partition.isdigit() or not offset:
        raise argparse.ArgumentTypeError(f"{text!r}: expected <partition>:<offset>, e.g. 0:1700-0")
    return int(partition), offset


def _add_bench(commands: Commands, url: argparse.ArgumentParser) -> None:
    """``bench`` (handled by client.cli_bench.bench)."""
    parser = commands.add_parser("bench", parents=[url],
                                 help="measure publish and subscribe rates and latency")
    parser.add_argument("topic", help="created with --partitions when it does not exist")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=128, help="value bytes per message")
    parser.add_argument("--keys", type=int, default=1000, help="distinct message keys (0: none)")
    parser.add_argument("--acks", default="1", choices=["0", "1", "all"])
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--subscribers", type=int, default=0,
                        help="broadcast subscribers, or members of --group")
    parser.add_argument("--group", default=None,
                        help="subscribers share this exclusive group instead of broadcasting")
