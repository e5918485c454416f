"""The ``streamgate`` command: ``serve`` runs a gateway; ``dev`` runs the whole local stack on
loopback."""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.auth.cli import add_auth_commands, run_auth_command
from streamgate_client.cli import (
    CLIENT_COMMANDS,
    add_client_commands,
    add_version,
    run_client_command,
)

if TYPE_CHECKING:
    import asyncio
    import ssl

    from aiohttp import web

    from gateway.settings import GatewaySettings

# The server's modules (aiohttp's web, storage, partitioner...) are imported by the functions that
# run a server, not here: client commands, --help and --version start without them.

log = logging.getLogger("streamgate")

DEV_REDIS_BASE_PORT = 7000
DEV_ETCD_CLIENT_PORT = 23790
DEV_ETCD_PEER_PORT = 23800


def access_logger(settings: GatewaySettings) -> logging.Logger | None:
    """aiohttp's access logger when ``access_log`` is on, else None: a line per request at INFO
    costs a large share of a single-message publish's gateway CPU (docs/performance.md has the
    figures), and ``streamgate_http_requests_total`` already counts every request by route, method
    and status."""
    return logging.getLogger("aiohttp.access") if settings.access_log else None


def access_log_options(settings: GatewaySettings) -> dict[str, Any]:
    """The access-log arguments of ``web.run_app``: the logger, and a line format that masks
    query-string credentials."""
    from gateway.observe.access_log import ScrubbingAccessLogger

    return {"access_log": access_logger(settings), "access_log_class": ScrubbingAccessLogger}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``streamgate`` console script."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command in CLIENT_COMMANDS:
        return run_client_command(args, os.environ)
    if args.command == "auth":
        return run_auth_command(args, sys.stdin)
    if args.command == "dev-add-shard":
        return run_add_shard(args)
    return run_server(args)


def run_server(args: argparse.Namespace) -> int:
    """``serve`` (one gateway process, or its workers) or ``dev``; 2 on a bad setting."""
    from gateway.app import create_app
    from gateway.auth.errors import AuthConfigError
    from gateway.settings import ENV_PREFIX, settings_from_env
    from gateway.tls import check_backend_tls, server_ssl_context
    from gateway.workers import run_workers

    try:
        settings = settings_from_env(os.environ).with_overrides(
            host=args.host, port=args.port, workers=getattr(args, "workers", None))
        check_workers(settings)
        check_event_loop(settings)
        if args.command == "dev" and ENV_PREFIX + "AUTH_MODE" not in os.environ:
            # dev is local: auth off, loudly (logged)
            settings = settings.with_overrides(auth_mode="none")
        if args.command == "dev" and not any(ENV_PREFIX + name in os.environ for name in (
                "PUSH_ALLOWED_HOSTS", "PUSH_ALLOWED_CIDRS", "PUSH_ALLOW_HTTP")):
            # dev is local: push subscriptions may call receivers on this machine
            settings = settings.with_overrides(push_allowed_cidrs=("127.0.0.0/8", "::1/128"),
                                               push_allow_http=True)
        ssl_context = server_ssl_context(settings)
        check_backend_tls(settings)
        if args.command == "serve":
            app = create_app(settings, os.environ)
    except (ValueError, AuthConfigError) as exc:
        print(f"streamgate: bad setting: {exc}", file=sys.stderr)
        return 2
    if args.command == "serve" and args.worker_index is None and settings.workers > 1:
        return run_workers(settings.workers, settings, args.log_level, os.environ)
    if args.command == "serve":
        return serve(app, settings, ssl_context, args.worker_index)
    return run_dev(args, settings)


EVENT_LOOPS = ("uvloop", "asyncio")


def check_event_loop(settings: GatewaySettings) -> None:
    """An event loop this build cannot run: ValueError (exit 2)."""
    if settings.event_loop not in EVENT_LOOPS:
        raise ValueError(f"event_loop must be one of {', '.join(EVENT_LOOPS)}, got "
                         f"{settings.event_loop!r}")
    if settings.event_loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        raise ValueError("event_loop=uvloop needs the uvloop package (pip install uvloop), or set "
                         "event_loop=asyncio")


def new_event_loop(settings: GatewaySettings) -> asyncio.AbstractEventLoop:
    """The loop a gateway process runs on: libuv's (uvloop: less gateway CPU per published or
    delivered message than asyncio's, docs/performance.md has the figures) or the standard one."""
    import asyncio

    if settings.event_loop == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def check_workers(settings: GatewaySettings) -> None:
    """Worker settings that cannot work: ValueError (exit 2)."""
    if settings.workers < 1:
        raise ValueError(f"workers must be >= 1, got {settings.workers}")
    if settings.workers > 1 and settings.port == 0:
        raise ValueError("workers > 1 needs a fixed port (each worker binds it with SO_REUSEPORT)")
    if (settings.worker_metrics_port
            and not 0 < settings.worker_metrics_port + settings.workers - 1 < 65536):
        raise ValueError(f"worker_metrics_port {settings.worker_metrics_port} + {settings.workers} "
                         "workers is past port 65535")


def serve(app: web.Application, settings: GatewaySettings, ssl_context: ssl.SSLContext | None,
          worker_index: int | None) -> int:
    """Run one gateway process until SIGTERM/SIGINT; a worker shares the port and may listen on its
    own one."""
    import socket

    from aiohttp import web

    from gateway.gc_tuning import tuned_collector
    from partitioner.errors import PartitionerError
    from storage.errors import StorageError

    extra_sockets: list[socket.socket] = []
    # after the backends opened
    app.cleanup_ctx.append(tuned_collector(settings.gc_young_threshold))
    try:
        if worker_index is not None and settings.worker_metrics_port:
            extra_sockets.append(socket.create_server(
                (settings.host, settings.worker_metrics_port + worker_index)))
        web.run_app(app, host=settings.host, port=settings.port, print=None,
                    ssl_context=ssl_context, reuse_port=worker_index is not None or None,
                    sock=extra_sockets or None, loop=new_event_loop(settings),
                    shutdown_timeout=settings.shutdown_timeout_s, **access_log_options(settings))
    # Redis or etcd unreachable or untrusted at startup
    except (StorageError, PartitionerError) as exc:
        print(f"streamgate: cannot start: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # the port is taken
        print(f"streamgate: cannot listen: {exc}", file=sys.stderr)
        return 1
    return 0


def run_dev(args: argparse.Namespace, settings: GatewaySettings) -> int:
    """Start Redis Cluster + etcd on loopback, then the gateway; stop everything on
    Ctrl-C/SIGTERM."""
    from aiohttp import web

    from gateway.app import create_app
    from gateway.gc_tuning import tuned_collector
    from streamgate_devstack import DevStack, DevStackConfig, MissingBinary
    from streamgate_devstack.memory import default_node_maxmemory, format_size, parse_size
    from streamgate_devstack.scale import add_shard_hook, write_pid

    nodes = args.primaries * (1 + args.replicas)
    try:
        maxmemory = (parse_size(args.redis_maxmemory) if args.redis_maxmemory
                     else default_node_maxmemory(nodes))
    except ValueError as exc:
        print(f"streamgate dev: --redis-maxmemory: {exc}", file=sys.stderr)
        return 2
    config = DevStackConfig(
        data_dir=Path(args.data_dir).resolve(),
        redis_primaries=args.primaries,
        redis_replicas=args.replicas,
        redis_base_port=args.redis_base_port or None,
        redis_maxmemory_bytes=maxmemory,
        cluster_node_timeout_ms=args.cluster_node_timeout_ms,
        etcd_client_port=args.etcd_port or None,
        etcd_peer_port=args.etcd_peer_port or None,
    )
    try:
        with DevStack(config) as stack:
            nodes = tuple(f"{host}:{port}" for host, port in stack.redis_startup_nodes)
            settings = settings.with_overrides(redis_nodes=nodes,
                                               etcd_endpoints=(stack.etcd_endpoint,),
                                               min_insync_replicas=min(args.replicas, 1),
                                               archive_url=dev_archive_url(
                                                   args.archive_url, settings,
                                                   config.data_dir))
            memory = (f"{format_size(maxmemory)} per Redis node (noeviction; publishes answer "
                      f"507 past {settings.publish_memory_watermark:.0%})")
            print(dev_banner(settings, config.data_dir, memory), flush=True)
            app = create_app(settings, os.environ)
            app.on_startup.append(add_shard_hook(stack, config.data_dir))
            app.cleanup_ctx.append(tuned_collector(settings.gc_young_threshold))
            pid_file = write_pid(config.data_dir)
            try:
                web.run_app(app, host=settings.host, port=settings.port, print=None,
                            loop=new_event_loop(settings),
                            shutdown_timeout=settings.shutdown_timeout_s,
                            **access_log_options(settings))
            finally:
                pid_file.unlink(missing_ok=True)
    except MissingBinary as exc:
        print(f"streamgate dev: {exc}", file=sys.stderr)
        return 1
    return 0


def dev_archive_url(flag: str | None, settings: GatewaySettings, data_dir: Path) -> str:
    """The local stack's archive: ``--archive-url`` (``none`` turns it off), else
    STREAMGATE_ARCHIVE_URL, else a directory in the data dir, so that a local stack keeps more
    than its Redis holds."""
    if flag is not None:
        return flag
    if "STREAMGATE_ARCHIVE_URL" in os.environ:
        return settings.archive_url
    return (data_dir / "archive").as_uri()


def run_add_shard(args: argparse.Namespace) -> int:
    """Ask the running `streamgate dev` of a data dir to add a Redis shard, and wait for it."""
    from streamgate_devstack.scale import request_add_shard

    try:
        result = request_add_shard(Path(args.data_dir).resolve())
    except (OSError, RuntimeError, TimeoutError, ValueError) as exc:
        print(f"streamgate dev-add-shard: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


def console_line(settings: GatewaySettings, base: str) -> str:
    """Where the web console is, or why it is not there."""
    from gateway.routes.console import console_is_built

    if not settings.console_enabled:
        return "off (console_enabled=false)"
    if not console_is_built():
        return f"{base}/console/ is not built: run `make console` (needs Node >= 20)"
    return f"{base}/console/   <- open this in a browser"


def dev_banner(settings: GatewaySettings, data_dir: Path, redis_memory: str) -> str:
    """What a developer needs to start using the local stack."""
    base = f"http://{settings.host}:{settings.port}"
    return "\n".join([
        "streamgate dev is up",
        f"  console   {console_line(settings, base)}",
        f"  gateway   {base}   (OpenAPI: {base}/openapi.json, metrics: {base}/metrics)",
        f"  redis     {', '.join(settings.redis_nodes)}",
        f"  memory    {redis_memory}",
        f"  archive   {settings.archive_url}",
        f"  etcd      {', '.join(settings.etcd_endpoints)}",
        f"  data dir  {data_dir}",
        "  auth      "
        f"{'OFF (auth_mode=none)' if settings.auth_mode == 'none' else settings.auth_mode}",
        "try:",
        f"  curl -s -XPOST {base}/v1/topics -H 'content-type: application/json' "
        "-d '{\"name\":\"orders\",\"partitions\":3}'",
        f"  curl -s -XPOST {base}/v1/topics/orders/messages "
        "-H 'content-type: application/json' "
        "-d '{\"acks\":\"all\",\"messages\":[{\"key\":\"alice\",\"value\":{\"total\":42}}]}'",
        f"  curl -s '{base}/v1/topics/orders/partitions/0/messages?from=earliest'",
        "Ctrl-C stops everything; data stays in the data dir.",
    ])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamgate", description=__doc__)
    add_version(parser)
    parser.add_argument("--log-level", default="info",
                        choices=["debug", "info", "warning", "error"])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("serve", "run a gateway against existing Redis Cluster and etcd"),
                            ("dev", "run Redis Cluster, etcd and a gateway on loopback")):
        command = commands.add_parser(name, help=help_text)
        command.add_argument("--host", default=None, help="listen address (default 127.0.0.1)")
        command.add_argument("--port", type=int, default=None, help="listen port (default 8080)")
    serve_command = commands.choices["serve"]
    serve_command.add_argument("--workers", type=int, default=None,
                               help="worker processes sharing the port (default: the workers "
                                    "setting, 1)")
    # set by the parent
    serve_command.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)
    add_client_commands(commands)
    add_auth_commands(commands)
    add_shard = commands.add_parser("dev-add-shard",
                                    help="add a Redis shard to a running `streamgate dev`")
    add_shard.add_argument("--data-dir", default=".streamgate-dev",
                           help="the data dir of the running stack")
    dev = commands.choices["dev"]
    dev.add_argument("--data-dir", default=".streamgate-dev",
                     help="where Redis and etcd keep their data")
    dev.add_argument("--shards", "--primaries", dest="primaries", type=int, default=3,
                     help="Redis Cluster shards (primaries, each with --replicas replicas)")
    dev.add_argument("--replicas", type=int, default=1, help="replicas per primary")
    dev.add_argument("--redis-base-port", type=int, default=DEV_REDIS_BASE_PORT,
                     help="first Redis port (0: free ports, remembered in the data dir)")
    dev.add_argument("--redis-maxmemory", default="", metavar="SIZE",
                     help="each Redis node's memory cap, e.g. 512mb or 2gb (noeviction: a full "
                          "node refuses publishes with 507 and keeps what it has); default: "
                          "half the machine's memory shared by the nodes")
    dev.add_argument("--archive-url", default=None, metavar="URL",
                     help="the archive tier: file:///absolute/path (default: the data "
                          "dir's archive/), s3://bucket/prefix (STREAMGATE_ARCHIVE_S3_* reach "
                          "the store) or none")
    dev.add_argument("--cluster-node-timeout-ms", type=int, default=3000)
    dev.add_argument("--etcd-port", type=int, default=DEV_ETCD_CLIENT_PORT, help="0: a free port")
    dev.add_argument("--etcd-peer-port", type=int, default=DEV_ETCD_PEER_PORT,
                     help="0: a free port")
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
