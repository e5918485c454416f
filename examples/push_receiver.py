"""A small HTTP server that receives a streamgate push subscription's deliveries, checks their
signatures and prints each message. Run it with
`python examples/push_receiver.py --port 8000 --secret whsec_...` (or STREAMGATE_PUSH_SECRET)."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from urllib.parse import unquote

from aiohttp import web

from streamgate_client import WebhookVerificationError, verify_webhook

Handler = Callable[[web.Request], Awaitable[web.Response]]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: where to listen, the secrets to accept, how often to fail on purpose."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on")
    parser.add_argument("--secret", action="append", default=[],
                        help="a whsec_ secret to accept (repeat during a rotation); default: "
                             "STREAMGATE_PUSH_SECRET (several separated by spaces)")
    parser.add_argument("--fail-every", type=int, default=0, metavar="N",
                        help="answer every N-th request 503, to watch the gateway retry")
    args = parser.parse_args(argv)
    args.secret = args.secret or os.environ.get("STREAMGATE_PUSH_SECRET", "").split()
    if not args.secret:
        parser.error("give --secret or set STREAMGATE_PUSH_SECRET")
    return args


def printed_messages(request: web.Request, body: bytes) -> Iterator[str]:
    """One line per message: the json format's messages, or the one cloudevents message."""
    if request.content_type == "application/json" and "ce-specversion" not in request.headers:
        for message in json.loads(body)["messages"]:
            value = message.get("value", message.get("value_b64"))
            yield (f"{message['topic']}/{message['partition']}@{message['offset']} "
                   f"key={message.get('key')} value={json.dumps(value)}")
        return
    # the CloudEvents HTTP binding percent-encodes attribute values
    attribute = {name.lower(): unquote(value) for name, value in request.headers.items()
                 if name.lower().startswith("ce-")}
    yield (f"{attribute.get('ce-sgtopic')}/{attribute.get('ce-sgpartition')}@"
           f"{attribute.get('ce-sgoffset')} key={attribute.get('ce-partitionkey')} "
           f"type={attribute.get('ce-type')} value={body.decode(errors='replace')}")


def receiver(secrets: list[str], fail_every: int) -> Handler:
    """The request handler: 401 on a bad signature, 503 on purpose now and then, else 204."""
    counter = itertools.count(1)

    async def receive(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            verify_webhook(secrets, request.headers, body)
        except WebhookVerificationError as exc:
            print(f"refused: {exc}", file=sys.stderr, flush=True)
            return web.Response(status=401, text=str(exc))
        if fail_every and next(counter) % fail_every == 0:
            print(f"failing {request.headers['webhook-id']} on purpose", flush=True)
            return web.Response(status=503, headers={"Retry-After": "1"})
        for line in printed_messages(request, body):
            print(line, flush=True)
        return web.Response(status=204)

    return receive


def main(argv: list[str] | None = None) -> None:
    """Serve until interrupted."""
    args = parse_args(argv)
    app = web.Application(client_max_size=32 * 1024 * 1024)
    app.router.add_post("/{tail:.*}", receiver(args.secret, args.fail_every))
    web.run_app(app, host=args.host, port=args.port, print=lambda line: print(line, flush=True))


if __name__ == "__main__":
    main()
