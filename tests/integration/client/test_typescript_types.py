"""The TypeScript client's request and answer types come from the gateway's OpenAPI document:
src/openapi.gen.ts is what scripts/openapi-types.mjs makes of gateway/openapi.json, and a document
that drifts from what the client sends and reads fails the client's type check.

Node is needed (and, for the type check, the dev dependencies ``make node-deps`` installs): missing,
the tests skip locally and fail in CI.
"""

from __future__ import annotations

import copy
import difflib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest
from node_package import PACKAGE, require_node, run

DOCUMENT = PACKAGE.parents[1] / "gateway" / "openapi.json"
GENERATED = PACKAGE / "src" / "openapi.gen.ts"
GENERATOR = "scripts/openapi-types.mjs"
TSC = PACKAGE / "node_modules" / ".bin" / "tsc"

Schemas = dict[str, Any]


def generate(document: Path, output: Path) -> str:
    done = run(["node", GENERATOR, str(document), str(output)], timeout_s=60)
    assert done.returncode == 0, done.stdout
    return output.read_text()


def test_committed_types_match_the_generator(
        tmp_path: Path, report_missing: Callable[[str], NoReturn]) -> None:
    require_node(report_missing)
    made = generate(DOCUMENT, tmp_path / "openapi.gen.ts")
    committed = GENERATED.read_text()
    diff = "".join(difflib.unified_diff(committed.splitlines(True), made.splitlines(True),
                                        "src/openapi.gen.ts", "generated", n=1))
    assert made == committed, (
        "src/openapi.gen.ts is stale: run `npm run gen:types` in client/typescript\n" + diff[:4000])


def rename(schema: Schemas, old: str, new: str) -> None:
    schema["properties"][new] = schema["properties"].pop(old)
    schema["required"] = [new if name == old else name for name in schema.get("required", [])]


def publish_result(schemas: Schemas) -> Schemas:
    item: Schemas = schemas["PublishResults"]["properties"]["results"]["items"]
    return item


# each a change of the document that leaves the client wrong: the type check must say so
DRIFTS: dict[str, Callable[[Schemas], None]] = {
    "a topic field renamed": lambda s: rename(s["Topic"], "retention_ms", "retention_s"),
    "a replayed message's time as a string": lambda s: s["MessageOut"]["properties"][
        "timestamp_ms"].update(type="string"),
    "a publish result's offset no longer always given": lambda s: publish_result(s)[
        "required"].remove("offset"),
    "a message field the client sends removed": lambda s: s["MessageIn"]["properties"].pop(
        "ttl_ms"),
    "an acks value the client offers removed": lambda s: s["PublishRequest"]["properties"][
        "acks"]["enum"].remove("all"),
    "a problem's pointer as a number": lambda s: s["Problem"]["properties"]["pointer"].update(
        type="integer"),
    "a parked key's time as a string": lambda s: s["GroupPartition"]["properties"][
        "parked_keys"]["items"]["properties"]["since_ms"].update(type="string"),
}


@pytest.mark.parametrize("drift", [None, *DRIFTS], ids=["unchanged", *DRIFTS])
def test_drifted_document_fails_the_type_check(
        drift: str | None, tmp_path: Path, report_missing: Callable[[str], NoReturn]) -> None:
    require_node(report_missing)
    if not TSC.is_file():
        report_missing("client/typescript has no node_modules: run `make node-deps`")
    document = copy.deepcopy(json.loads(DOCUMENT.read_text()))
    if drift is not None:
        DRIFTS[drift](document["components"]["schemas"])
    (tmp_path / "openapi.json").write_text(json.dumps(document))
    shutil.copytree(PACKAGE / "src", tmp_path / "src",
                    ignore=shutil.ignore_patterns("openapi.gen.ts"))
    generate(tmp_path / "openapi.json", tmp_path / "src" / "openapi.gen.ts")
    config = json.loads((PACKAGE / "tsconfig.json").read_text())
    config["compilerOptions"] |= {"noEmit": True, "declaration": False}
    (tmp_path / "tsconfig.json").write_text(json.dumps(config))

    checked = run([str(TSC), "-p", str(tmp_path / "tsconfig.json")], timeout_s=120)
    if drift is None:
        assert checked.returncode == 0, checked.stdout
    else:
        assert checked.returncode != 0, f"tsc accepted the client against a document where {drift}"
        errors = [line for line in checked.stdout.splitlines() if "error TS" in line]
        assert errors, checked.stdout
        # the client's code is what no longer fits, not the generated types themselves
        assert all("openapi.gen.ts" not in line for line in errors), checked.stdout
