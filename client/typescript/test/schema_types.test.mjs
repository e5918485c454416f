// The schema registry from the TypeScript client, and `streamgate-types`: TypeScript types
// generated from a topic's JSON Schema, compiled with tsc against values that fit and that do not.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterEach, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { SchemaIncompatibleError, SchemaMismatchError, typesFromSchema } from "../dist/index.js";
import { createTopic, makeClient, runCleanup, url } from "./helpers.mjs";

const run = promisify(execFile);
const PACKAGE = dirname(dirname(fileURLToPath(import.meta.url)));
const TSC = join(PACKAGE, "node_modules", ".bin", "tsc");
const BIN = join(PACKAGE, "bin", "streamgate-types.mjs");

let cleanup = [];
afterEach(async () => {
  await runCleanup(cleanup);
  cleanup = [];
});

const ORDER = {
  type: "object",
  description: "An order as the shop publishes it.",
  properties: {
    id: { type: "string" },
    total: { type: "integer", description: "In cents." },
    status: { enum: ["open", "paid"] },
    kind: { const: "order" },
    note: { type: ["string", "null"] },
    lines: { type: "array", items: { $ref: "#/$defs/line" } },
    point: { type: "array", prefixItems: [{ type: "number" }, { type: "number" }], items: false },
    tags: { type: "object", additionalProperties: { type: "string" } },
    "shipping-address": { type: "object", properties: { city: { type: "string" } },
                          required: ["city"], additionalProperties: false },
    extra: { allOf: [{ type: "string" }] },
  },
  required: ["id", "total", "lines"],
  additionalProperties: false,
  $defs: { line: { type: "object", properties: { sku: { type: "string" },
                                                 qty: { type: "integer" } },
                   required: ["sku", "qty"] } },
};

const USES = `import type { Line, ShopOrders } from "./types.js";
const line: Line = { sku: "pear", qty: 2, gift: true };
export const order: ShopOrders = {
  id: "a", total: 3, status: "paid", kind: "order", note: null, lines: [line], point: [1, 2],
  tags: { a: "b" }, "shipping-address": { city: "Lyon" }, extra: 42,
};
// @ts-expect-error: status is "open" or "paid"
export const badStatus: ShopOrders = { id: "a", total: 1, lines: [], status: "lost" };
// @ts-expect-error: total is required
export const noTotal: ShopOrders = { id: "a", lines: [] };
// @ts-expect-error: a closed object takes no other field
export const extraField: ShopOrders = { id: "a", total: 1, lines: [], colour: "red" };
// @ts-expect-error: a line's qty is a number
export const badLine: Line = { sku: "pear", qty: "two" };
// @ts-expect-error: point is a pair
export const badPoint: ShopOrders = { id: "a", total: 1, lines: [], point: [1, 2, 3] };
`;

async function compiles(directory) {
  await writeFile(join(directory, "tsconfig.json"), JSON.stringify({
    compilerOptions: { strict: true, noEmit: true, target: "ES2022", module: "NodeNext",
                       moduleResolution: "NodeNext", types: [],
                       exactOptionalPropertyTypes: true },
    files: ["uses.ts"],
  }));
  await writeFile(join(directory, "uses.ts"), USES);
  try {
    await run(TSC, ["-p", join(directory, "tsconfig.json")]);
    return "";
  } catch (error) {
    return `${error.stdout}${error.stderr}`;
  }
}

test("Admin registers, lists and reads schema versions; an incompatible one names its changes",
     { timeout: 30_000 }, async () => {
  const topic = await createTopic(1, cleanup);
  const admin = makeClient().admin();
  const first = await admin.registerSchema(topic, ORDER);
  const again = await admin.registerSchema(topic, ORDER, { compatibility: "backward" });
  assert.deepEqual([first.version, again.version], [1, 1]);
  const narrowed = { ...ORDER, required: [...ORDER.required, "status"] };
  const refused = await admin.registerSchema(topic, narrowed).catch((error) => error);
  assert.ok(refused instanceof SchemaIncompatibleError, String(refused));
  assert.equal(refused.compatibility, "backward");
  assert.deepEqual(refused.changes.map((c) => [c.path, c.change]),
                   [["/required", "required_added"]]);
  const listed = await admin.schemas(topic);
  assert.deepEqual(listed.map((v) => [v.version, v.fingerprint]), [[1, first.fingerprint]]);
  assert.deepEqual((await admin.schema(topic, 1)).schema, ORDER);
  assert.equal((await admin.schema(topic)).version, 1);

  const producer = makeClient().producer({ acks: "all", transport: "http" });
  const mismatch = await producer.send(topic, { value: { id: "a", total: "ten", lines: [] } })
    .catch((error) => error);
  await producer.close();
  assert.ok(mismatch instanceof SchemaMismatchError, String(mismatch));
  assert.equal(mismatch.pointer, "/messages/0/value/total");
  assert.equal(mismatch.schemaVersion, 1);
});

test("Admin.validatePublish answers the version or the pointer and writes nothing",
     { timeout: 30_000 }, async () => {
  const topic = await createTopic(1, cleanup);
  const admin = makeClient().admin();
  await admin.registerSchema(topic, ORDER);
  const valid = await admin.validatePublish(topic, [{ key: "k", value: { id: "a", total: 1,
                                                                         lines: [] } }]);
  assert.deepEqual(valid, { dry_run: true, valid: true, messages: 1, schema_version: 1,
                            partitions: [0] });
  const refused = await admin.validatePublish(topic, [
    { value: { id: "a", total: 1, lines: [] } }, { value: { id: "b", total: "ten", lines: [] } },
  ]).catch((error) => error);
  assert.ok(refused instanceof SchemaMismatchError, String(refused));
  assert.equal(refused.pointer, "/messages/1/value/total");
  assert.equal(refused.schemaVersion, 1);
  assert.deepEqual((await admin.readPartition(topic, 0)).messages, []);
});

test("streamgate-types writes types from a topic's schema that tsc compiles and enforces",
     { timeout: 60_000 }, async () => {
  const topic = await createTopic(1, cleanup);
  await makeClient().admin().registerSchema(topic, ORDER);
  const directory = await mkdtemp(join(tmpdir(), "sg-types-"));
  cleanup.push(() => rm(directory, { recursive: true, force: true }));
  const output = join(directory, "types.ts");
  await run(process.execPath, [BIN, url, topic, "--version", "1", "--name", "ShopOrders",
                               "-o", output]);
  const text = await readFile(output, "utf8");
  assert.match(text, new RegExp(`Types of topic ${topic}, schema version 1`));
  assert.match(text, /allOf: not mapped/);
  assert.match(text, /\/\*\* In cents\. \*\//);
  assert.equal(await compiles(directory), "");
});

test("streamgate-types says why when the topic has no schema", { timeout: 30_000 }, async () => {
  const topic = await createTopic(1, cleanup);
  const failed = await run(process.execPath, [BIN, url, topic]).catch((error) => error);
  assert.equal(failed.code, 1);
  assert.match(failed.stderr, /^streamgate-types: 404 /);
});

test("the generator maps each common keyword and leaves the rest unknown", () => {
  const text = typesFromSchema({
    type: "object",
    properties: { a: { type: "integer" }, b: { enum: ["x", 1, null] }, c: { $ref: "#" },
                  d: { $ref: "https://example.com/s.json" }, e: { not: {} },
                  f: { anyOf: [{ type: "string" }, { type: "boolean" }] }, g: {} },
    required: ["a"],
  }, "Root");
  assert.equal(text, [
    "export type Root = {",
    "  a: number;",
    '  b?: "x" | 1 | null;',
    "  c?: Root;",
    '  d?: unknown /* $ref "https://example.com/s.json": not mapped */;',
    "  e?: unknown /* not: not mapped */;",
    "  f?: string | boolean;",
    "  g?: unknown;",
    "  [key: string]: unknown;",
    "};",
    "",
  ].join("\n"));
});
