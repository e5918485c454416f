// Token refresh against a gateway that checks HS256 JWTs (STREAMGATE_JWT_SECRET): a fresh token
// goes over the open WebSocket before each expiry, and a refused one is replaced by the provider's
// next one, over HTTP and by a reconnect, without a gap.
import assert from "node:assert/strict";
import { createHmac, randomUUID } from "node:crypto";
import { afterEach, test } from "node:test";
import { AuthError } from "../../dist/index.js";
import { makeClient, runCleanup, sockets, take } from "../helpers.mjs";

const secret = process.env.STREAMGATE_JWT_SECRET;
if (!secret) throw new Error("STREAMGATE_JWT_SECRET must be the gateway's HS256 secret");

let cleanup = [];
afterEach(async () => {
  await runCleanup(cleanup);
  cleanup = [];
});

function jwt(claims) {
  const part = (object) => Buffer.from(JSON.stringify(object)).toString("base64url");
  const unsigned = `${part({ alg: "HS256", typ: "JWT" })}.${part(claims)}`;
  return `${unsigned}.${createHmac("sha256", secret).update(unsigned).digest("base64url")}`;
}

/** A provider of tokens for `jwt-user` that expire `lifetimeS` after they are made; the first
 * one `firstExpired`. Counts its calls; `expS` is the last token's `exp`. */
function provider(lifetimeS, firstExpired = false) {
  const made = { calls: 0 };
  made.next = () => {
    made.calls++;
    const now = Math.floor(Date.now() / 1000);
    const exp = firstExpired && made.calls === 1 ? now - 60 : now + lifetimeS;
    made.expS = exp;
    return jwt({ sub: "jwt-user", iat: now, exp });
  };
  return made;
}

/** A provider that hands out its token again until it has expired: no fresh token comes before
 * an `exp`, so the gateway closes the socket (4401) and the client reconnects. */
function cachingProvider(lifetimeS) {
  const minted = provider(lifetimeS);
  let token;
  minted.cached = () => {
    if (token === undefined || Date.now() >= minted.expS * 1000) token = minted.next();
    return token;
  };
  return minted;
}

/** Publish `count` values one at a time, a pause after each, so publishing spans token lives. */
async function publishSlowly(producer, topic, count, pauseMs) {
  const sent = [];
  for (let n = 0; n < count; n++) {
    sent.push(n);
    await producer.send(topic, { key: "k", value: n });
    await new Promise((resolve) => setTimeout(resolve, pauseMs));
  }
  return sent;
}

const publishSockets = () => sockets.filter((socket) => socket.url.endsWith("/v1/publish"));

async function topicFor(client) {
  const admin = client.admin();
  const name = `auth-${randomUUID().slice(0, 12)}`;
  await admin.createTopic({ name, partitions: 1 });
  cleanup.push(() => admin.deleteTopic(name));
  return name;
}

test("a request refused for an expired token is sent again with the provider's next token",
     { timeout: 30_000 }, async () => {
  const tokens = provider(60, true);
  const client = makeClient({ token: async () => tokens.next() });
  await client.admin().listTopics();
  assert.equal(tokens.calls, 2);
  await client.admin().listTopics();
  assert.equal(tokens.calls, 2, "a token that works is kept");
});

test("a provider whose tokens keep being refused ends in an AuthError", { timeout: 30_000 },
     async () => {
  const client = makeClient({ token: () => jwt({ sub: "jwt-user", exp: 1 }) });
  await assert.rejects(client.admin().listTopics(), (e) => e instanceof AuthError);
});

test("a subscription and a publish socket keep one connection across token expiries",
     { timeout: 60_000 }, async () => {
  const tokens = provider(3);
  const client = makeClient({ token: () => tokens.next() });
  const topic = await topicFor(client);
  const before = publishSockets().length;
  const producer = client.producer({ acks: "all", transport: "websocket" });
  cleanup.push(() => producer.close());
  const subscription = client.subscribe({ topic, group: "refreshing", from: "earliest" });
  cleanup.push(() => subscription.close());
  const sent = await publishSlowly(producer, topic, 16, 500);  // two expiries and more
  const got = await take(subscription, sent.length, 30_000, (message) => message.ack());
  assert.deepEqual(got.map((m) => m.value), sent);
  assert.deepEqual(got.map((m) => m.deliveryCount), sent.map(() => 1), "nothing delivered twice");
  assert.equal(subscription.connections, 1);
  assert.equal(publishSockets().length, before + 1, "the producer's one socket");
  assert.ok(tokens.calls >= 3, `provider calls ${tokens.calls}`);
});

test("a subscription given no fresh token before its expiry rejoins and misses nothing",
     { timeout: 60_000 }, async () => {
  const tokens = cachingProvider(3);
  const client = makeClient({ token: () => tokens.cached() });
  const topic = await topicFor(client);
  const producer = client.producer({ acks: "all" });
  cleanup.push(() => producer.close());
  const subscription = client.subscribe({ topic, from: "earliest" });
  cleanup.push(() => subscription.close());
  const sent = await publishSlowly(producer, topic, 12, 500);
  const got = await take(subscription, sent.length, 30_000);
  assert.deepEqual(got.map((m) => m.value), sent);
  assert.ok(subscription.connections >= 2, `connections ${subscription.connections}`);
  assert.ok(tokens.calls >= 2, `provider calls ${tokens.calls}`);
});
