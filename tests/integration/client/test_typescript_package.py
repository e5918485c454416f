"""The TypeScript client as its users get it: ``npm pack`` builds a tarball of the compiled modules,
their type declarations, package.json and the README, and a fresh Node project that installs it
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
import WebSocket from "ws";
import { Client, ProblemError } from "@streamgate/client";

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
    missing: missing instanceof ProblemError ? missing.status : String(missing),
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


def install(tarball: Path, app: Path) -> None:
    """A fresh project of ES modules that installs the tarball and the dev ``ws``, offline."""
    app.mkdir()
    (app / "package.json").write_text(json.dumps(
        {"name": "packed-app", "private": True, "type": "module"}))
    installed = run(["npm", "install", "--offline", "--no-audit", "--no-fund", str(tarball),
                     str(WS)], timeout_s=120, cwd=app,
                    env=os.environ | {"npm_config_cache": str(app.parent / "npm-cache")})
    assert installed.returncode == 0, installed.stdout


@pytest.mark.timeout(300)
def test_packed_client_installs_offline_and_works(
        served_gateway: str, tmp_path: Path, report_missing: Callable[[str], NoReturn]) -> None:
    require_node(report_missing)
    if not (TSC.is_file() and WS.is_dir()):
        report_missing("client/typescript has no node_modules: run `make node-deps`")
    tarball = pack(tmp_path)

    names = packed_names(tarball)
    modules = {path.stem for path in (PACKAGE / "src").glob("*.ts")}
    assert names == {"package.json", "README.md"} | {f"dist/{m}.js" for m in modules} | {
        f"dist/{m}.d.ts" for m in modules}, sorted(names)

    app = tmp_path / "app"
    install(tarball, app)
    manifest: dict[str, Any] = json.loads(
        (app / "node_modules" / "@streamgate" / "client" / "package.json").read_text())
    assert manifest.get("dependencies", {}) == {}, manifest
    (app / "typed.ts").write_text(TYPED)
    (app / "tsconfig.json").write_text(json.dumps(TSCONFIG))
    typed = run([str(TSC), "-p", str(app)], timeout_s=120, cwd=app)
    assert typed.returncode == 0, typed.stdout

    (app / "app.mjs").write_text(APP)
    done = run(["node", "app.mjs"], timeout_s=60, cwd=app,
               env=os.environ | {"STREAMGATE_URL": served_gateway, "NODE_NO_WARNINGS": "1"})
    assert done.returncode == 0, done.stdout
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["got"] == report["sent"]
    assert report["value"] == {"hello": "packed"}
    assert report["headers"] == {"via": "tarball"}
    assert report["missing"] == 404
