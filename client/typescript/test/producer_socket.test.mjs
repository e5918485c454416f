// The producer over its WebSocket (/v1/publish) against a real gateway: one connection, many
// frames in flight read back in each key's order, problems, a dropped connection, and HTTP on ask.
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import { ProblemError } from "../dist/index.js";
import {
  RecordedWebSocket, createTopic, makeClient, offsetBefore, runCleanup, sockets, take, topicLength,
} from "./helpers.mjs";

let cleanup = [];
afterEach(async () => {
  await runCleanup(cleanup);
  cleanup = [];
});

/** A fetch that counts the publish POSTs and passes everything on. */
function countingFetch() {
  const counted = { posts: 0 };
  counted.fetchImpl = (input, init = {}) => {
    if (init.method === "POST" && String(input).endsWith("/messages")) counted.posts++;
    return fetch(input, init);
  };
  return counted;
}

/** A producer closed after the test, with `clientOptions` for its client. */
function producerFor(clientOptions, options = {}) {
  const producer = makeClient(clientOptions).producer(options);
  cleanup.push(() => producer.close());
  return producer;
}

const publishSockets = () => sockets.filter((socket) => socket.url.endsWith("/v1/publish"));

test("the producer publishes over one WebSocket by default, never POSTing",
     { timeout: 30_000 }, async () => {
  const topic = await createTopic(3, cleanup);
  const counted = countingFetch();
  const before = publishSockets().length;
  const producer = producerFor({ fetch: counted.fetchImpl }, { acks: "all" });
  const first = await Promise.all(Array.from({ length: 20 }, (_, n) =>
    producer.send(topic, { key: `k${n % 4}`, value: n, headers: { via: "socket" } })));
  const second = await producer.send(topic, { key: "k0", value: 20 });

  assert.equal(producer.transportInUse, "auto");
  assert.equal(counted.posts, 0);
  assert.equal(publishSockets().length, before + 1, "one connection for every batch");
  for (const result of [...first, second]) assert.match(result.offset, /^\d+-\d+$/);
  assert.equal(second.partition, first[0].partition);
  assert.ok(offsetBefore(first[16].offset, second.offset), "k0's order kept");
  assert.equal(await topicLength(topic), 21);
});

test("many sends in flight over the socket are read back in each key's order",
     { timeout: 60_000 }, async () => {
  const topics = [await createTopic(4, cleanup), await createTopic(2, cleanup)];
  const producer = producerFor({}, { acks: "all", batchSize: 25 });
  const count = 300;
  const sent = topics.flatMap((topic) => Array.from({ length: count }, (_, n) =>
    producer.send(topic, { key: `k${n % 6}`, value: n })));
  const results = await Promise.all(sent);
  assert.ok(results.every((r) => !r.duplicate));

  for (const topic of topics) {
    const subscription = makeClient().subscribe({ topic, from: "earliest" });
    cleanup.push(() => subscription.close());
    const got = await take(subscription, count, 30_000);
    for (let key = 0; key < 6; key++) {
      const values = got.filter((m) => m.key === `k${key}`).map((m) => m.value);
      const expected = Array.from({ length: count / 6 }, (_, i) => key + 6 * i);
      assert.deepEqual(values, expected, `k${key} of ${topic} in send order`);
    }
  }
});

test("an unknown topic is refused with a ProblemError 404 over the socket, not retried",
     { timeout: 30_000 }, async () => {
  const topic = await createTopic(1, cleanup);
  const counted = countingFetch();
  const producer = producerFor({ fetch: counted.fetchImpl });
  const error = await producer.send(`${topic}-absent`, { value: 1 }).then(
    () => assert.fail("an unknown topic must be refused"), (e) => e);

  assert.ok(error instanceof ProblemError, String(error));
  assert.equal(error.status, 404);
  assert.equal(error.retriable, false);
  assert.ok(error.type.length > 0 && error.detail.length > 0);
  const invalid = await producer.send(topic, { value: 1, partition: 7 }).then(
    () => assert.fail("a partition out of range must be refused"), (e) => e);
  assert.equal(invalid.status, 422);
  assert.equal(invalid.pointer, "/messages/0/partition");
  assert.equal(counted.posts, 0);
  assert.equal(await topicLength(topic), 0);
});

test("a publish socket dropped with frames in flight is reopened and writes each message once",
     { timeout: 60_000 }, async () => {
  const topics = [await createTopic(2, cleanup), await createTopic(2, cleanup)];
  let frames = 0;
  class DroppingWebSocket extends RecordedWebSocket {
    send(data) {
      super.send(data);
      // the connection dies (no close frame) right after the third publish frame left
      if (data.includes('"type":"publish"') && ++frames === 3) this._socket.destroy();
    }
  }
  const before = publishSockets().length;
  const producer = producerFor({ WebSocket: DroppingWebSocket },
                               { acks: "all", batchSize: 10, retry: { baseMs: 10 } });
  const results = await Promise.all(topics.flatMap((topic) => Array.from({ length: 50 },
    (_, n) => producer.send(topic, { key: `k${n % 3}`, value: n }))));

  assert.ok(publishSockets().length >= before + 2, "reconnected");
  const written = results.map((r, i) => `${Math.floor(i / 50)}/${r.partition}/${r.offset}`);
  assert.equal(new Set(written).size, 100);
  for (const topic of topics) assert.equal(await topicLength(topic), 50, "nothing written twice");
});

test("transport 'http' publishes with one POST a batch and opens no socket",
     { timeout: 30_000 }, async () => {
  const topic = await createTopic(2, cleanup);
  const counted = countingFetch();
  const before = sockets.length;
  const producer = producerFor({ fetch: counted.fetchImpl }, { transport: "http" });
  const results = await Promise.all([1, 2, 3].map((n) => producer.send(topic, { value: n })));

  assert.equal(counted.posts, 1);
  assert.equal(sockets.length, before);
  assert.equal(producer.transportInUse, "http");
  assert.ok(results.every((r) => /^\d+-\d+$/.test(r.offset)));
  assert.equal(await topicLength(topic), 3);
});
