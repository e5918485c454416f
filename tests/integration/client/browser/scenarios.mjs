// The TypeScript client's scenarios for test_typescript_client_browser.py: the browser's own fetch
// and WebSocket against the gateway behind this page's origin. Each returns plain JSON for Python.
import { within } from "./deadline.mjs";
import { eventScenarios } from "./events.mjs";
import { exposeScenarios } from "./page_runner.mjs";
import { Client, ProblemError } from "./dist/index.js";

const client = new Client({ url: location.origin });
document.querySelector("#origin").textContent = `origin ${location.origin}, the gateway behind it`;

/** The next `count` messages of a subscription, each passed to `each` as it comes. */
async function take(subscription, count, each = () => undefined) {
  const taken = [];
  await within(20_000, `${count} messages`, (async () => {
    while (taken.length < count) {
      const { done, value } = await subscription.next();
      if (done) throw new Error(`the subscription ended after ${taken.length} messages`);
      taken.push(value);
      each(value);
    }
  })());
  return taken;
}

const plain = (m) => ({
  partition: m.partition, offset: m.offset, key: m.key, value: m.value, headers: m.headers,
  deliveryCount: m.deliveryCount,
});

const scenarios = {
  async createTopic(name, partitions) {
    await client.admin().createTopic({ name, partitions });
    return { name, partitions };
  },

  /** `count` messages sent in one tick (one batch): their offsets, in send order. */
  async publish(topic, count) {
    const producer = client.producer({ acks: "all" });
    const sent = Array.from({ length: count }, (_, n) => producer.send(
      topic, { key: `k${n % 5}`, value: { n }, headers: { source: "chromium" } }));
    const results = await Promise.all(sent);
    await producer.close();
    return results.map((r, n) => ({ n, partition: r.partition, offset: r.offset,
                                    duplicate: r.duplicate }));
  },

  async broadcast(topic, count) {
    const subscription = client.subscribe({ topic, from: "earliest" });
    try {
      return (await take(subscription, count)).map(plain);
    } finally {
      await subscription.close();
    }
  },

  /** Every message acked as it comes; then whether anything more arrives, and the group's
   * pending and lag once the acks are in. */
  async group(topic, group, count) {
    const subscription = client.subscribe({ topic, group, maxInFlight: 8 });
    try {
      const messages = (await take(subscription, count, (m) => m.ack())).map(plain);
      const more = await Promise.race([
        subscription.next().then(({ done, value }) => (done ? null : plain(value))),
        new Promise((resolve) => setTimeout(() => resolve(null), 1_000)),
      ]);
      let partitions = [];
      await within(10_000, "every ack reached the group", (async () => {
        for (;;) {
          partitions = (await client.admin().describeGroup(group, topic))?.partitions ?? [];
          if (partitions.length > 0 && partitions.every((p) => p.pending === 0 && p.lag === 0)) {
            return;
          }
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      })());
      return { messages, more, partitions, assignment: subscription.assignment?.partitions };
    } finally {
      await subscription.close();
    }
  },

  async publishToUnknownTopic(topic) {
    try {
      await client.producer().send(topic, { value: 1 });
      return { rejected: false };
    } catch (error) {
      return {
        rejected: true, isProblemError: error instanceof ProblemError, name: error.name,
        status: error.status, type: error.type, title: error.title, retriable: error.retriable,
      };
    }
  },
};

exposeScenarios({ ...scenarios, ...eventScenarios });
