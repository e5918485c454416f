// API keys against a gateway that requires credentials: STREAMGATE_API_KEY may do everything,
// STREAMGATE_LIMITED_KEY only publish and subscribe on topics named `open-*`. A wrong key is an
// AuthError, a key without the grant a ForbiddenError, over HTTP and on a WebSocket alike.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { afterEach, test } from "node:test";
import { AuthError, ForbiddenError } from "../../dist/index.js";
import { makeClient, runCleanup, take, within } from "../helpers.mjs";

const apiKey = process.env.STREAMGATE_API_KEY;
const limitedKey = process.env.STREAMGATE_LIMITED_KEY;
if (!apiKey || !limitedKey) {
  throw new Error("STREAMGATE_API_KEY and STREAMGATE_LIMITED_KEY must be keys the gateway knows");
}

let cleanup = [];
afterEach(async () => {
  await runCleanup(cleanup);
  cleanup = [];
});

async function topicNamed(prefix) {
  const admin = makeClient({ apiKey }).admin();
  const name = `${prefix}-${randomUUID().slice(0, 12)}`;
  await admin.createTopic({ name, partitions: 2 });
  cleanup.push(() => admin.deleteTopic(name));
  return name;
}

function subscribe(client, options) {
  const subscription = client.subscribe({ maxReconnects: 0, ...options });
  cleanup.push(() => subscription.close());
  return subscription;
}

/** A producer closed after the test (its WebSocket would keep the test process alive). */
function producer(client, options) {
  const made = client.producer(options);
  cleanup.push(() => made.close());
  return made;
}

/** The error a subscription ends with. */
function refusal(subscription) {
  return within(10_000, "the refusal", subscription.next().then(
    () => assert.fail("the subscription must be refused"), (error) => error));
}

test("a client with an API key publishes and consumes in a group", { timeout: 30_000 },
     async () => {
  const topic = await topicNamed("key");
  const client = makeClient({ apiKey });
  const producer = client.producer({ acks: "all" });
  const sent = await Promise.all([1, 2, 3].map((n) => producer.send(topic, { key: `k${n}`,
                                                                             value: n })));
  await producer.close();
  const group = `g-${randomUUID().slice(0, 8)}`;
  const subscription = subscribe(client, { topic, group });
  const got = await take(subscription, 3, 15_000, (message) => message.ack());
  assert.deepEqual(got.map((m) => m.value).toSorted(), [1, 2, 3]);
  assert.deepEqual(got.map((m) => m.offset).toSorted(), sent.map((r) => r.offset).toSorted());
  assert.ok((await client.admin().listGroups()).some((g) => g.group === group));
});

test("a wrong API key is an AuthError, over HTTP and on a WebSocket", { timeout: 30_000 },
     async () => {
  const topic = await topicNamed("key");
  const client = makeClient({ apiKey: `sgk_${randomUUID().replaceAll("-", "")}` });
  await assert.rejects(client.admin().listTopics(), (e) => e instanceof AuthError
    && e.status === 401);
  await assert.rejects(producer(client, { maxRetries: 0 }).send(topic, { value: 1 }),
                       (e) => e instanceof AuthError);
  const error = await refusal(subscribe(client, { topic, from: "earliest" }));
  assert.ok(error instanceof AuthError, String(error));
  assert.equal(error.closeCode, 4401);
});

test("a key without the grant is a ForbiddenError; where it has one it works",
     { timeout: 30_000 }, async () => {
  const closed = await topicNamed("key");
  const open = await topicNamed("open");
  const client = makeClient({ apiKey: limitedKey });
  await assert.rejects(producer(client, { maxRetries: 0 }).send(closed, { value: 1 }),
                       (e) => e instanceof ForbiddenError && e.status === 403);
  const error = await refusal(subscribe(client, { topic: closed, group: "g" }));
  assert.ok(error instanceof ForbiddenError, String(error));
  assert.equal(error.closeCode, 4403);
  await assert.rejects(client.admin().createTopic({ name: `open-${randomUUID().slice(0, 8)}`,
                                                    partitions: 1 }),
                       (e) => e instanceof ForbiddenError);

  const subscription = subscribe(client, { topic: open, from: "earliest" });
  await producer(client, { acks: "all" }).send(open, { key: "a", value: "allowed" });
  assert.deepEqual((await take(subscription, 1)).map((m) => m.value), ["allowed"]);
});
