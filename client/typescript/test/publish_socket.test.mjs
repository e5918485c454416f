// The producer's publish WebSocket against a small gateway stand-in written here (a `ws` server and
// a plain HTTP one): resends after a drop, flow control, problems, and falling back to HTTP.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { test } from "node:test";
import WebSocket, { WebSocketServer } from "ws";
import { Client, ConnectionError, ProblemError, StreamgateError } from "../dist/index.js";
import { within } from "./deadline.mjs";

/** `results` for a frame or body: one offset per message, counted over the whole stand-in. */
function resultsFor(gateway, messages) {
  return messages.map(() => ({ partition: 0, offset: `${++gateway.written}-0`, duplicate: false }));
}

/** Answer a publish frame as the gateway does when the write succeeded. */
function publish(connection, frame) {
  connection.socket.send(JSON.stringify({
    type: "published", id: frame.id, results: resultsFor(connection.gateway, frame.messages),
  }));
}

/** A stand-in for the gateway: `onFrame(frame, connection)` answers each publish frame (default:
 * at once); `offersSocket: false` answers the upgrade with 404 as a gateway without it does;
 * `expectsAuth`: `ready` only after an auth frame, as for a client with credentials. */
class Gateway {
  connections = [];
  posts = [];
  upgrades = 0;
  written = 0;

  constructor({ offersSocket = true, expectsAuth = false, ready = {},
                onFrame = (frame, connection) => publish(connection, frame) } = {}) {
    this.ready = { type: "ready", max_in_flight: 100, max_frame_bytes: 1 << 20, ...ready };
    this.onFrame = onFrame;
    this.wss = new WebSocketServer({ noServer: true });
    this.server = createServer((request, response) => this.onRequest(request, response));
    this.server.on("upgrade", (request, socket, head) => {
      this.upgrades++;
      if (!offersSocket) {
        socket.end("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return;
      }
      this.wss.handleUpgrade(request, socket, head, (ws) => this.onConnection(ws));
    });
    this.offersSocket = offersSocket;
    this.expectsAuth = expectsAuth;
  }

  static async start(options) {
    const gateway = new Gateway(options);
    await new Promise((resolve) => gateway.server.listen(0, "127.0.0.1", resolve));
    gateway.url = `http://127.0.0.1:${gateway.server.address().port}`;
    return gateway;
  }

  client(options = {}) {
    return new Client({ url: this.url, WebSocket, ...options });
  }

  onConnection(socket) {
    const connection = { socket, gateway: this, frames: [], auth: [],
                         index: this.connections.length };
    this.connections.push(connection);
    // without credentials the client sends no auth frame: ready at once, as an open gateway
    if (!this.expectsAuth) socket.send(JSON.stringify(this.ready));
    socket.on("message", (data) => {
      const frame = JSON.parse(String(data));
      if (frame.type === "auth") {
        connection.auth.push(frame);
        this.onAuth(connection, frame);
      } else {
        connection.frames.push(frame);
        this.onFrame(frame, connection);
      }
    });
  }

  /** Credentials in the first frame; overridden by a test to refuse them. */
  onAuth(connection) {
    connection.socket.send(JSON.stringify({ type: "authenticated", principal: "tester" }));
    connection.socket.send(JSON.stringify(this.ready));
  }

  onRequest(request, response) {
    let body = "";
    request.on("data", (chunk) => { body += chunk; });
    request.on("end", () => {
      if (request.method === "POST") {
        this.posts.push({ key: request.headers["idempotency-key"], body: JSON.parse(body) });
        const results = resultsFor(this, JSON.parse(body).messages);
        response.writeHead(200, { "Content-Type": "application/json" });
        response.end(JSON.stringify({ results }));
        return;
      }
      const status = this.offersSocket ? 400 : 404;
      response.writeHead(status, { "Content-Type": "application/problem+json" });
      response.end(JSON.stringify({ type: "about:blank", status, title: "no", detail: "no" }));
    });
  }

  async stop() {
    for (const client of this.wss.clients) client.terminate();
    this.wss.close();
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

/** Run `body(gateway)` against a fresh stand-in, stopped whatever happens. */
async function withGateway(options, body) {
  const gateway = await Gateway.start(options);
  try {
    await within(20_000, "the test's publishes", body(gateway));
  } finally {
    await gateway.stop();
  }
}

const TOPICS = ["a", "b", "c", "d", "e", "f"];

test("frames unanswered when the connection drops are sent again in order under their keys",
     { timeout: 30_000 }, async () => {
  const onFrame = (frame, connection) => {
    if (connection.index > 0) publish(connection, frame);
    else if (connection.frames.length === 3) connection.socket.close(1001, "going away");
  };
  await withGateway({ onFrame, expectsAuth: true }, async (gateway) => {
    const producer = gateway.client({ apiKey: "sgk_test" }).producer();
    const results = await Promise.all(
      TOPICS.slice(0, 3).map((topic) => producer.send(topic, { key: "k", value: topic })));
    await producer.close();

    const [first, second] = gateway.connections;
    assert.equal(gateway.connections.length, 2);
    const sent = (connection) => connection.frames.map((f) => [f.id, f.idempotency_key, f.topic]);
    assert.deepEqual(sent(second), sent(first));
    assert.deepEqual(second.frames.map((f) => f.topic), ["a", "b", "c"]);
    assert.deepEqual(second.auth, [{ type: "auth", api_key: "sgk_test" }]);
    assert.deepEqual(results.map((r) => r.offset), ["1-0", "2-0", "3-0"]);
    assert.equal(gateway.posts.length, 0);
  });
});

test("no more frames await an answer than the gateway's max_in_flight", { timeout: 30_000 },
     async () => {
  let outstanding = 0;
  let most = 0;
  const onFrame = (frame, connection) => {
    outstanding++;
    most = Math.max(most, outstanding);
    setTimeout(() => {
      outstanding--;
      publish(connection, frame);
    }, 5);
  };
  await withGateway({ ready: { max_in_flight: 2 }, onFrame }, async (gateway) => {
    const producer = gateway.client().producer();
    const results = await Promise.all(TOPICS.map((topic) => producer.send(topic, { value: 1 })));
    await producer.close();

    assert.equal(most, 2);
    assert.equal(gateway.connections[0].frames.length, TOPICS.length);
    assert.ok(results.every((r) => /^\d+-0$/.test(r.offset)));
  });
});

test("a gateway that answers the upgrade with 404 gets every batch over HTTP",
     { timeout: 30_000 }, async () => {
  await withGateway({ offersSocket: false }, async (gateway) => {
    const producer = gateway.client().producer();
    const first = await producer.send("orders", { key: "k", value: 1 });
    const second = await producer.send("orders", { key: "k", value: 2 });
    await producer.close();

    assert.equal(producer.transportInUse, "http");
    assert.equal(gateway.upgrades, 1, "asked once, then HTTP for the producer's life");
    assert.deepEqual(gateway.posts.map((p) => p.body.messages[0].value), [1, 2]);
    assert.deepEqual([first.offset, second.offset], ["1-0", "2-0"]);
    assert.match(gateway.posts[0].key, /^[0-9a-f]{32}-1$/);
  });
});

test("a producer told to use the WebSocket fails where the gateway does not offer it",
     { timeout: 30_000 }, async () => {
  await withGateway({ offersSocket: false }, async (gateway) => {
    const producer = gateway.client().producer({ transport: "websocket" });
    const error = await producer.send("orders", { value: 1 }).then(
      () => assert.fail("nothing may go over HTTP"), (e) => e);
    await producer.close();

    assert.ok(error instanceof StreamgateError && !error.retriable, String(error));
    assert.equal(gateway.posts.length, 0);
  });
});

test("a problem frame is a ProblemError: retried under the same key when retriable, else thrown",
     { timeout: 30_000 }, async () => {
  const onFrame = (frame, connection) => {
    const problem = (status) => connection.socket.send(JSON.stringify({
      type: "problem", id: frame.id, retry_after_s: status === 503 ? 0 : undefined,
      problem: { type: `https://streamgate.dev/problems/p${status}`, title: "Refused",
                 status, detail: `simulated ${status}`, pointer: "/topic" },
    }));
    if (frame.topic === "absent") problem(404);
    else if (connection.frames.length === 1) problem(503);
    else publish(connection, frame);
  };
  await withGateway({ onFrame }, async (gateway) => {
    const producer = gateway.client().producer({ retry: { baseMs: 1, maxMs: 5 } });
    const written = await producer.send("orders", { value: 1 });
    const error = await producer.send("absent", { value: 1 }).then(
      () => assert.fail("an unknown topic must be refused"), (e) => e);
    await producer.close();

    const [refused, retried, absent] = gateway.connections[0].frames;
    assert.equal(retried.idempotency_key, refused.idempotency_key);
    assert.notEqual(retried.id, refused.id);
    assert.equal(written.offset, "1-0");
    assert.ok(error instanceof ProblemError, String(error));
    assert.deepEqual([error.status, error.retriable, error.title, error.pointer],
                     [404, false, "Refused", "/topic"]);
    assert.equal(error.type, "https://streamgate.dev/problems/p404");
    assert.equal(gateway.connections[0].frames.length, 3, "a 404 is not retried");
    assert.equal(absent.topic, "absent");
  });
});

test("a batch larger than a frame may be goes over HTTP", { timeout: 30_000 }, async () => {
  await withGateway({ ready: { max_frame_bytes: 300 } }, async (gateway) => {
    const producer = gateway.client().producer();
    const small = await producer.send("orders", { value: "x" });
    const large = await producer.send("orders", { value: "x".repeat(400) });
    await producer.close();

    assert.equal(gateway.connections[0].frames.length, 1);
    assert.equal(gateway.posts.length, 1);
    assert.equal(gateway.posts[0].body.messages[0].value.length, 400);
    assert.deepEqual([small.offset, large.offset], ["1-0", "2-0"]);
    assert.equal(producer.transportInUse, "auto");
  });
});

test("a frame left unanswered replaces its connection and is sent again under its key",
     { timeout: 30_000 }, async () => {
  const onFrame = (frame, connection) => {
    if (connection.index > 0) publish(connection, frame);
  };
  await withGateway({ onFrame }, async (gateway) => {
    const producer = gateway.client().producer({ timeoutMs: 200, retry: { baseMs: 1, maxMs: 5 } });
    const result = await producer.send("orders", { value: 1 });
    await producer.close();

    const keys = gateway.connections.map((c) => c.frames.map((f) => f.idempotency_key));
    assert.equal(keys.length, 2);
    assert.deepEqual(keys[1], keys[0]);
    assert.equal(result.offset, "1-0");
  });
});

test("a connection closed for an expired token reconnects with the provider's next one",
     { timeout: 30_000 }, async () => {
  let calls = 0;
  const token = () => `token-${++calls}`;
  await withGateway({ expectsAuth: true }, async (gateway) => {
    gateway.onAuth = function (connection, frame) {
      if (frame.token === "token-1") connection.socket.close(4401, "token expired");
      else Gateway.prototype.onAuth.call(this, connection, frame);
    };
    const producer = gateway.client({ token }).producer();
    const result = await producer.send("orders", { value: 1 });
    await producer.close();

    assert.deepEqual(gateway.connections.map((c) => c.auth.map((f) => f.token)),
                     [["token-1"], ["token-2"]]);
    assert.equal(result.offset, "1-0");
  });
});

test("a connection refused before it is ready fails its frames for the retries to handle",
     { timeout: 30_000 }, async () => {
  await withGateway({ expectsAuth: true }, async (gateway) => {
    gateway.onAuth = (connection) => connection.socket.close(1011, "internal error");
    const producer = gateway.client({ apiKey: "sgk_test" }).producer({ maxRetries: 1,
                                                                       retry: { baseMs: 1 } });
    const error = await producer.send("orders", { value: 1 }).then(
      () => assert.fail("no connection got ready"), (e) => e);
    await producer.close();

    assert.ok(error instanceof ConnectionError, String(error));
    assert.equal(gateway.connections.length, 2, "one connection per attempt");
  });
});
