/**
 * A WebSocket subscription (`GET /v1/subscribe`): an async iterable of messages that also emits
 * `message`, `assignment`, `gap`, `state` and `error` events, reconnecting after a drop.
 *
 * Group subscriptions (exclusive, shared) simply rejoin: the group keeps its position and the
 * gateway redelivers what was not acked. Broadcast subscriptions resume with `from=<cursor>`, the
 * last offset per partition received, so a reconnect neither skips nor repeats a message.
 */

import { BackoffOptions, Reconnects, RetryHooks } from "./backoff.js";
import { Cursor, formatCursor, parseCursor } from "./cursor.js";
import { Emitter } from "./emitter.js";
import {
  AuthError, ConnectionError, ForbiddenError, FrameError, StreamgateError,
  SubscriptionClosedError,
} from "./errors.js";
import { Transport } from "./http.js";
import { Message, MessageFrame, Settler } from "./message.js";
import type * as api from "./openapi.gen.js";
import { Readers } from "./readers.js";
import { SocketTokenRefresh } from "./token_refresh.js";

export type Mode = "exclusive" | "shared" | "key_shared" | "broadcast";
export type SubscriptionState = "connecting" | "connected" | "reconnecting" | "closed";

/** The part of the WHATWG WebSocket this client uses: the browser's, Node 22's global one, and the
 * `ws` package's all fit. */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: "open" | "error", listener: () => void): void;
  addEventListener(type: "message", listener: (event: { data: unknown }) => void): void;
  addEventListener(type: "close",
                   listener: (event: { code: number; reason: string }) => void): void;
}

export type WebSocketConstructor = new (url: string) => WebSocketLike;

export interface SubscribeOptions {
  topic: string;
  /** Consumer group; required for `exclusive` and `shared`, absent for `broadcast`. */
  group?: string;
  /** Default: `exclusive` with a group, else `broadcast`. */
  mode?: Mode;
  /** `earliest`, `latest`, or a cursor (`"<p>:<offset>,..."` or a Map) to resume strictly after.
   * For a group it only matters when the group is created. */
  from?: "earliest" | "latest" | string | ReadonlyMap<number, string>;
  /** Broadcast: start at the first message at or after this epoch time. */
  fromTimeMs?: number;
  /** Credit: at most this many un-acked messages outstanding on the socket (default 100). */
  maxInFlight?: number;
  ackTimeoutMs?: number;
  maxDeliveries?: number;
  /** Groups: a failed delivery (a nack without a delay, an ack timeout) comes again after this,
   * times `retryBackoffMultiplier` (2) for each further one, at most `retryBackoffMaxMs`. */
  retryBackoffMs?: number;
  retryBackoffMultiplier?: number;
  retryBackoffMaxMs?: number;
  /** At-most-once: the gateway acks as it sends; `ack()` does nothing. */
  autoAck?: boolean;
  /** Header filters, all of which must match: `{tag: ["a", "b"]}` is `filter=tag:a,b`. */
  filter?: Record<string, string | readonly string[]>;
  /** Broadcast: the socket is closed while messages of about this many bytes wait to be read
   * (default 16 MiB), and resumed from the cursor once half of them were (nothing lost, nothing
   * repeated). Groups are bounded by `maxInFlight` instead. */
  maxBufferedBytes?: number;
  /** Acks are sent this long after the first pending one (default 5 ms), or at half the credit. */
  ackLingerMs?: number;
  /** Give up after this many failed connects in a row (default 10). */
  maxReconnects?: number;
  reconnect?: BackoffOptions;
}

/** The partitions this subscription is served; `generation` grows on every exclusive rebalance. */
export interface Assignment {
  generation: number;
  partitions: number[];
}

/** A resume past what retention kept: `partition`'s messages from `firstLost` up to (not
 * including) `firstKept` (null: none left) are gone; `count` when the gateway can tell. */
export interface Gap {
  partition: number;
  firstLost: string;
  firstKept: string | null;
  count: number | null;
}

export interface SubscriptionEvents {
  message: [Message];
  assignment: [Assignment];
  /** A resume went past what retention kept: never a silent jump. */
  gap: [Gap];
  state: [SubscriptionState];
  /** A fatal error (the state turns `closed`) or a `FrameError` (the subscription goes on). */
  error: [StreamgateError];
}

const DEFAULT_MAX_BUFFERED_BYTES = 16 * 1024 * 1024;
const RECONNECT_CODES = new Set([1001, 1006, 1011, 1012, 1013, 4008, 4429, 4503]);

interface Connection {
  socket: WebSocketLike;
  settler: Settler;
  refresh: SocketTokenRefresh;
}

/** A subscription; made by `client.subscribe()`. Connects at once, in the background. */
export class Subscription extends Emitter<SubscriptionEvents> implements AsyncIterable<Message> {
  readonly topic: string;
  readonly group: string | undefined;
  readonly mode: Mode;
  /** Broadcast: the last offset received per partition, what a resume sends. */
  readonly cursor: Cursor = new Map();
  state: SubscriptionState = "connecting";
  assignment: Assignment | undefined;
  /** Successful connects: more than 1 means it reconnected. */
  connections = 0;
  /** Every range found lost on a resume, in arrival order (also the `gap` event). */
  readonly gaps: Gap[] = [];
  private readonly transport: Transport;
  private readonly WebSocketImpl: WebSocketConstructor;
  private readonly options: SubscribeOptions;
  private start: string | undefined;
  private connection: Connection | undefined;
  private readonly reconnects: Reconnects;
  private readonly retryHooks: RetryHooks = {
    stopped: () => this.closing,
    waiting: () => this.setState("reconnecting"),
    giveUp: (error) => this.fail(error),
  };
  private readonly queue: Message[] = [];
  private readonly queuedSizes: number[] = [];
  private queuedBytes = 0;
  /** Broadcast closed its socket because too much waited unread: reconnect once it is read. */
  private heldBack = false;
  private readonly readers = new Readers<Message>();
  private failure: StreamgateError | undefined;
  private closing = false;
  /** A 4401 already led to a fresh token since the last assignment: another one is fatal. */
  private refreshedToken = false;

  constructor(transport: Transport, WebSocketImpl: WebSocketConstructor,
              options: SubscribeOptions) {
    super();
    this.transport = transport;
    this.WebSocketImpl = WebSocketImpl;
    this.options = options;
    this.topic = options.topic;
    this.group = options.group;
    this.mode = options.mode ?? (options.group === undefined ? "broadcast" : "exclusive");
    this.reconnects = new Reconnects(options.reconnect, options.maxReconnects);
    const from = options.from;
    this.start = from instanceof Map ? formatCursor(from) : from as string | undefined;
    if (this.mode === "broadcast" && this.start !== undefined
        && this.start !== "earliest" && this.start !== "latest") {
      // the cursor given is where a resume starts until messages move it on
      for (const [p, o] of parseCursor(this.start)) this.cursor.set(p, o);
    }
    void this.connectLoop(true);
  }

  [Symbol.asyncIterator](): AsyncIterator<Message> {
    return {
      next: () => this.next(),
      return: async () => {
        await this.close();
        return { done: true, value: undefined };
      },
    };
  }

  /** The next message: messages go to `message` listeners when there are any, else they queue
   * here. Rejects with the fatal error that ended the subscription. */
  next(): Promise<IteratorResult<Message>> {
    const message = this.queue.shift();
    if (message !== undefined) {
      this.queuedBytes -= this.queuedSizes.shift() ?? 0;
      this.resumeWhenRead();
      return Promise.resolve({ done: false, value: message });
    }
    if (this.failure !== undefined) return Promise.reject(this.failure);
    if (this.state === "closed") return Promise.resolve({ done: true, value: undefined });
    return this.readers.wait();
  }

  /** Send pending acks and close the socket; the iteration ends. Idempotent. */
  async close(): Promise<void> {
    if (this.state === "closed") return;
    this.closing = true;
    this.reconnects.wake();
    const connection = this.connection;
    this.connection = undefined;
    if (connection !== undefined) {
      connection.refresh.cancel();
      connection.settler.flush();
      connection.socket.close(1000, "client closing");
    }
    this.setState("closed");
    this.readers.end();
  }

  // --- connecting --------------------------------------------------------------------------------

  private connectLoop(first: boolean): Promise<void> {
    return this.reconnects.run(async () => {
      if (first && this.needsPinnedLatest()) await this.pinLatest();
      await this.connect();
    }, this.retryHooks);
  }

  private needsPinnedLatest(): boolean {
    const latest = this.start === undefined || this.start === "latest";
    return this.mode === "broadcast" && latest && this.cursor.size === 0
      && this.options.fromTimeMs === undefined;
  }

  /** Broadcast `latest` becomes an explicit cursor of each partition's last offset, so a resume
   * after a drop starts there rather than at whatever is latest by then. */
  private async pinLatest(): Promise<void> {
    const path = `/v1/topics/${encodeURIComponent(this.topic)}`;
    const answer = await this.transport.request<api.TopicDetails>("GET", path);
    for (const detail of answer.body.partition_details) {
      if (detail.last_offset) this.cursor.set(detail.partition, detail.last_offset);
    }
    // partitions that were empty are absent from the cursor: read from their first entry
    this.start = "earliest";
  }

  /** Open one socket; resolves once it is open. A refused upgrade rejects with the problem the
   * gateway gives for the same request without the upgrade (the WebSocket API hides it). */
  private async connect(): Promise<void> {
    return this.open(await this.transport.currentToken());
  }

  private open(token: string | undefined): Promise<void> {
    const url = this.subscribeUrl();
    const socket = new this.WebSocketImpl(url);
    const flushAt = Math.floor((this.options.maxInFlight ?? 100) / 2);
    const settler = new Settler(socket, this.options.ackLingerMs ?? 5, flushAt);
    const refresh = new SocketTokenRefresh(this.transport, socket, token);
    return new Promise((resolve, reject) => {
      let opened = false;
      // a close event always follows; without a listener the `ws` package throws the error
      socket.addEventListener("error", () => undefined);
      socket.addEventListener("open", () => {
        opened = true;
        if (this.closing) {
          socket.close(1000, "client closing");
          resolve();
          return;
        }
        this.connection = { socket, settler, refresh };
        this.connections++;
        refresh.start();
        this.setState("connected");
        resolve();
      });
      socket.addEventListener("message", (event) => this.onFrame(socket, settler, event.data));
      socket.addEventListener("close", (event) => {
        refresh.cancel();
        if (!opened && this.closing) {
          resolve();
        } else if (!opened) {
          this.transport.upgradeRefusal(url).then(reject, reject);
        } else {
          this.onClose(socket, event.code, event.reason);
        }
      });
    });
  }

  private subscribeUrl(): string {
    const o = this.options;
    const query = new URLSearchParams({ topic: this.topic, mode: this.mode, batch: "true" });
    if (this.group !== undefined) query.set("group", this.group);
    const start = this.mode === "broadcast" && this.cursor.size > 0
      ? formatCursor(this.cursor) : this.start;
    if (start !== undefined) query.set("from", start);
    if (o.fromTimeMs !== undefined) query.set("from_time_ms", String(o.fromTimeMs));
    const numbers: Array<[string, number | undefined]> = [
      ["max_in_flight", o.maxInFlight], ["ack_timeout_ms", o.ackTimeoutMs],
      ["max_deliveries", o.maxDeliveries], ["retry_backoff_ms", o.retryBackoffMs],
      ["retry_backoff_multiplier", o.retryBackoffMultiplier],
      ["retry_backoff_max_ms", o.retryBackoffMaxMs],
    ];
    for (const [name, value] of numbers) if (value !== undefined) query.set(name, String(value));
    if (o.autoAck) query.set("auto_ack", "true");
    for (const [header, values] of Object.entries(o.filter ?? {})) {
      query.append("filter", `${header}:${([] as string[]).concat(values).join(",")}`);
    }
    return this.transport.url(`/v1/subscribe?${query}`).replace(/^http/, "ws");
  }

  // --- frames ------------------------------------------------------------------------------------

  private onFrame(socket: WebSocketLike, settler: Settler, data: unknown): void {
    if (this.connection?.socket !== socket || typeof data !== "string") return;
    let frame: { type?: string; [field: string]: unknown };
    try {
      frame = JSON.parse(data) as typeof frame;
    } catch {
      this.emit("error", new FrameError("bad-json", "the gateway sent a frame that is not JSON"));
      return;
    }
    if (frame.type === "messages") {
      const frames = frame["messages"] as MessageFrame[];
      this.deliver(frames, settler, data.length / Math.max(1, frames.length));
    } else if (frame.type === "message") {
      this.deliver([frame as unknown as MessageFrame], settler, data.length);
    } else if (frame.type === "assignment") {
      // the connection is fully set up: the next drop backs off from the start again
      this.reconnects.failures = 0;
      this.refreshedToken = false;
      this.assignment = { generation: Number(frame["generation"]),
                          partitions: frame["partitions"] as number[] };
      this.emit("assignment", this.assignment);
    } else if (frame.type === "authenticated") {
      this.connection.refresh.authenticated();
    } else if (frame.type === "gap") {
      const gap = gapOf(frame);
      this.gaps.push(gap);
      this.emit("gap", gap);
    } else if (frame.type === "error") {
      this.emit("error", new FrameError(String(frame["code"]), String(frame["detail"] ?? "")));
    }
  }

  private deliver(frames: MessageFrame[], settler: Settler, bytesEach: number): void {
    // acks only mean something in a group without auto_ack
    const owner = this.mode === "broadcast" || this.options.autoAck ? undefined : settler;
    const listening = this.listenerCount("message") > 0;
    for (const frame of frames) {
      const message = new Message(frame, this.topic, owner);
      if (this.mode === "broadcast") this.cursor.set(message.partition, message.offset);
      if (listening) {
        this.emit("message", message);
      } else {
        if (!this.readers.hand(message)) this.enqueue(message, bytesEach);
      }
    }
  }

  private enqueue(message: Message, bytes: number): void {
    this.queue.push(message);
    this.queuedSizes.push(bytes);
    this.queuedBytes += bytes;
    const limit = this.options.maxBufferedBytes ?? DEFAULT_MAX_BUFFERED_BYTES;
    if (this.mode === "broadcast" && !this.heldBack && this.queuedBytes > limit) {
      // a browser cannot stop reading a WebSocket: leave, and come back from the cursor
      this.heldBack = true;
      const connection = this.connection;
      this.connection = undefined;
      connection?.socket.close(1000, "client buffer full");
      this.setState("reconnecting");
    }
  }

  private resumeWhenRead(): void {
    const limit = this.options.maxBufferedBytes ?? DEFAULT_MAX_BUFFERED_BYTES;
    if (this.heldBack && !this.closing && this.queuedBytes <= limit / 2) {
      this.heldBack = false;
      this.reconnects.failures = 0;
      void this.connectLoop(false);
    }
  }

  // --- closing -----------------------------------------------------------------------------------

  private onClose(socket: WebSocketLike, code: number, reason: string): void {
    const connection = this.connection;
    if (connection?.socket !== socket) return;
    this.connection = undefined;
    if (this.closing) return;
    if (code === 1000) {
      void this.close();
      return;
    }
    if (code === 4401 && this.transport.refreshable && !this.refreshedToken) {
      // the token expired: rejoin once with a fresh one from the provider
      this.refreshedToken = true;
      connection.refresh.forgetTokens();
      this.reconnects.failures++;
      void this.connectLoop(false);
      return;
    }
    if (!RECONNECT_CODES.has(code)) {
      this.fail(closeError(code, reason));
      return;
    }
    this.reconnects.failures++;
    if (this.reconnects.exhausted) {
      this.fail(new ConnectionError(`subscription closed with ${code} ${reason}; giving up`));
      return;
    }
    this.reconnects.minDelayMs = retryInMs(reason);
    void this.connectLoop(false);
  }

  private fail(error: StreamgateError): void {
    if (this.closing) return;
    this.failure = error;
    this.closing = true;
    this.setState("closed");
    this.emit("error", error);
    this.readers.fail(error);
  }

  private setState(state: SubscriptionState): void {
    if (this.state === state || this.state === "closed") return;
    this.state = state;
    this.emit("state", state);
  }
}

/** The typed error of a close code that reconnecting cannot fix. */
export function closeError(code: number, reason: string): StreamgateError {
  const document = { detail: reason || `closed with ${code}` };
  if (code === 4401) return new AuthError(401, { ...document, status: 401 }, code);
  if (code === 4403) return new ForbiddenError(403, { ...document, status: 403 }, code);
  return new SubscriptionClosedError(code, reason);
}

/** A `gap` frame (WebSocket or event stream) as the client types it. */
export function gapOf(frame: { [field: string]: unknown }): Gap {
  return {
    partition: Number(frame["partition"]), firstLost: String(frame["first_lost"]),
    firstKept: (frame["first_kept"] as string | null) ?? null,
    count: (frame["count"] as number | null) ?? null,
  };
}

/** 4429's reason says `retry in <n> s` when the subscribe rate limit refused: wait that long. */
function retryInMs(reason: string): number {
  const match = /retry in (\d+(?:\.\d+)?) s/.exec(reason);
  return match === null ? 0 : Number(match[1]) * 1000;
}
