// Shared by the tests: a client of the gateway at STREAMGATE_URL, with `ws` as its WebSocket,
// uniquely named topics, and waiting with a deadline (a hung test must fail, not stall CI).
import { randomUUID } from "node:crypto";
import WebSocket from "ws";
import { Client } from "../dist/index.js";
import { within } from "./deadline.mjs";

export const url = process.env.STREAMGATE_URL;
if (!url) throw new Error("STREAMGATE_URL must name a running gateway");

/** Every socket the clients of these tests opened, so a test can drop one from under them. */
export const sockets = [];

export class RecordedWebSocket extends WebSocket {
  constructor(address) {
    super(address);
    sockets.push(this);
  }
}

export function makeClient(options = {}) {
  return new Client({ url, WebSocket: RecordedWebSocket, ...options });
}

/** A topic of its own for one test; deleted by `cleanup`. */
export async function createTopic(partitions, cleanup) {
  const admin = makeClient().admin();
  const name = `ts-${randomUUID().slice(0, 12)}`;
  await admin.createTopic({ name, partitions });
  cleanup.push(() => admin.deleteTopic(name));
  return name;
}

/** Run `cleanup` callbacks (last first), whatever fails. */
export async function runCleanup(cleanup) {
  for (const step of cleanup.reverse()) {
    try {
      await step();
    } catch {
      // best effort: a topic already gone is fine
    }
  }
}

export { within };

/** The next `count` messages of a subscription's iterator, each passed to `each` as it comes
 * (to ack it: the gateway sends no more than the credit until acks come back). */
export async function take(subscription, count, ms = 15_000, each = () => undefined) {
  const taken = [];
  await within(ms, `${count} messages (got ${taken.length})`, (async () => {
    while (taken.length < count) {
      const { done, value } = await subscription.next();
      if (done) throw new Error("the subscription ended");
      taken.push(value);
      each(value);
    }
  })());
  return taken;
}

/** Poll `check` until it returns true or the deadline passes. */
export async function eventually(ms, what, check) {
  const until = Date.now() + ms;
  for (;;) {
    if (await check()) return;
    if (Date.now() > until) throw new Error(`not true after ${ms} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Sum of a topic's partition lengths: what was really written. */
export async function topicLength(topic) {
  const details = await makeClient().admin().describeTopic(topic);
  return details.partitionDetails.reduce((sum, p) => sum + p.length, 0);
}

/** Total ordering of offsets `<ms>-<seq>` within a partition. */
export function offsetBefore(a, b) {
  const [am, as] = a.split("-").map(BigInt);
  const [bm, bs] = b.split("-").map(BigInt);
  return am < bm || (am === bm && as < bs);
}
