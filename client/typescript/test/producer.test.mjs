// The producer over HTTP against a real gateway: batching, idempotent retries, Retry-After, problem
// errors (test/producer_socket.test.mjs has the WebSocket).
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import { ProblemError } from "../dist/index.js";
import { createTopic, makeClient, offsetBefore, runCleanup, topicLength } from "./helpers.mjs";

let cleanup = [];
afterEach(async () => {
  await runCleanup(cleanup);
  cleanup = [];
});

/** A producer publishing over HTTP (one POST a batch), closed after the test. */
function httpProducer(clientOptions, options = {}) {
  const producer = makeClient(clientOptions).producer({ transport: "http", ...options });
  cleanup.push(() => producer.close());
  return producer;
}

/** A fetch that records each POST's Idempotency-Key and lets `intercept` stand in for the
 * network on chosen calls (index counts POSTs from 0). */
function recordingFetch(intercept = () => undefined) {
  const posts = [];
  const fetchImpl = async (input, init = {}) => {
    if (init.method !== "POST" || !String(input).endsWith("/messages")) return fetch(input, init);
    const index = posts.length;
    posts.push({ key: init.headers["Idempotency-Key"], body: init.body });
    const override = intercept(index, input, init);
    return override === undefined ? fetch(input, init) : override;
  };
  return { posts, fetchImpl };
}

test("messages sent in one tick leave as one request and get their offsets in order",
     { timeout: 30_000 }, async () => {
  const topic = await createTopic(3, cleanup);
  const { posts, fetchImpl } = recordingFetch();
  const producer = httpProducer({ fetch: fetchImpl }, { acks: "all" });
  const sent = Array.from({ length: 50 }, (_, i) =>
    producer.send(topic, { key: `k${i % 5}`, value: { n: i }, headers: { source: "ts" } }));
  const results = await Promise.all(sent);

  assert.equal(posts.length, 1);
  assert.equal(JSON.parse(posts[0].body).messages.length, 50);
  assert.equal(results.length, 50);
  const lastByPartition = new Map();
  for (const result of results) {
    assert.equal(result.duplicate, false);
    assert.match(result.offset, /^\d+-\d+$/);
    const before = lastByPartition.get(result.partition);
    if (before !== undefined) assert.ok(offsetBefore(before, result.offset), "send order kept");
    lastByPartition.set(result.partition, result.offset);
  }
  // one key always lands on one partition
  for (let i = 5; i < 50; i++) assert.equal(results[i].partition, results[i % 5].partition);
  assert.equal(await topicLength(topic), 50);
});

test("a batch whose answer was lost is retried with its key and not written twice",
     { timeout: 30_000 }, async () => {
  const topic = await createTopic(2, cleanup);
  let firstAnswer;
  const { posts, fetchImpl } = recordingFetch((index, input, init) => {
    if (index !== 0) return undefined;
    // the gateway writes the batch, then the answer is "lost" on the way back
    return fetch(input, init).then(async (response) => {
      firstAnswer = await response.json();
      throw new TypeError("simulated: connection reset before the answer arrived");
    });
  });
  const producer = httpProducer({ fetch: fetchImpl }, { retry: { baseMs: 10, maxMs: 50 } });
  const results = await Promise.all(
    [0, 1, 2, 3, 4, 5].map((n) => producer.send(topic, { key: `k${n}`, value: n })));

  assert.equal(posts.length, 2);
  assert.equal(posts[1].key, posts[0].key);
  assert.equal(posts[1].body, posts[0].body);
  assert.ok(results.every((r) => r.duplicate), "the retry is answered as a duplicate");
  assert.deepEqual(results.map((r) => [r.partition, r.offset]),
                   firstAnswer.results.map((r) => [r.partition, r.offset]));
  assert.equal(await topicLength(topic), 6);
});

test("a repeated message idempotency key returns the first offset", { timeout: 30_000 },
     async () => {
  const topic = await createTopic(3, cleanup);
  const producer = httpProducer({});
  const first = await producer.send(topic, { value: "order", idempotencyKey: "order-17" });
  const again = await producer.send(topic, { value: "order", idempotencyKey: "order-17" });

  assert.equal(first.duplicate, false);
  assert.equal(again.duplicate, true);
  assert.deepEqual([again.partition, again.offset], [first.partition, first.offset]);
  assert.equal(await topicLength(topic), 1);
});

test("a 503 with Retry-After is retried no sooner than asked", { timeout: 30_000 }, async () => {
  const topic = await createTopic(1, cleanup);
  const { posts, fetchImpl } = recordingFetch((index) => index === 0
    ? new Response(JSON.stringify({ type: "about:blank", title: "Service Unavailable",
                                    status: 503, detail: "simulated outage" }),
                   { status: 503, headers: { "Content-Type": "application/problem+json",
                                             "Retry-After": "1" } })
    : undefined);
  const producer = httpProducer({ fetch: fetchImpl }, { retry: { baseMs: 1, maxMs: 5 } });
  const started = performance.now();
  const result = await producer.send(topic, { value: "after the outage" });

  assert.ok(performance.now() - started >= 990, "waited for Retry-After");
  assert.equal(posts.length, 2);
  assert.equal(posts[1].key, posts[0].key);
  assert.match(result.offset, /^\d+-\d+$/);
  assert.equal(await topicLength(topic), 1);
});

test("a 4xx problem document surfaces as a ProblemError with its fields, without retries",
     { timeout: 30_000 }, async () => {
  const topic = await createTopic(1, cleanup);
  const { posts, fetchImpl } = recordingFetch();
  const producer = httpProducer({ fetch: fetchImpl });

  const error = await producer.send(topic, { value: 1, partition: 7 }).then(
    () => assert.fail("a partition out of range must be refused"), (e) => e);
  assert.ok(error instanceof ProblemError, String(error));
  assert.equal(error.status, 422);
  assert.equal(error.retriable, false);
  assert.equal(error.pointer, "/messages/0/partition");
  assert.ok(error.type.length > 0 && error.title.length > 0 && error.detail.length > 0);
  assert.equal(error.document.status, 422);
  assert.equal(posts.length, 1);

  const missing = await producer.send(`${topic}-absent`, { value: 1 }).then(
    () => assert.fail("an unknown topic must be refused"), (e) => e);
  assert.ok(missing instanceof ProblemError);
  assert.equal(missing.status, 404);
  assert.equal(await topicLength(topic), 0);
});
