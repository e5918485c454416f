// Header filters against a real gateway: a subscription with a `filter` gets only the messages
// whose headers match all of it, broadcast or in a group (where the others are acked for the group).
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { afterEach, test } from "node:test";
import { createTopic, eventually, makeClient, runCleanup, take } from "./helpers.mjs";

let cleanup = [];
afterEach(async () => {
  await runCleanup(cleanup);
  cleanup = [];
});

function subscribe(client, options) {
  const subscription = client.subscribe(options);
  cleanup.push(() => subscription.close());
  return subscription;
}

async function publish(client, topic, messages) {
  const producer = client.producer({ acks: "all" });
  await Promise.all(messages.map((m) => producer.send(topic, m)));
  await producer.close();
}

/** Nothing more arrives for a while: what came is all the subscription gets. */
async function nothingMore(subscription, ms = 500) {
  const extra = await Promise.race([subscription.next(), new Promise((r) => setTimeout(r, ms))]);
  assert.equal(extra, undefined, `unexpected ${JSON.stringify(extra?.value?.value)}`);
}

const HEADERS = [
  ["a-eu", { tag: "a", region: "eu" }], ["b-eu", { tag: "b", region: "eu" }],
  ["c-eu", { tag: "c", region: "eu" }], ["a-us", { tag: "a", region: "us" }],
  ["b-none", { tag: "b" }], ["plain", undefined],
];

test("a broadcast subscription with a filter gets only the messages matching all of it",
     { timeout: 30_000 }, async () => {
  const topic = await createTopic(2, cleanup);
  const client = makeClient();
  await publish(client, topic, HEADERS.map(([value, headers], n) => ({
    key: `k${n}`, value, ...(headers === undefined ? {} : { headers }) })));
  const either = subscribe(client, { topic, from: "earliest",
                                     filter: { tag: ["a", "b"], region: "eu" } });
  const only = subscribe(client, { topic, from: "earliest", filter: { tag: "c" } });

  const matched = await take(either, 2);
  assert.deepEqual(matched.map((m) => m.value).toSorted(), ["a-eu", "b-eu"]);
  assert.ok(matched.every((m) => m.headers.region === "eu"));
  assert.deepEqual((await take(only, 1)).map((m) => m.value), ["c-eu"]);
  await nothingMore(either);
  await nothingMore(only, 100);
});

test("a group subscription with a filter gets only matching messages; the group moves past the rest",
     { timeout: 30_000 }, async () => {
  const topic = await createTopic(2, cleanup);
  const client = makeClient();
  const group = `f-${randomUUID().slice(0, 8)}`;
  await publish(client, topic, Array.from({ length: 10 }, (_, n) => ({
    key: `k${n}`, value: n, headers: { tag: n % 2 === 0 ? "even" : "odd" } })));
  const evens = subscribe(client, { topic, group, filter: { tag: "even" } });

  const got = await take(evens, 5, 15_000, (message) => message.ack());
  assert.deepEqual(got.map((m) => m.value).toSorted((a, b) => a - b), [0, 2, 4, 6, 8]);
  await nothingMore(evens);
  await eventually(10_000, "the group past every message, matching or not", async () => {
    const state = await client.admin().describeGroup(group, topic);
    return state.partitions.every((p) => p.pending === 0 && p.lag === 0);
  });
});
