/**
 * The producer: messages sent to a topic in the same tick (or linger window) leave together in one
 * publish frame on the producer's WebSocket (`/v1/publish`), or one
 * `POST /v1/topics/{topic}/messages` where the gateway does not offer it, retried with the same
 * idempotency key so that a retry after a lost answer, a 429 or a 503 never writes a message twice.
 *
 * Each topic has one batch in flight at a time, and the next one gathers what is sent meanwhile:
 * the messages of a topic are written in the order they were sent, and batches grow by themselves
 * when the gateway is slower than the sender (as aiokafka's accumulator does).
 */

import { Backoff, BackoffOptions, sleep } from "./backoff.js";
import { StreamgateError } from "./errors.js";
import { Omittable, Transport } from "./http.js";
import { toBase64 } from "./base64.js";
import type * as api from "./openapi.gen.js";
import { PublishAnswer, PublishSocket, UseHttp } from "./socket.js";
import type { WebSocketConstructor } from "./subscription.js";

/** `"0"`: queued in the gateway (no offsets); `"1"`: written on the primary; `"all"`: confirmed by
 * the replicas too. */
export type Acks = NonNullable<api.PublishRequest["acks"]>;

const ACKS: readonly Acks[] = ["0", "1", "all"];

/** How batches travel: `"websocket"` on one persistent WebSocket (`/v1/publish`), `"http"` one
 * POST each, `"auto"` the WebSocket where the gateway offers it, else HTTP. */
export type PublishTransport = "auto" | "websocket" | "http";

const TRANSPORTS: readonly PublishTransport[] = ["auto", "websocket", "http"];

/** One message to publish: exactly one of `value` (any JSON) and `valueBytes`. */
export interface ProducerMessage {
  key?: string;
  value?: unknown;
  /** Binary value, sent as `value_b64` and replayed as base64. */
  valueBytes?: Uint8Array;
  headers?: Record<string, string>;
  /** Explicit partition; otherwise the gateway hashes `key` (or `idempotencyKey`). */
  partition?: number;
  /** Written once per partition and principal within the gateway's dedup window (24 h). */
  idempotencyKey?: string;
  /** Delivered after this delay (scheduled: the result has no offset yet). */
  delayMs?: number;
  /** Delivered at this epoch time in milliseconds. */
  deliverAtMs?: number;
  /** A conditional append (`sendConditional`): the offset of the key's newest message, or
   * `"none"`; on the key's first message in the request. */
  expectedOffset?: string;
  /** Time to live: no subscriber or pull gets the message once this long has passed since it
   * joined its stream (stored as the `sg-expires-at` header). */
  ttlMs?: number;
}

/** Where a message was written. With acks `"0"` partition and offset are null; a scheduled
 * message has a `scheduledId` and `deliverAtMs` instead of an offset. */
export interface RecordMetadata {
  partition: number | null;
  offset: string | null;
  /** A retry (or a repeated idempotency key) found the message already written. */
  duplicate: boolean;
  scheduledId?: string;
  deliverAtMs?: number;
}

export interface ProducerOptions {
  acks?: Acks;
  /** Wait this long for more messages before an idle topic's batch leaves (default 0: what is
   * sent in the same tick leaves together). */
  lingerMs?: number;
  /** At most this many messages per request (default 1000; the gateway allows 10,000). */
  batchSize?: number;
  /** At most about this many bytes of encoded messages per request (default 4 MiB). */
  maxBatchBytes?: number;
  /** Retries of a batch after a retriable failure (default 5). */
  maxRetries?: number;
  retry?: BackoffOptions;
  /** Per request attempt (default: the client's). */
  timeoutMs?: number;
  /** Default `"auto"`: the WebSocket, opened on the first send, unless the gateway answers its
   * upgrade with 404 (or there is no WebSocket class): then HTTP for the producer's life. */
  transport?: PublishTransport;
}

interface Waiter {
  resolve: (result: RecordMetadata) => void;
  reject: (error: unknown) => void;
}

class Batch {
  readonly encoded: string[] = [];
  readonly waiters: Waiter[] = [];
  bytes = 0;
  idempotencyKey = "";
}

class Lane {
  readonly topic: string;
  open = new Batch();
  readonly ready: Batch[] = [];
  busy = false;
  timer: ReturnType<typeof setTimeout> | undefined;

  constructor(topic: string) {
    this.topic = topic;
  }

  get idle(): boolean {
    return !this.busy && this.ready.length === 0 && this.open.encoded.length === 0;
  }
}

/** `bytes` random bytes as hex: `crypto.getRandomValues` exists on plain-http pages too, where
 * browsers leave out `crypto.randomUUID` (secure contexts only). */
function randomHex(bytes: number): string {
  const random = globalThis.crypto.getRandomValues(new Uint8Array(bytes));
  return Array.from(random, (byte) => byte.toString(16).padStart(2, "0")).join("");
}

/** Publishes messages; made by `client.producer()`. */
export class Producer {
  readonly acks: Acks;
  /** Names this producer's batches: `<producerId>-<n>` is each batch's `Idempotency-Key`. */
  readonly producerId: string = randomHex(16);
  private readonly transport: Transport;
  private readonly lingerMs: number;
  private readonly batchSize: number;
  private readonly maxBatchBytes: number;
  private readonly maxRetries: number;
  private readonly backoff: Backoff;
  private readonly timeoutMs: number | undefined;
  /** The publish socket; undefined while none is open yet, or when HTTP is used. */
  private socket: PublishSocket | undefined;
  private via: PublishTransport;
  private readonly WebSocketImpl: WebSocketConstructor | undefined;
  private readonly lanes = new Map<string, Lane>();
  private idleWaiters: Array<() => void> = [];
  private batchNumber = 0;
  private closed = false;
  /** `sendConditional` calls not answered yet (they travel outside the lanes). */
  private readonly conditionals = new Set<Promise<RecordMetadata[]>>();

  constructor(transport: Transport, options: ProducerOptions = {},
              WebSocketImpl?: WebSocketConstructor) {
    const acks = options.acks ?? "1";
    if (!ACKS.includes(acks)) throw new TypeError("acks must be '0', '1' or 'all'");
    this.via = options.transport ?? "auto";
    if (!TRANSPORTS.includes(this.via)) {
      throw new TypeError("transport must be 'auto', 'websocket' or 'http'");
    }
    if (this.via === "websocket" && WebSocketImpl === undefined) {
      throw new TypeError("no WebSocket class: pass the client's 'WebSocket' option");
    }
    if (WebSocketImpl === undefined) this.via = "http";
    this.WebSocketImpl = WebSocketImpl;
    this.transport = transport;
    this.acks = acks;
    this.lingerMs = Math.max(0, options.lingerMs ?? 0);
    this.batchSize = Math.max(1, Math.min(10_000, options.batchSize ?? 1000));
    this.maxBatchBytes = options.maxBatchBytes ?? 4 * 1024 * 1024;
    this.maxRetries = options.maxRetries ?? 5;
    this.backoff = new Backoff(options.retry);
    this.timeoutMs = options.timeoutMs;
  }

  /** Queue one message; resolves once it is written (or rejects with `ProblemError` or
   * `ConnectionError` once retries are exhausted). */
  send(topic: string, message: ProducerMessage): Promise<RecordMetadata> {
    if (this.closed) return Promise.reject(new StreamgateError("the producer is closed"));
    let encoded: string;
    try {
      encoded = encodeMessage(message);
    } catch (error) {
      return Promise.reject(error);
    }
    return new Promise((resolve, reject) => this.enqueue(topic, encoded, { resolve, reject }));
  }

  /** Publish `messages` in one request, written only if every expectation holds (each message's
   * `expectedOffset`, and `expectedLastOffset` of their one partition), else nothing:
   * `UnexpectedOffsetError` names what moved. The request keeps one idempotency key through its
   * retries, so a retry of a write that landed answers `duplicate`, never a conflict with itself.
   * It leaves at once, not ordered with messages queued by `send` (`flush()` first). */
  async sendConditional(topic: string, messages: ProducerMessage[],
                        options: { expectedLastOffset?: string } = {}): Promise<RecordMetadata[]> {
    if (this.closed) throw new StreamgateError("the producer is closed");
    const batch = new Batch();
    batch.encoded.push(...messages.map(encodeMessage));
    batch.idempotencyKey = `${this.producerId}-c${++this.batchNumber}`;
    const expected = options.expectedLastOffset === undefined ? undefined
      : JSON.stringify(options.expectedLastOffset);
    const sent = this.postWithRetries(topic, batch, expected);
    this.conditionals.add(sent);
    try {
      return await sent;
    } finally {
      this.conditionals.delete(sent);
    }
  }

  /** Send every open batch now and wait until everything sent so far is answered. */
  async flush(): Promise<void> {
    for (const lane of this.lanes.values()) {
      this.cut(lane);
      this.kick(lane);
    }
    if (this.allIdle()) return;
    await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  /** Flush, then refuse further sends and close the WebSocket once conditional sends under way
   * are answered too; idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    await this.flush();
    await Promise.allSettled(this.conditionals);
    this.socket?.close();
  }

  /** How batches travel now: `"auto"` turns `"http"` once the gateway turned the WebSocket
   * down. */
  get transportInUse(): PublishTransport {
    return this.via;
  }

  private enqueue(topic: string, encoded: string, waiter: Waiter): void {
    let lane = this.lanes.get(topic);
    if (lane === undefined) {
      lane = new Lane(topic);
      this.lanes.set(topic, lane);
    }
    const size = encoded.length + 1;
    if (lane.open.encoded.length > 0 && lane.open.bytes + size > this.maxBatchBytes) this.cut(lane);
    lane.open.encoded.push(encoded);
    lane.open.waiters.push(waiter);
    lane.open.bytes += size;
    if (lane.open.encoded.length >= this.batchSize) this.cut(lane);
    if (!lane.busy && lane.timer === undefined) {
      // a timer, not a microtask: everything sent in this tick (and its microtasks) joins the batch
      const target = lane;
      lane.timer = setTimeout(() => this.kick(target), this.lingerMs);
    }
  }

  /** Close the lane's open batch; it leaves after those before it, under its own key. */
  private cut(lane: Lane): void {
    if (lane.open.encoded.length === 0) return;
    lane.open.idempotencyKey = `${this.producerId}-${++this.batchNumber}`;
    lane.ready.push(lane.open);
    lane.open = new Batch();
  }

  private kick(lane: Lane): void {
    if (lane.timer !== undefined) clearTimeout(lane.timer);
    lane.timer = undefined;
    if (lane.busy || lane.idle) return;
    lane.busy = true;
    void this.sendLane(lane);
  }

  /** Send the lane's batches one after another; what gathered meanwhile leaves next. */
  private async sendLane(lane: Lane): Promise<void> {
    try {
      for (;;) {
        if (lane.ready.length === 0) this.cut(lane);
        const batch = lane.ready.shift();
        if (batch === undefined) return;
        await this.deliver(lane.topic, batch);
      }
    } finally {
      lane.busy = false;
      if (this.allIdle()) {
        const waiters = this.idleWaiters;
        this.idleWaiters = [];
        for (const wake of waiters) wake();
      }
    }
  }

  private allIdle(): boolean {
    for (const lane of this.lanes.values()) if (!lane.idle) return false;
    return true;
  }

  private async deliver(topic: string, batch: Batch): Promise<void> {
    let results: RecordMetadata[];
    try {
      results = await this.postWithRetries(topic, batch);
    } catch (error) {
      for (const waiter of batch.waiters) waiter.reject(error);
      return;
    }
    batch.waiters.forEach((waiter, index) => {
      const result = results[index];
      if (result === undefined) waiter.reject(new StreamgateError("the gateway answered short"));
      else waiter.resolve(result);
    });
  }

  /** Publish the batch, again with the same body and key after a retriable failure: the gateway
   * answers a retry with the first offsets and `duplicate: true`. */
  private async postWithRetries(topic: string, batch: Batch,
                                expectedLastOffset?: string): Promise<RecordMetadata[]> {
    const expected = expectedLastOffset === undefined ? ""
      : `,"expected_last_offset":${expectedLastOffset}`;
    const fields = `"acks":"${this.acks}"${expected},"messages":[${batch.encoded.join(",")}]`;
    for (let attempt = 1; ; attempt++) {
      try {
        const answer = await this.attempt(topic, batch.idempotencyKey, fields);
        return this.resultsOf(answer, batch.encoded.length);
      } catch (error) {
        if (!(error instanceof StreamgateError) || !error.retriable || attempt > this.maxRetries) {
          throw error;
        }
        const asked = "retryAfterMs" in error ? (error.retryAfterMs as number | undefined) : 0;
        await sleep(this.backoff.delayMs(attempt, asked ?? 0));
      }
    }
  }

  /** One try over the WebSocket, or over HTTP where the socket cannot take it. */
  private async attempt(topic: string, key: string, fields: string): Promise<PublishAnswer> {
    const socket = this.publishSocket();
    if (socket !== undefined) {
      try {
        return await socket.publish(
          `"topic":${JSON.stringify(topic)},"idempotency_key":${JSON.stringify(key)},${fields}`,
          this.timeoutMs ?? this.transport.timeoutMs);
      } catch (error) {
        if (!(error instanceof UseHttp)) throw error;
        if (error.forGood) this.leaveSocket(error);
      }
    }
    const answer = await this.transport.request<PublishAnswer>(
      "POST", `/v1/topics/${encodeURIComponent(topic)}/messages`, {
        body: `{${fields}}`, headers: { "Idempotency-Key": key },
        ...(this.timeoutMs === undefined ? {} : { timeoutMs: this.timeoutMs }),
      });
    return answer.body;
  }

  private publishSocket(): PublishSocket | undefined {
    if (this.via === "http" || this.WebSocketImpl === undefined) return undefined;
    this.socket ??= new PublishSocket(this.transport, this.WebSocketImpl);
    return this.socket;
  }

  /** The gateway does not offer the WebSocket: HTTP from now on, unless it was asked for. */
  private leaveSocket(error: UseHttp): void {
    if (this.via === "websocket") throw error;
    this.via = "http";
    // a batch that reached the socket meanwhile goes over HTTP too
    this.socket?.close(error);
    this.socket = undefined;
  }

  private resultsOf(body: PublishAnswer, count: number): RecordMetadata[] {
    if (this.acks === "0" || !("results" in body)) {
      return Array.from({ length: count }, () => ({ partition: null, offset: null,
                                                    duplicate: false }));
    }
    return body.results.map((r) => {
      const result: RecordMetadata = { partition: r.partition, offset: r.offset,
                                       duplicate: r.duplicate };
      if (typeof r.scheduled_id === "string") result.scheduledId = r.scheduled_id;
      if (r.deliver_at_ms !== undefined) result.deliverAtMs = r.deliver_at_ms;
      return result;
    });
  }
}

/** One message of a publish body as JSON, in the gateway's field names. */
export function encodeMessage(message: ProducerMessage): string {
  const hasValue = "value" in message && message.value !== undefined;
  if (hasValue === (message.valueBytes !== undefined)) {
    throw new TypeError("give exactly one of value and valueBytes");
  }
  const doc: Omittable<api.MessageIn> = {
    key: message.key, value: hasValue ? message.value : undefined,
    value_b64: hasValue ? undefined : toBase64(message.valueBytes as Uint8Array),
    headers: message.headers, partition: message.partition,
    idempotency_key: message.idempotencyKey, delay_ms: message.delayMs,
    deliver_at_ms: message.deliverAtMs, expected_offset: message.expectedOffset,
    ttl_ms: message.ttlMs,
  };
  return JSON.stringify(doc);
}
