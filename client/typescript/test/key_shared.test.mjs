// key_shared groups against a real gateway: members share the keys, a key is never in two
// members' hands at once nor out of order, a failing key waits alone, and an admin sees a parked
// key and lets it go on (released, or sent to the dead letters).
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { afterEach, test } from "node:test";
import { ProblemError } from "../dist/index.js";
import { createTopic, eventually, makeClient, runCleanup, within } from "./helpers.mjs";

const HOLD_MS = 30;

let cleanup = [];
afterEach(async () => {
  await runCleanup(cleanup);
  cleanup = [];
});

/** `count` members of one key_shared group, each connected and given its assignment. */
async function members(client, count, options) {
  const group = `ks-${randomUUID().slice(0, 8)}`;
  const joined = Array.from({ length: count }, () => {
    const member = client.subscribe({ mode: "key_shared", group, ...options });
    cleanup.push(() => member.close());
    return member;
  });
  await within(15_000, "every member's assignment", Promise.all(joined.map((member) =>
    member.assignment ?? new Promise((resolve) => member.once("assignment", resolve)))));
  return { group, joined };
}

/** Who holds which key now, across members: a message of a held key is a violation. */
class Hands {
  held = new Map();
  violations = [];
  most = 0;

  take(message, member) {
    const holder = this.held.get(message.key);
    if (holder !== undefined) {
      this.violations.push(`${message.key}@${message.offset} to m${member} while m${holder} holds it`);
    }
    this.held.set(message.key, member);
    this.most = Math.max(this.most, this.held.size);
  }

  /** Let go of the message's key, then settle it after handling took `HOLD_MS`. */
  settleLater(message, settle) {
    setTimeout(() => {
      this.held.delete(message.key);
      settle();
    }, HOLD_MS);
  }
}

async function publish(client, topic, messages) {
  const producer = client.producer({ acks: "all" });
  const results = await Promise.all(messages.map((m) => producer.send(topic, m)));
  await producer.close();
  return results;
}

const ref = (m) => `${m.partition}/${m.offset}`;

test("members share the keys: each message once, one key in one member's hands, in order",
     { timeout: 60_000 }, async () => {
  const topic = await createTopic(2, cleanup);
  const client = makeClient();
  const { group, joined } = await members(client, 3, { topic, maxInFlight: 20 });
  const hands = new Hands();
  const got = [];
  joined.forEach((member, index) => member.on("message", (message) => {
    hands.take(message, index);
    got.push({ message, index });
    hands.settleLater(message, () => message.ack());
  }));
  const keys = Array.from({ length: 12 }, (_, n) => `key-${n}`);
  const sent = await publish(client, topic, [0, 1, 2, 3, 4].flatMap((round) =>
    keys.map((key) => ({ key, value: { key, round } }))));

  await eventually(30_000, `60 messages (got ${got.length})`, () => got.length >= 60);
  assert.deepEqual(hands.violations, []);
  assert.deepEqual(got.map(({ message }) => ref(message)).toSorted(), sent.map(ref).toSorted(),
                   "each message once");
  for (const key of keys) {
    const rounds = got.filter(({ message }) => message.key === key)
      .map(({ message }) => message.value.round);
    assert.deepEqual(rounds, [0, 1, 2, 3, 4], `${key} in order`);
  }
  assert.ok(new Set(got.map(({ index }) => index)).size >= 2, "the keys spread over members");
  assert.ok(hands.most > 1, "different keys were handled at once");
  await eventually(10_000, "every ack reached the group", async () => {
    const state = await client.admin().describeGroup(group, topic);
    return state.partitions.every((p) => p.pending === 0 && p.lag === 0);
  });
});

test("a key whose message fails waits alone while the other keys go on", { timeout: 60_000 },
     async () => {
  const topic = await createTopic(2, cleanup);
  const client = makeClient();
  // the failed message comes again after 1-2 s (the backoff, jittered), not sooner
  const { joined } = await members(client, 2, { topic, retryBackoffMs: 2000,
                                                retryBackoffMultiplier: 1 });
  const hands = new Hands();
  const got = [];
  joined.forEach((member, index) => member.on("message", (message) => {
    hands.take(message, index);
    got.push(message);
    const fails = message.key === "poison" && message.deliveryCount === 1
      && message.value.n === 0;
    hands.settleLater(message, () => (fails ? message.nack() : message.ack()));
  }));
  const others = Array.from({ length: 10 }, (_, n) => `key-${n}`);
  await publish(client, topic, [0, 1, 2].flatMap((n) => [
    { key: "poison", value: { n } }, ...others.map((key) => ({ key, value: { n } }))]));

  await eventually(30_000, "every message, the failed one twice", () => got.length >= 34);
  assert.deepEqual(hands.violations, []);
  const poison = got.filter((m) => m.key === "poison");
  assert.deepEqual(poison.map((m) => [m.value.n, m.deliveryCount]), [[0, 1], [0, 2], [1, 1], [2, 1]],
                   "the failed message came again before the key's next ones");
  const again = got.indexOf(poison[1]);
  const blocked = got.slice(again).filter((m) => m.key !== "poison");
  assert.deepEqual(blocked, [], "every other key was done before the failed message came again");
  for (const key of others) {
    assert.deepEqual(got.filter((m) => m.key === key).map((m) => m.value.n), [0, 1, 2], key);
  }
});

test("an admin sees a parked key, releases it, then sends it to the dead letters",
     { timeout: 60_000 }, async () => {
  const topic = await createTopic(1, cleanup);
  const client = makeClient();
  const admin = client.admin();
  cleanup.push(() => admin.deleteTopic(`${topic}.dlq`));
  // parked, the key would wait a minute on its own
  const { group, joined: [member] } = await members(client, 1, { topic, retryBackoffMs: 60_000,
                                                                 maxDeliveries: 10 });
  const got = [];
  member.on("message", (message) => {
    got.push(message);
    if (message.key === "poison") message.nack();
    else message.ack();
  });
  const [first, second] = await publish(client, topic, [
    { key: "poison", value: 1 }, { key: "poison", value: 2 }, { key: "fine", value: 3 }]);
  const parked = async () => (await admin.describeGroup(group, topic)).partitions[0].parkedKeys;
  const parkedAt = (offset) => async () => {
    const keys = await parked();
    return keys.length === 1 && keys[0].key === "poison" && keys[0].offset === offset;
  };

  await eventually(15_000, "the poison key parked", parkedAt(first.offset));
  const [shown] = await parked();
  assert.ok(Math.abs(shown.sinceMs - Date.now()) < 60_000, `since ${shown.sinceMs}`);
  assert.deepEqual(got.map((m) => m.value), [1, 3], "the other key went on");

  const released = await admin.settleParkedKey({ group, topic, partition: 0, key: "poison",
                                                 action: "release" });
  assert.deepEqual(released, { topic, partition: 0, key: "poison", offset: first.offset,
                               action: "release" });
  await eventually(10_000, "the released message again, long before its backoff",
                   () => got.length === 3);
  assert.deepEqual([got[2].offset, got[2].deliveryCount], [first.offset, 2]);
  await eventually(10_000, "the key parked again", parkedAt(first.offset));

  const dead = await admin.settleParkedKey({ group, topic, partition: 0, key: "poison",
                                             action: "dead_letter", reason: "bad cart" });
  assert.equal(dead.offset, first.offset);
  await eventually(10_000, "the key's next message parked in turn", parkedAt(second.offset));
  assert.deepEqual(got.map((m) => m.value), [1, 3, 1, 2]);
  const letters = (await admin.readPartition(`${topic}.dlq`, 0)).messages;
  assert.deepEqual(letters.map((m) => [m.value, m.headers["sg-dlq-reason"]]), [[1, "bad cart"]]);

  await assert.rejects(
    admin.settleParkedKey({ group, topic, partition: 0, key: "fine", action: "release" }),
    (e) => e instanceof ProblemError && e.status === 404
      && e.type.endsWith("parked-key-not-found"));
});
