// Token refresh against a gateway that checks HS256 JWTs (STREAMGATE_JWT_SECRET): an expired token
// is replaced by the provider's next one, over HTTP and on a live WebSocket, without a gap.
import assert from "node:assert/strict";
import { createHmac, randomUUID } from "node:crypto";
import { afterEach, test } from "node:test";
import { AuthError } from "../../dist/index.js";
import { makeClient, runCleanup, take } from "../helpers.mjs";

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
 * one `firstExpired`. Counts its calls. */
function provider(lifetimeS, firstExpired = false) {
  const made = { calls: 0 };
  made.next = () => {
    made.calls++;
    const now = Math.floor(Date.now() / 1000);
    const exp = firstExpired && made.calls === 1 ? now - 60 : now + lifetimeS;
    return jwt({ sub: "jwt-user", exp });
  };
  return made;
}

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

test("a subscription whose token expires rejoins with a fresh one and misses nothing",
     { timeout: 60_000 }, async () => {
  const tokens = provider(3);
  const client = makeClient({ token: () => tokens.next() });
  const topic = await topicFor(client);
  const producer = client.producer({ acks: "all" });
  const subscription = client.subscribe({ topic, from: "earliest" });
  cleanup.push(() => subscription.close());
  const sent = [];
  for (let n = 0; n < 12; n++) {
    sent.push(n);
    await producer.send(topic, { key: "k", value: n });
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  const got = await take(subscription, sent.length, 30_000);
  assert.deepEqual(got.map((m) => m.value), sent);
  assert.ok(subscription.connections >= 2, `connections ${subscription.connections}`);
  assert.ok(tokens.calls >= 2, `provider calls ${tokens.calls}`);
  await producer.close();
});
