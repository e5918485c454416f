// The client's pure parts, no gateway needed: close codes to typed errors, message encoding,
// cursors, backoff bounds.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  AuthError, ForbiddenError, ProblemError, SubscriptionClosedError, closeError, encodeMessage,
  formatCursor, parseCursor,
} from "../dist/index.js";
import { Backoff } from "../dist/backoff.js";

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
