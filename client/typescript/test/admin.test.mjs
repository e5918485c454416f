// Administration and replay against a real gateway: listings, replay pages, group state and seek,
// dead letters redriven (after dry runs) one by one and all together, purges, messages with a
// time to live; push subscriptions refused by a gateway that pushes nowhere.
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import { ProblemError } from "../dist/index.js";
import { createTopic, eventually, makeClient, runCleanup } from "./helpers.mjs";

let cleanup = [];
afterEach(async () => {
  await runCleanup(cleanup);
  cleanup = [];
});

const admin = () => makeClient().admin();

async function publish(topic, messages) {
  const producer = makeClient().producer({ acks: "all" });
  const results = await Promise.all(messages.map((m) => producer.send(topic, m)));
  await producer.close();
  return results;
}

async function pull(group, body) {
  const response = await fetch(`${process.env.STREAMGATE_URL}/v1/groups/${group}/pull`, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
  });
  assert.equal(response.status, 200);
  return (await response.json()).messages;
}

test("listings show the topic, and replay pages through a partition by offset and by time",
     { timeout: 30_000 }, async () => {
  const topic = await createTopic(1, cleanup);
  assert.ok((await admin().listTopics()).some((t) => t.name === topic && t.partitions === 1));
  const bytes = Uint8Array.from([0, 1, 254, 255]);
  await publish(topic, [{ key: "a", value: { n: 0 }, headers: { h: "x" } },
                        { key: "a", valueBytes: bytes }, { value: "two" }]);

  const first = await admin().readPartition(topic, 0, { from: "earliest", limit: 2 });
  assert.deepEqual(first.messages.map((m) => m.value ?? m.valueB64), [{ n: 0 }, "AAH+/w=="]);
  assert.deepEqual(first.messages[0].headers, { h: "x" });
  assert.equal(first.messages[0].key, "a");
  const rest = await admin().readPartition(topic, 0, { from: first.nextOffset });
  assert.deepEqual(rest.messages.map((m) => m.value), ["two"]);
  const byTime = await admin().readPartition(topic, 0, {
    fromTimeMs: first.messages[0].timestampMs, limit: 10 });
  assert.equal(byTime.messages.length, 3);
  const details = await admin().describeTopic(topic);
  assert.equal(details.partitionDetails[0].length, 3);
  assert.equal(typeof details.partitionDetails[0].publishRatePerS, "number");
  const { hot } = details.partitionDetails[0].tiers;  // nothing is old enough to be archived
  assert.deepEqual(hot, { firstOffset: first.messages[0].offset,
                          lastOffset: details.partitionDetails[0].lastOffset, entries: 3 });
});

test("a topic grows partitions, changes retention and length cap, and never shrinks",
     { timeout: 30_000 }, async () => {
  const topic = await createTopic(1, cleanup);
  const grown = await admin().updateTopic(topic, { partitions: 3, retentionMs: 3_600_000,
                                                   maxLength: 1000 });
  assert.deepEqual([grown.partitions, grown.retentionMs, grown.maxLength], [3, 3_600_000, 1000]);
  const uncapped = await admin().updateTopic(topic, { maxLength: null });
  assert.equal(uncapped.maxLength, null);
  assert.equal((await admin().describeTopic(topic)).partitionDetails.length, 3);
  await assert.rejects(admin().updateTopic(topic, { partitions: 2 }),
                       (e) => e instanceof ProblemError && [409, 422].includes(e.status));
});

test("a group's lag, pending and oldest un-acked age, and a seek to latest",
     { timeout: 30_000 }, async () => {
  const topic = await createTopic(2, cleanup);
  await publish(topic, Array.from({ length: 6 }, (_, n) => ({ key: `k${n}`, value: n })));
  const pulled = await pull("watchers", { topic, max_messages: 2 });
  assert.equal(pulled.length, 2);

  const state = await admin().describeGroup("watchers", topic);
  assert.equal(state.partitions.reduce((s, p) => s + p.pending, 0), 2);
  assert.equal(state.partitions.reduce((s, p) => s + (p.lag ?? 0), 0), 4);
  assert.ok(state.partitions.some((p) => p.oldestPendingAgeMs !== null));
  assert.ok((await admin().listGroups()).some((g) => g.topic === topic && g.group === "watchers"));

  await admin().seek("watchers", topic, "latest");
  const after = await admin().describeGroup("watchers", topic);
  assert.equal(after.partitions.reduce((s, p) => s + (p.lag ?? 0), 0), 0);
  await assert.rejects(admin().seek("watchers", topic, "yesterday"),
                       (e) => e instanceof ProblemError && e.status === 422);
});

test("dead letters go back one by one and all together after dry runs, and leave the DLQ",
     { timeout: 60_000 }, async () => {
  const topic = await createTopic(1, cleanup);
  cleanup.push(() => admin().deleteTopic(`${topic}.dlq`));
  await publish(topic, [{ key: "a", value: "first" }, { key: "b", value: "second" }]);
  const body = { topic, ack_timeout_ms: 200, max_deliveries: 1, wait_ms: 300, max_messages: 10 };
  let letters = [];
  await eventually(30_000, "two dead letters", async () => {
    await pull("fails", body);
    try {
      letters = (await admin().readPartition(`${topic}.dlq`, 0)).messages;
    } catch (error) {
      if (!(error instanceof ProblemError && error.status === 404)) throw error;
    }
    return letters.length === 2;
  });
  assert.equal(letters[0].headers["sg-dlq-group"], "fails");

  const [one] = letters.filter((m) => m.value === "first");
  const preview = await admin().redriveDryRun(topic, { maxMessages: 1 });
  assert.deepEqual(preview, { redriven: 1, dry_run: true,
                              partitions: [{ partition: 0, waiting: 2, redriven: 1 }] });
  assert.deepEqual(await admin().redriveDryRun(topic, { partition: 0, offset: one.offset }),
                   { redriven: 1, dry_run: true });
  assert.equal((await admin().readPartition(`${topic}.dlq`, 0)).messages.length, 2);
  assert.equal(await admin().redrive(topic, { partition: 0, offset: one.offset }), 1);
  await assert.rejects(admin().redriveDryRun(topic, { partition: 0, offset: one.offset }),
                       (e) => e instanceof ProblemError && e.status === 404);
  await assert.rejects(admin().redrive(topic, { partition: 0, offset: one.offset }),
                       (e) => e instanceof ProblemError && e.status === 404);
  const left = (await admin().readPartition(`${topic}.dlq`, 0)).messages;
  assert.deepEqual(left.map((m) => m.value), ["second"]);
  assert.equal(await admin().redrive(topic, { ratePerS: 100 }), 1);
  assert.deepEqual((await admin().readPartition(`${topic}.dlq`, 0)).messages, []);
  const values = (await admin().readPartition(topic, 0)).messages.map((m) => m.value);
  assert.deepEqual(values.sort(), ["first", "first", "second", "second"]);
});

test("a purge empties a partition, then the dead letters; an expired message reaches no puller",
     { timeout: 30_000 }, async () => {
  const topic = await createTopic(2, cleanup);
  await publish(topic, [{ value: "a", partition: 0 }, { value: "b", partition: 1 },
                        { value: "gone", partition: 1, ttlMs: 1 }]);
  const replayed = (await admin().readPartition(topic, 1)).messages;
  assert.ok(Number(replayed[1].headers["sg-expires-at"]) > 0);
  await new Promise((resolve) => setTimeout(resolve, 20));
  const pulled = await pull("ttl", { topic, max_messages: 10 });
  assert.deepEqual(pulled.map((m) => m.value).sort(), ["a", "b"]);

  const purged = await admin().purge(topic, { partition: 1 });
  assert.equal(purged.purged, 2);
  assert.deepEqual(purged.partitions.map((p) => [p.partition, p.cut]), [[1, replayed[1].offset]]);
  assert.deepEqual((await admin().readPartition(topic, 1)).messages, []);
  assert.equal((await admin().readPartition(topic, 0)).messages.length, 1);
  await assert.rejects(admin().purge(topic, { deadLetters: true }),
                       (e) => e instanceof ProblemError && e.status === 404);
});

test("quotas answer the caller's own subject, and null caps and use where the gateway sets none",
     { timeout: 30_000 }, async () => {
  const topic = await createTopic(1, cleanup);
  await publish(topic, [{ value: "counted nowhere" }]);
  const quotas = await admin().quotas();
  assert.equal(quotas.subject, "principal:anonymous");
  assert.deepEqual(quotas.quotas, {
    retained_bytes: { limit: null, used: null },
    in_flight_messages: { limit: null, used: null },
  });
});

test("a gateway that pushes nowhere refuses a push subscription, and lists and finds none",
     { timeout: 30_000 }, async () => {
  const topic = await createTopic(1, cleanup);
  await assert.rejects(
    admin().putPush(topic, "hooks", { endpoint: "https://hooks.example.com/streamgate" }),
    (e) => e instanceof ProblemError && e.status === 422 && e.type.endsWith("push-endpoint-refused")
      && /not enabled/.test(e.detail));
  assert.deepEqual(await admin().pushSubscriptions(topic), []);
  await assert.rejects(admin().pushSubscription(topic, "hooks"),
                       (e) => e instanceof ProblemError && e.status === 404);
  await assert.rejects(admin().rotatePushSecret(topic, "hooks", { previousExpiresInS: 0 }),
                       (e) => e instanceof ProblemError && e.status === 404);
  await assert.rejects(admin().deletePush(topic, "hooks"),
                       (e) => e instanceof ProblemError && e.status === 404);
});
