"""The web console's files under /console/: public (the page holds no data; its API calls carry the
user's credentials), sent with a strict Content-Security-Policy and revalidated by strong ETags."""

from __future__ import annotations

import hashlib
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from aiohttp import web
from aiohttp.helpers import ETAG_ANY

from gateway.errors import Problem

PREFIX = "/console"
# scripts, styles and API calls from this origin only: no inline code, no eval, no framing
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    # the file names carry no content hash: a browser keeps a copy but asks (If-None-Match)
    # before each use, so a new build is picked up at once and an unchanged file costs a 304
    "Cache-Control": "no-cache",
}
CONTENT_TYPES = {
    ".html": "text/html", ".js": "text/javascript", ".css": "text/css",
    ".svg": "image/svg+xml", ".png": "image/png",
}
ENTRY_SCRIPT = ("js", "console", "main.js")


def console_files() -> Traversable:
    """The console's directory in the installed package."""
    return resources.files("gateway").joinpath("console")


def console_file(path: str) -> Traversable | None:
    """The file at ``path`` (relative to the console's directory) if it is one the console serves;
    never anything outside that directory."""
    parts = path.split("/")
    if any(part in ("", ".", "..") or part.startswith(".") for part in parts):
        return None
    if "." + parts[-1].rpartition(".")[2] not in CONTENT_TYPES:
        return None
    found = console_files().joinpath(*parts)
    try:
        return found if found.is_file() else None
    except OSError:  # a name the filesystem refuses (too long, say) names no file of ours
        return None


def console_is_built() -> bool:
    """True when the console's scripts were built into the package (``make console``)."""
    return console_file("/".join(ENTRY_SCRIPT)) is not None


def not_built() -> Problem:
    return Problem(503, "console-not-built", "Console not built",
                   "the console's scripts are not in this installation: run `make console` "
                   "(npm run build:console in client/typescript)")


# (location, modification time, size) -> the file's ETag: each file is hashed once per version
ENTITY_TAGS: dict[tuple[str, int, int], str] = {}


def entity_tag(found: Traversable) -> str:
    """The strong ETag of a console file (a hash of its content), computed once per version of
    it (a rebuild while the gateway runs changes the modification time, so the tag)."""
    version = (str(found), 0, 0)
    if isinstance(found, Path):
        stat = found.stat()
        version = (str(found), stat.st_mtime_ns, stat.st_size)
    tag = ENTITY_TAGS.get(version)
    if tag is None:
        tag = hashlib.sha256(found.read_bytes()).hexdigest()[:32]
        ENTITY_TAGS[version] = tag
    return tag


def not_modified(request: web.Request, tag: str) -> bool:
    """True when the browser's copy is current: ``If-None-Match`` names ``tag`` (compared weakly,
    as that header asks) or ``*``."""
    wanted = request.if_none_match
    return wanted is not None and any(
        candidate.value in (tag, ETAG_ANY) for candidate in wanted)


async def redirect_to_index(request: web.Request) -> web.StreamResponse:
    """GET /console: the console lives at /console/ (its files are relative to it)."""
    raise web.HTTPPermanentRedirect(f"{PREFIX}/")


async def serve_console_file(request: web.Request) -> web.Response:
    """GET /console/{path}: one of the console's files, index.html for the directory itself."""
    path = request.match_info["path"] or "index.html"
    if path == "index.html" and not console_is_built():
        raise not_built()
    found = console_file(path)
    if found is None:
        raise Problem(404, "not-found", "Not found", f"the console has no file {path!r}")
    tag = entity_tag(found)
    response = (web.Response(status=304, headers=SECURITY_HEADERS)
                if not_modified(request, tag) else file_response(found, path))
    response.etag = tag
    return response


def file_response(found: Traversable, path: str) -> web.Response:
    """The file's content with its type and the console's headers."""
    suffix = "." + path.rpartition(".")[2]
    return web.Response(body=found.read_bytes(), content_type=CONTENT_TYPES[suffix],
                        charset="utf-8" if suffix in (".html", ".js", ".css", ".svg") else None,
                        headers=SECURITY_HEADERS)


def is_console_path(path: str) -> bool:
    """True for the console's own files, which are served without credentials."""
    return path == PREFIX or path.startswith(PREFIX + "/")


def add_routes(app: web.Application) -> None:
    """Register the console's routes (only when the console is on)."""
    app.router.add_get(PREFIX, redirect_to_index)
    app.router.add_get(PREFIX + "/{path:.*}", serve_console_file)
