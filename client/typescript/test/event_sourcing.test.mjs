// Event sourcing against a real gateway: conditional appends on a key's position, key history,
// and a compacted topic's snapshot followed from its offset.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { afterEach, test } from "node:test";
import { UnexpectedOffsetError } from "../dist/index.js";
import { makeClient, runCleanup, take } from "./helpers.mjs";

let cleanup = [];
afterEach(async () => {
  await runCleanup(cleanup);
  cleanup = [];
});

async function topicWith(options) {
  const admin = makeClient().admin();
  const name = `ts-es-${randomUUID().slice(0, 12)}`;
  const topic = await admin.createTopic({ name, partitions: 2, ...options });
  cleanup.push(() => admin.deleteTopic(name));
  return topic;
}

test("an append expecting a key's position wins once; the loser learns the current one",
     { timeout: 30_000 }, async () => {
  const topic = await topicWith({ keyIndex: true });
  assert.equal(topic.keyIndex, true);
  const client = makeClient();
  const admin = client.admin();
  const producer = client.producer({ acks: "all" });
  assert.equal(await admin.keyPosition(topic.name, "cart-1"), "none");
  const [opened] = await producer.sendConditional(
    topic.name, [{ key: "cart-1", value: { opened: true }, expectedOffset: "none" }]);
  const answers = await Promise.allSettled(["pear", "fig"].map((item) => producer.sendConditional(
    topic.name, [{ key: "cart-1", value: { added: item }, expectedOffset: opened.offset }])));
  const lost = answers.filter((a) => a.status === "rejected").map((a) => a.reason);
  assert.equal(lost.length, 1);
  assert.ok(lost[0] instanceof UnexpectedOffsetError);
  assert.equal(lost[0].expected, opened.offset);
  assert.equal(lost[0].current, await admin.keyPosition(topic.name, "cart-1"));
  const page = await admin.keyHistory(topic.name, "cart-1");
  assert.equal(page.messages.length, 2);
  assert.deepEqual(page.messages[0].value, { opened: true });
  const newest = await admin.keyHistory(topic.name, "cart-1", { newestFirst: true, limit: 5 });
  assert.deepEqual(newest.messages.map((m) => m.offset), page.messages.map((m) => m.offset)
    .reverse());
  assert.equal(newest.nextOffset, null);
  await producer.close();
});

test("a snapshot of a compacted partition and the stream after it give each change once",
     { timeout: 30_000 }, async () => {
  const topic = await topicWith({ compact: true });
  assert.equal(topic.compact, true);
  const client = makeClient();
  const producer = client.producer();
  await Promise.all(Array.from({ length: 12 }, (_, n) => producer.send(
    topic.name, { key: `k${n % 4}`, value: n, partition: 0 })));
  await producer.send(topic.name, { key: "k3", value: null, partition: 0 });
  const { asOf, messages } = await client.admin().snapshot(topic.name, 0, 2);
  assert.deepEqual(messages.map((m) => [m.key, m.value]).sort(),
                   [["k0", 8], ["k1", 9], ["k2", 10]]);
  const subscription = client.subscribe({ topic: topic.name, from: `0:${asOf}` });
  await producer.send(topic.name, { key: "k0", value: 99, partition: 0 });
  const [followed] = await take(subscription, 1);
  assert.deepEqual([followed.key, followed.value], ["k0", 99]);
  subscription.close();
  await producer.close();
});
