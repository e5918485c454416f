// The client's pure parts, no gateway needed: close codes to typed errors, message encoding,
// cursors, backoff bounds, when a token is due for refresh.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  AuthError, ForbiddenError, ProblemError, SubscriptionClosedError, closeError, encodeMessage,
  formatCursor, parseCursor,
} from "../dist/index.js";
import { Backoff } from "../dist/backoff.js";
import { refreshDueMs } from "../dist/token_refresh.js";

test("close codes that reconnecting cannot fix map to typed errors", () => {
  const expired = closeError(4401, "token expired");
  assert.ok(expired instanceof AuthError && expired instanceof ProblemError);
  assert.equal(expired.closeCode, 4401);
  assert.equal(expired.status, 401);
  assert.equal(expired.detail, "token expired");
  const forbidden = closeError(4403, "");
  assert.ok(forbidden instanceof ForbiddenError);
  assert.equal(forbidden.closeCode, 4403);
  assert.equal(forbidden.retriable, false);
  const gone = closeError(4404, "topic deleted");
  assert.ok(gone instanceof SubscriptionClosedError);
  assert.equal(gone.code, 4404);
  assert.equal(closeError(4409, "other settings").code, 4409);
});

test("messages encode to the gateway's field names, binary values as base64", () => {
  assert.deepEqual(JSON.parse(encodeMessage({
    key: "alice", value: { total: 42 }, headers: { tag: "a" }, idempotencyKey: "order-17",
    delayMs: 5000,
  })), { key: "alice", value: { total: 42 }, headers: { tag: "a" },
         idempotency_key: "order-17", delay_ms: 5000 });
  assert.deepEqual(JSON.parse(encodeMessage({ valueBytes: new Uint8Array([0, 1, 2]) })),
                   { value_b64: "AAEC" });
  assert.deepEqual(JSON.parse(encodeMessage({ value: null })), { value: null });
  assert.throws(() => encodeMessage({}), TypeError);
  assert.throws(() => encodeMessage({ value: 1, valueBytes: new Uint8Array(1) }), TypeError);
});

test("cursors format in partition order and parse back", () => {
  const cursor = new Map([[3, "1795418703170-0"], [0, "1795418703164-2"]]);
  assert.equal(formatCursor(cursor), "0:1795418703164-2,3:1795418703170-0");
  assert.deepEqual(parseCursor(formatCursor(cursor)), cursor);
  assert.throws(() => parseCursor("0:latest"), TypeError);
});

test("backoff stays within its doubling ceiling and honours what the server asked", () => {
  const backoff = new Backoff({ baseMs: 100, maxMs: 1000 });
  for (let attempt = 1; attempt <= 8; attempt++) {
    const delay = backoff.delayMs(attempt);
    assert.ok(delay >= 0 && delay <= Math.min(1000, 100 * 2 ** (attempt - 1)), String(delay));
  }
  assert.ok(backoff.delayMs(1, 2000) >= 2000);
});

/** An unsigned JWT of `claims`: the client reads the payload, never the signature. */
const unsignedJwt = (claims) => ["{}", JSON.stringify(claims), "sig"]
  .map((part) => Buffer.from(part).toString("base64url")).join(".");

test("a token is due for refresh 30 s or a tenth of its life before its expiry", () => {
  const hour = unsignedJwt({ iat: 1_000, exp: 4_600 });
  assert.equal(refreshDueMs(hour, 1_000_000), 4_570_000);
  const short = unsignedJwt({ iat: 1_000, exp: 1_003 });
  assert.equal(refreshDueMs(short, 1_000_000), 1_002_700);
  // without `iat` the life counts from now
  assert.equal(refreshDueMs(unsignedJwt({ exp: 1_010 }), 1_000_000), 1_009_000);
  // base64url payloads decode whatever characters they hold
  assert.equal(refreshDueMs(unsignedJwt({ sub: "é?>>~~", iat: 0, exp: 7_200 }), 0), 7_170_000);
});

test("a token without a readable expiry is never due for refresh", () => {
  for (const token of ["opaque", "a.b.c", unsignedJwt({ sub: "x" }),
                       unsignedJwt({ exp: "soon" }), unsignedJwt([1, 2])]) {
    assert.equal(refreshDueMs(token, 0), Infinity, token);
  }
});
