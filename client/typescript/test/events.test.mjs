// client.events() against a fake EventSource and a fake fetch, no gateway needed: the token it
// mints before each stream, the messages in order, and when it opens a new stream itself.
import assert from "node:assert/strict";
import { test } from "node:test";
import { AuthError, Client, ForbiddenError, ProblemError } from "../dist/index.js";
import { within } from "./deadline.mjs";

const BASE = "http://gateway.test";
const CONNECTING = 0;
const OPEN = 1;
const CLOSED = 2;

/** A scripted EventSource: the test opens it, sends it events and drops it. */
class FakeEventSource {
  static made = [];

  constructor(url) {
    this.url = new URL(url);
    this.readyState = CONNECTING;
    this.listeners = new Map();
    this.closed = false;
    FakeEventSource.made.push(this);
  }

  addEventListener(type, listener) {
    this.listeners.set(type, [...(this.listeners.get(type) ?? []), listener]);
  }

  close() {
    this.readyState = CLOSED;
    this.closed = true;
  }

  dispatch(type, event = {}) {
    for (const listener of this.listeners.get(type) ?? []) listener(event);
  }

  open() {
    this.readyState = OPEN;
    this.dispatch("open");
  }

  send(type, frame, lastEventId = "") {
    this.dispatch(type, { data: JSON.stringify(frame), lastEventId });
  }

  /** The connection failed: the browser retries (CONNECTING) or gave up (CLOSED). */
  drop(readyState) {
    this.readyState = readyState;
    this.dispatch("error", {});
  }
}

/** A fake gateway: the token route mints `t1`, `t2`, ...; `refuseStreams` answers a GET of the
 * events URL (how the client learns why a stream was refused). */
function fakeGateway({ refuseStreams } = {}) {
  const calls = [];
  let minted = 0;
  const fetch = async (url, init = {}) => {
    const { pathname } = new URL(url);
    calls.push({ url, method: init.method ?? "GET", headers: init.headers ?? {} });
    if (pathname.endsWith("/events/token")) {
      minted++;
      const token = `t${minted}`;
      const topic = pathname.split("/")[3];
      return Response.json({ token, expires_at_ms: Date.now() + 60_000,
                             url: `/v1/topics/${topic}/events?access_token=${token}` },
                           { status: 201 });
    }
    if (pathname.endsWith("/events") && refuseStreams !== undefined) {
      return Response.json(refuseStreams, { status: refuseStreams.status,
                                            headers: { "content-type": "application/problem+json" } });
    }
    if (pathname.startsWith("/v1/topics/")) {
      return Response.json({ partition_details: [{ partition: 0, last_offset: "5-0" },
                                                 { partition: 1, last_offset: null }] });
    }
    return new Response("", { status: 404 });
  };
  return { fetch, calls };
}

function makeClient(gateway, options = {}) {
  return new Client({ url: BASE, EventSource: FakeEventSource, fetch: gateway.fetch,
                      apiKey: "sg_secret", ...options });
}

const FAST = { reconnect: { baseMs: 1, maxMs: 5 } };

/** A stream of `orders` from a client of a fake gateway, and its first EventSource. */
async function openStream(options = {}, clientOptions = {}, gateway = fakeGateway()) {
  const made = FakeEventSource.made.length;
  const stream = makeClient(gateway, clientOptions).events("orders", { ...FAST, ...options });
  return { gateway, stream, made, source: await nextSource(made) };
}

/** The next EventSource made after `count` were. */
async function nextSource(count) {
  await within(5_000, `EventSource number ${count + 1}`, (async () => {
    while (FakeEventSource.made.length <= count) await new Promise((r) => setTimeout(r, 2));
  })());
  return FakeEventSource.made[count];
}

const frame = (partition, offset, value) => ({
  type: "message", topic: "orders", partition, offset, key: null, headers: {}, timestamp_ms: 1,
  value,
});

async function take(stream, count) {
  const taken = [];
  await within(5_000, `${count} messages`, (async () => {
    while (taken.length < count) {
      const { done, value } = await stream.next();
      if (done) throw new Error("the stream ended");
      taken.push(value);
    }
  })());
  return taken;
}

test("a stream opens the minted token's URL with its parameters, never the API key", async () => {
  const { gateway, stream, source } = await openStream({
    from: "earliest", filter: { tenant: ["a", "b"] }, partitions: [0, 2], tokenTtlS: 30,
  });
  assert.equal(source.url.origin, BASE);
  assert.equal(source.url.pathname, "/v1/topics/orders/events");
  assert.equal(source.url.searchParams.get("access_token"), "t1");
  assert.equal(source.url.searchParams.get("from"), "earliest");
  assert.equal(source.url.searchParams.get("filter"), "tenant:a,b");
  assert.equal(source.url.searchParams.get("partitions"), "0,2");
  assert.ok(!source.url.href.includes("sg_secret"));
  const mint = gateway.calls.find((call) => call.url.endsWith("/events/token"));
  assert.equal(mint.method, "POST");
  assert.equal(mint.headers.Authorization, "ApiKey sg_secret");
  source.open();
  source.send("message", frame(0, "1-0", { n: 0 }), "0:1-0");
  source.send("message", frame(2, "1-0", { n: 1 }), "0:1-0,2:1-0");
  const taken = await take(stream, 2);
  assert.deepEqual(taken.map((m) => [m.partition, m.offset, m.value]),
                   [[0, "1-0", { n: 0 }], [2, "1-0", { n: 1 }]]);
  assert.equal(stream.lastEventId, "0:1-0,2:1-0");
  assert.equal(stream.state, "connected");
  stream.close();
  assert.ok(source.closed);
  assert.deepEqual(await stream.next(), { done: true, value: undefined });
});

test("latest is pinned to each partition's last offset before the first stream", async () => {
  const { stream, source } = await openStream();
  assert.equal(source.url.searchParams.get("from"), "0:5-0");
  stream.close();
});

test("when the EventSource gives up, a new token resumes after the last event id", async () => {
  const { stream, made, source: first } = await openStream({ from: "earliest" });
  first.open();
  first.send("message", frame(0, "1-0", 0), "0:1-0");
  first.send("message", frame(0, "2-0", 1), "0:2-0");
  first.drop(CLOSED);  // e.g. the browser's own reconnect met an expired token: 401
  const second = await nextSource(made + 1);
  assert.equal(second.url.searchParams.get("access_token"), "t2");
  assert.equal(second.url.searchParams.get("last_event_id"), "0:2-0");
  assert.equal(second.url.searchParams.get("from"), null);
  assert.equal(stream.state, "reconnecting");
  second.open();
  second.send("message", frame(0, "3-0", 2), "0:3-0");
  // a late event of the first stream is not delivered twice
  first.send("message", frame(0, "2-0", 1), "0:2-0");
  const taken = await take(stream, 3);
  assert.deepEqual(taken.map((m) => m.value), [0, 1, 2]);
  assert.equal(stream.tokensMinted, 2);
  assert.equal(stream.connections, 2);
  assert.equal(stream.state, "connected");
  stream.close();
});

test("a reconnect the browser is making itself is left to it", async () => {
  const { stream, made, source } = await openStream({ from: "earliest" });
  const states = [];
  stream.on("state", (state) => states.push(state));
  source.open();
  source.drop(CONNECTING);
  source.open();
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(FakeEventSource.made.length, made + 1);
  assert.deepEqual(states, ["connected", "reconnecting", "connected"]);
  assert.equal(stream.tokensMinted, 1);
  stream.close();
});

test("credentials-expired asks the token provider again and resumes", async () => {
  let asked = 0;
  const { gateway, stream, made, source: first } = await openStream(
    { from: "earliest" }, { apiKey: undefined, token: () => `jwt${++asked}` });
  first.open();
  first.send("message", frame(1, "7-0", "a"), "1:7-0");
  first.send("error", { type: "error", code: "credentials-expired", detail: "jwt expired",
                        cursor: "1:7-0" });
  const second = await nextSource(made + 1);
  assert.ok(first.closed);
  assert.equal(second.url.searchParams.get("last_event_id"), "1:7-0");
  const mints = gateway.calls.filter((call) => call.url.endsWith("/events/token"));
  assert.deepEqual(mints.map((call) => call.headers.Authorization),
                   ["Bearer jwt1", "Bearer jwt2"]);
  second.open();
  second.send("message", frame(1, "8-0", "b"), "1:8-0");
  assert.deepEqual((await take(stream, 2)).map((m) => m.value), ["a", "b"]);
  stream.close();
});

test("a gap event is told, and the stream goes on", async () => {
  const { stream, source } = await openStream({ from: "0:1-0" });
  const gaps = [];
  stream.on("gap", (gap) => gaps.push(gap));
  source.open();
  source.send("gap", { type: "gap", partition: 0, first_lost: "2-0", first_kept: "9-0",
                       count: 7 });
  source.send("message", frame(0, "9-0", 9), "0:9-0");
  assert.deepEqual((await take(stream, 1)).map((m) => m.offset), ["9-0"]);
  assert.deepEqual(gaps, [{ partition: 0, firstLost: "2-0", firstKept: "9-0", count: 7 }]);
  assert.deepEqual(stream.gaps, gaps);
  stream.close();
});

test("forbidden ends the stream with a ForbiddenError", async () => {
  const { stream, source } = await openStream({ from: "earliest" });
  source.open();
  source.send("error", { type: "error", code: "forbidden", detail: "grant revoked" });
  await assert.rejects(stream.next(), (error) => error instanceof ForbiddenError);
  assert.equal(stream.state, "closed");
  assert.ok(source.closed);
});

test("a refused stream fails with the gateway's problem, without retrying a 422", async () => {
  const gateway = fakeGateway({ refuseStreams: { status: 422, title: "Unprocessable",
                                                 detail: "bad filter", pointer: "/filter" } });
  const { stream, made, source } = await openStream({ from: "earliest" }, {}, gateway);
  source.drop(CLOSED);
  await assert.rejects(stream.next(), (error) => error instanceof ProblemError
    && error.status === 422 && error.pointer === "/filter");
  assert.equal(FakeEventSource.made.length, made + 1);
});

test("a refused mint is the stream's error: an AuthError for bad credentials", async () => {
  const fetch = async () => Response.json({ status: 401, detail: "unknown key" }, { status: 401 });
  const stream = makeClient({ fetch }).events("orders", { from: "earliest", ...FAST });
  await assert.rejects(stream.next(), (error) => error instanceof AuthError);
});

test("without an EventSource, events() says how to get one", () => {
  const client = new Client({ url: BASE, fetch: fakeGateway().fetch });
  assert.throws(() => client.events("orders"), /EventSource/);
});
