// client.events() for test_typescript_events_browser.py (scenarios.mjs serves them on the page):
// the browser's own EventSource through the client, on the gateway behind this page's origin.
// Each scenario returns plain JSON.
import { within } from "./deadline.mjs";
import { Client } from "./dist/index.js";

let stream;
const received = [];

const plain = (m) => ({ partition: m.partition, offset: m.offset, value: m.value });

export const eventScenarios = {
  /** Open a stream of `topic` from the start; messages collect in `received`. */
  async openStream(topic, apiKey, tokenTtlS) {
    const client = new Client({ url: location.origin, ...(apiKey ? { apiKey } : {}) });
    stream = client.events(topic, { from: "earliest", tokenTtlS });
    stream.on("message", (message) => received.push(plain(message)));
    await within(20_000, "the stream to open", new Promise((resolve, reject) => {
      stream.on("state", (state) => state === "connected" && resolve());
      stream.on("error", reject);
    }));
    return { state: stream.state };
  },

  /** Wait until a message with value `{end: true}` came from each of `partitions`. */
  async takeUntilEnds(partitions) {
    await within(30_000, `an end marker from ${partitions} partitions`, (async () => {
      while (new Set(received.filter((m) => m.value?.end).map((m) => m.partition)).size
             < partitions) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })());
    return received.slice();
  },

  async waitForMessages(count) {
    await within(20_000, `${count} messages (got ${received.length})`, (async () => {
      while (received.length < count) await new Promise((resolve) => setTimeout(resolve, 20));
    })());
    return received.length;
  },

  /** Drop the stream from the server's side (the page's server cuts it), once the stream's
   * token expired when `afterExpiry`: the browser's own reconnect is then refused. */
  async cutStream(afterExpiry) {
    if (afterExpiry) {
      const wait = stream.tokenExpiresAtMs - Date.now() + 200;
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    }
    const answer = await fetch("/__cut-event-streams", { method: "POST" });
    return (await answer.json()).cut;
  },

  async closeStream() {
    const info = { lastEventId: stream.lastEventId, tokensMinted: stream.tokensMinted,
                   connections: stream.connections, state: stream.state };
    stream.close();
    return info;
  },
};
