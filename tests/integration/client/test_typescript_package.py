"""The TypeScript client as its users get it: ``npm pack`` builds a tarball of the compiled modules,
their type declarations, package.json, the README and the LICENSE, whose manifest says what a
registry shows (license, repository, exports with types), and a fresh Node project that installs it
(offline: it has no runtime dependencies) imports it by its name, type-checks against it, and
publishes and consumes through a real gateway process.

Node and npm are needed, and the dev dependencies that ``make node-deps`` installs (tsc, and ``ws``
for Node 20's missing WebSocket): missing, the test skips locally and fails in CI.
"""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest
from node_package import PACKAGE, dist_lock, require_node, run

WS = PACKAGE / "node_modules" / "ws"
TSC = PACKAGE / "node_modules" / ".bin" / "tsc"

APP = """
import { createRequire } from "node:module";
import WebSocket from "ws";
import { Client, ProblemError } from "@streamgate/client";

const { version } = createRequire(import.meta.url)("@streamgate/client/package.json");

setTimeout(() => { console.error("timed out"); process.exit(2); }, 30_000).unref();
const client = new Client({ url: process.env.STREAMGATE_URL, WebSocket });
const admin = client.admin();
const topic = `packed-${Date.now()}`;
await admin.createTopic({ name: topic, partitions: 2 });
try {
  const subscription = client.subscribe({ topic, group: "packed" });
  const producer = client.producer({ acks: "all" });
  const sent = await producer.send(topic, { key: "k", value: { hello: "packed" },
                                            headers: { via: "tarball" } });
  await producer.close();
  const { value: message } = await subscription.next();
  message.ack();
  await subscription.close();
  const missing = await admin.describeTopic(`${topic}-absent`).catch((error) => error);
  console.log(JSON.stringify({
    sent: [sent.partition, sent.offset], got: [message.partition, message.offset],
    value: message.value, headers: message.headers,
    missing: missing instanceof ProblemError ? missing.status : String(missing), version,
  }));
} finally {
  await admin.deleteTopic(topic);
}
"""

# compiled against the installed declarations: the names a TypeScript user imports
TYPED = """
import { Client, ProblemError, type openapi, type ParkedKey, type Topic } from "@streamgate/client";

const client = new Client({ url: "http://127.0.0.1:1" });
export const topics: Promise<Topic[]> = client.admin().listTopics();
export const page: openapi.ReplayPage = { messages: [], next_offset: "0-0" };
export const parked: ParkedKey = { key: null, offset: "1-0", sinceMs: 0 };
export const failed = (error: unknown): boolean => error instanceof ProblemError;
"""

TSCONFIG = {"compilerOptions": {
    "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext",
    "lib": ["ES2022", "DOM"], "types": [], "strict": True, "noEmit": True},
    "files": ["typed.ts"]}


def pack(into: Path) -> Path:
    """``npm pack`` (its prepack script builds dist/ afresh) into ``into``: the tarball."""
    with dist_lock(exclusive=True):
        packed = run(["npm", "pack", "--pack-destination", str(into)], timeout_s=180)
    assert packed.returncode == 0, packed.stdout
    [tarball] = into.glob("*.tgz")
    return tarball


def packed_names(tarball: Path) -> set[str]:
    with tarfile.open(tarball) as archive:
        return {name.removeprefix("package/") for name in archive.getnames()}


def packed_manifest(tarball: Path) -> dict[str, Any]:
    """The package.json inside the tarball, as a registry would show it."""
    with tarfile.open(tarball) as archive:
        member = archive.extractfile("package/package.json")
        assert member is not None
        manifest: dict[str, Any] = json.load(member)
    return manifest


def export_targets(exports: dict[str, Any]) -> dict[str, set[str]]:
    """Each subpath of ``exports`` -> the files its conditions point to, without the leading
    ``./``."""
    def targets(entry: str | dict[str, Any]) -> set[str]:
        if isinstance(entry, str):
            return {entry.removeprefix("./")}
        return set().union(*(targets(value) for value in entry.values()))
    return {subpath: targets(entry) for subpath, entry in exports.items()}


def check_manifest(manifest: dict[str, Any], names: set[str]) -> None:
    """Publishable as it is: licensed, pointing at its sources, every export a packed file."""
    assert "private" not in manifest, manifest
    assert manifest["license"] == "Apache-2.0"
    assert manifest["repository"] == {
        "type": "git", "url": "git+https://github.com/streamgate/streamgate.git",
        "directory": "client/typescript"}
    assert manifest["homepage"].startswith("https://github.com/streamgate/streamgate/")
    assert manifest["bugs"]["url"] == "https://github.com/streamgate/streamgate/issues"
    assert manifest["exports"]["."]["types"] == manifest["types"] == "./dist/index.d.ts"
    targets = export_targets(manifest["exports"])
    assert set(targets) == {".", "./package.json"}, sorted(targets)
    assert set().union(*targets.values()) <= names, targets


def install(tarball: Path, app: Path) -> None:
    """A fresh project of ES modules that installs the tarball and the dev ``ws``, offline."""
    app.mkdir()
    (app / "package.json").write_text(json.dumps(
        {"name": "packed-app", "private": True, "type": "module"}))
    installed = run(["npm", "install", "--offline", "--no-audit", "--no-fund", str(tarball),
                     str(WS)], timeout_s=120, cwd=app,
                    env=os.environ | {"npm_config_cache": str(app.parent / "npm-cache")})
    assert installed.returncode == 0, installed.stdout


def type_check(app: Path) -> None:
    """``tsc`` over a TypeScript module of the app that uses the installed declarations."""
    (app / "typed.ts").write_text(TYPED)
    (app / "tsconfig.json").write_text(json.dumps(TSCONFIG))
    typed = run([str(TSC), "-p", str(app)], timeout_s=120, cwd=app)
    assert typed.returncode == 0, typed.stdout


def run_app(app: Path, gateway_url: str) -> dict[str, Any]:
    """The app's round trip through the gateway: the JSON line it reports."""
    (app / "app.mjs").write_text(APP)
    done = run(["node", "app.mjs"], timeout_s=60, cwd=app,
               env=os.environ | {"STREAMGATE_URL": gateway_url, "NODE_NO_WARNINGS": "1"})
    assert done.returncode == 0, done.stdout
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.timeout(300)
def test_packed_client_installs_offline_and_works(
        served_gateway: str, tmp_path: Path, report_missing: Callable[[str], NoReturn]) -> None:
    require_node(report_missing)
    if not (TSC.is_file() and WS.is_dir()):
        report_missing("client/typescript has no node_modules: run `make node-deps`")
    tarball = pack(tmp_path)

    names = packed_names(tarball)
    modules = {path.stem for path in (PACKAGE / "src").glob("*.ts")}
    assert names == {"package.json", "README.md", "LICENSE", "bin/streamgate-types.mjs"} | {
        f"dist/{m}.js" for m in modules} | {f"dist/{m}.d.ts" for m in modules}, sorted(names)
    manifest = packed_manifest(tarball)
    check_manifest(manifest, names)
    assert set(manifest["bin"].values()) <= {f"./{name}" for name in names}, manifest["bin"]

    app = tmp_path / "app"
    install(tarball, app)
    installed = json.loads(
        (app / "node_modules" / "@streamgate" / "client" / "package.json").read_text())
    assert installed.get("dependencies", {}) == {}, installed
    type_check(app)

    report = run_app(app, served_gateway)
    assert report["got"] == report["sent"]
    assert report["value"] == {"hello": "packed"}
    assert report["headers"] == {"via": "tarball"}
    assert report["missing"] == 404
    assert report["version"] == manifest["version"]
