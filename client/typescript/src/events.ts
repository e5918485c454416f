/**
 * A broadcast subscription over Server-Sent Events (`GET /v1/topics/{topic}/events`) through the
 * platform's `EventSource`: for browsers and proxies that carry plain HTTP but not WebSockets.
 *
 * An `EventSource` cannot send headers, so every connect first mints a short-lived event token
 * with the client's credentials (`POST /v1/topics/{topic}/events/token`) and opens the URL it
 * names: the API key or JWT never appears in a URL. The browser reconnects by itself after a
 * dropped stream (sending `Last-Event-ID`); when it gives up (the token expired: 401) or the
 * gateway ends the stream with `credentials-expired`, a new token is minted and a new
 * `EventSource` resumes with `last_event_id=`, so nothing is skipped and nothing repeated.
 */

import { BackoffOptions, Reconnects, RetryHooks } from "./backoff.js";
import { formatCursor } from "./cursor.js";
import { Emitter } from "./emitter.js";
import {
  ConnectionError, FrameError, StreamgateError, problemError, retryAfterMs,
} from "./errors.js";
import { Transport, problemDocument } from "./http.js";
import { Message, MessageFrame } from "./message.js";
import type * as api from "./openapi.gen.js";
import { Readers } from "./readers.js";
import { Gap, closeError, gapOf } from "./subscription.js";

/** The part of the WHATWG `EventSource` this client uses: the browser's fits. */
export interface EventSourceLike {
  readonly readyState: number;
  close(): void;
  addEventListener(type: "open", listener: () => void): void;
  addEventListener(type: "message" | "gap" | "error",
                   listener: (event: { data?: unknown; lastEventId?: string }) => void): void;
}

export type EventSourceConstructor = new (url: string) => EventSourceLike;

export type EventStreamState = "connecting" | "connected" | "reconnecting" | "closed";

export interface EventsOptions {
  /** `earliest`, `latest` (default) or a cursor (`"<p>:<offset>,..."` or a Map) to resume
   * strictly after. */
  from?: "earliest" | "latest" | string | ReadonlyMap<number, string>;
  /** Start at the first message at or after this epoch time. */
  fromTimeMs?: number;
  /** Header filters, all of which must match: `{tag: ["a", "b"]}` is `filter=tag:a,b`. */
  filter?: Record<string, string | readonly string[]>;
  /** Only these partitions (default: every partition, also those added later). */
  partitions?: readonly number[];
  /** Messages the gateway queues for the stream at once (default 100). */
  maxInFlight?: number;
  /** Lifetime of each minted event token, 1-300 s (the gateway's default: 60). A stream outlives
   * its token; only a reconnect needs a valid one. */
  tokenTtlS?: number;
  /** Give up after this many failed connects in a row (default 10). */
  maxReconnects?: number;
  reconnect?: BackoffOptions;
}

export interface EventStreamEvents {
  message: [Message];
  /** A resume went past what retention kept: never a silent jump. */
  gap: [Gap];
  state: [EventStreamState];
  /** A fatal error (the state turns `closed`) or a `FrameError` (the stream goes on). */
  error: [StreamgateError];
}

const CONNECTING = 0;
const CLOSED = 2;
/** Error events after which the same credentials cannot go on: mint again (fresh credentials). */
const REMINT_CODES = new Set(["credentials-expired", "unauthenticated"]);
/** Error events reconnecting cannot fix, as the WebSocket close codes that mean the same. */
const FATAL_CODES = new Map([["forbidden", 4403], ["topic-not-found", 4404]]);

/** A stream of a topic's messages over Server-Sent Events; made by `client.events()`. Connects
 * at once, in the background; an async iterable of messages that also emits `message`, `gap`,
 * `state` and `error` events. */
export class EventStream extends Emitter<EventStreamEvents> implements AsyncIterable<Message> {
  readonly topic: string;
  /** The `id` of the last message event: where a new stream resumes. */
  lastEventId: string | undefined;
  state: EventStreamState = "connecting";
  /** Streams opened (by this client or by the browser's own reconnects). */
  connections = 0;
  /** Event tokens minted: one per `EventSource` this client opened. */
  tokensMinted = 0;
  /** When the last minted token stops opening streams (epoch ms): the browser's own reconnects
   * after that are refused, and this client mints again. */
  tokenExpiresAtMs: number | undefined;
  readonly gaps: Gap[] = [];
  private readonly transport: Transport;
  private readonly EventSourceImpl: EventSourceConstructor;
  private readonly options: EventsOptions;
  private start: string | undefined;
  private source: EventSourceLike | undefined;
  private readonly reconnects: Reconnects;
  private readonly retryHooks: RetryHooks = {
    stopped: () => this.closing,
    waiting: () => this.setState("reconnecting"),
    giveUp: (error) => this.fail(error),
  };
  private readonly queue: Message[] = [];
  private readonly readers = new Readers<Message>();
  private failure: StreamgateError | undefined;
  private closing = false;

  constructor(transport: Transport, EventSourceImpl: EventSourceConstructor, topic: string,
              options: EventsOptions = {}) {
    super();
    this.transport = transport;
    this.EventSourceImpl = EventSourceImpl;
    this.topic = topic;
    this.options = options;
    this.reconnects = new Reconnects(options.reconnect, options.maxReconnects);
    const from = options.from;
    this.start = from instanceof Map ? formatCursor(from) : from as string | undefined;
    void this.connectLoop(true);
  }

  [Symbol.asyncIterator](): AsyncIterator<Message> {
    return {
      next: () => this.next(),
      return: async () => {
        this.close();
        return { done: true, value: undefined };
      },
    };
  }

  /** The next message: messages go to `message` listeners when there are any, else they queue
   * here. Rejects with the fatal error that ended the stream. */
  next(): Promise<IteratorResult<Message>> {
    const message = this.queue.shift();
    if (message !== undefined) return Promise.resolve({ done: false, value: message });
    if (this.failure !== undefined) return Promise.reject(this.failure);
    if (this.state === "closed") return Promise.resolve({ done: true, value: undefined });
    return this.readers.wait();
  }

  /** Close the `EventSource`; the iteration ends. Idempotent. */
  close(): void {
    if (this.state === "closed") return;
    this.closing = true;
    this.reconnects.wake();
    this.dropSource();
    this.setState("closed");
    this.readers.end();
  }

  // --- connecting --------------------------------------------------------------------------------

  private connectLoop(first: boolean): Promise<void> {
    return this.reconnects.run(async () => {
      if (first && this.needsPinnedLatest()) await this.pinLatest();
      await this.open(await this.mintUrl());
    }, this.retryHooks);
  }

  private needsPinnedLatest(): boolean {
    return (this.start === undefined || this.start === "latest")
      && this.options.fromTimeMs === undefined;
  }

  /** `latest` becomes each partition's last offset, so a resume before the first message
   * starts there rather than at whatever is latest by then. */
  private async pinLatest(): Promise<void> {
    const path = `/v1/topics/${encodeURIComponent(this.topic)}`;
    const answer = await this.transport.request<api.TopicDetails>("GET", path);
    const cursor = new Map<number, string>();
    for (const detail of answer.body.partition_details) {
      if (detail.last_offset) cursor.set(detail.partition, detail.last_offset);
    }
    // partitions absent from a cursor (empty ones) are read from their first entry
    this.start = cursor.size > 0 ? formatCursor(cursor) : "earliest";
  }

  /** A fresh event token's URL with this stream's parameters: the last event id when there is
   * one, else where the stream was asked to start. */
  private async mintUrl(): Promise<string> {
    const path = `/v1/topics/${encodeURIComponent(this.topic)}/events/token`;
    const ttl = this.options.tokenTtlS;
    const body: api.EventTokenRequest = ttl === undefined ? {} : { ttl_s: ttl };
    const answer = await this.transport.request<api.EventToken>(
      "POST", path, { body: JSON.stringify(body) });
    this.tokensMinted++;
    this.tokenExpiresAtMs = answer.body.expires_at_ms;
    const query = new URLSearchParams();
    const o = this.options;
    if (this.lastEventId !== undefined) {
      query.set("last_event_id", this.lastEventId);
    } else {
      if (this.start !== undefined) query.set("from", this.start);
      if (o.fromTimeMs !== undefined) query.set("from_time_ms", String(o.fromTimeMs));
    }
    for (const [header, values] of Object.entries(o.filter ?? {})) {
      query.append("filter", `${header}:${([] as string[]).concat(values).join(",")}`);
    }
    if (o.partitions !== undefined) query.set("partitions", o.partitions.join(","));
    if (o.maxInFlight !== undefined) query.set("max_in_flight", String(o.maxInFlight));
    const extra = query.toString();
    return this.transport.url(answer.body.url) + (extra ? `&${extra}` : "");
  }

  /** Open one `EventSource`; resolves once it is open. A refused stream rejects with the problem
   * the gateway answers the same URL with (the `EventSource` API hides it). */
  private open(url: string): Promise<void> {
    const source = new this.EventSourceImpl(url);
    return new Promise((resolve, reject) => {
      let opened = false;
      source.addEventListener("open", () => {
        if (this.closing) {
          source.close();
          resolve();
          return;
        }
        opened = true;
        this.source = source;
        this.connections++;
        this.reconnects.failures = 0;
        this.setState("connected");
        resolve();
      });
      source.addEventListener("message", (event) => this.onMessage(source, event));
      source.addEventListener("gap", (event) => this.onGap(source, event));
      source.addEventListener("error", (event) => {
        if (typeof event.data === "string") {
          this.onErrorEvent(source, event.data);
        } else if (!opened && source.readyState === CLOSED) {
          source.close();
          if (this.closing) resolve();
          else this.refusal(url).then(reject, reject);
        } else if (opened) {
          this.onDrop(source);
        }
      });
    });
  }

  /** Why a stream was refused: the same URL fetched, its problem document read (the body of a
   * stream that does open after all is not read). */
  private async refusal(url: string): Promise<StreamgateError> {
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), this.transport.timeoutMs);
    try {
      const response = await this.transport.fetch(url, {
        headers: { Accept: "text/event-stream" }, signal: abort.signal,
      });
      if (response.status === 401) {
        // the mint took the credentials: the token itself expired on its way (a slow open, a
        // long backoff); another mint will tell whether the credentials are still good
        return new ConnectionError(`the event token was refused: ${await response.text()}`);
      }
      if (response.status >= 400) {
        return problemError(response.status, problemDocument(response.status,
                                                             await response.text()),
                            retryAfterMs(response.headers));
      }
      return new ConnectionError(`the event stream ${url} broke off`);
    } catch (error) {
      return new ConnectionError(`connect ${url}: ${String(error)}`, { cause: error });
    } finally {
      clearTimeout(timer);
      abort.abort();
    }
  }

  // --- events ------------------------------------------------------------------------------------

  private onMessage(source: EventSourceLike, event: { data?: unknown; lastEventId?: string }):
      void {
    if (this.source !== source || typeof event.data !== "string") return;
    const frame = this.parse(event.data) as MessageFrame | undefined;
    if (frame === undefined) return;
    if (event.lastEventId) this.lastEventId = event.lastEventId;
    const message = new Message(frame, this.topic, undefined);
    if (this.listenerCount("message") > 0) {
      this.emit("message", message);
      return;
    }
    if (!this.readers.hand(message)) this.queue.push(message);
  }

  private onGap(source: EventSourceLike, event: { data?: unknown }): void {
    if (this.source !== source || typeof event.data !== "string") return;
    const frame = this.parse(event.data);
    if (frame === undefined) return;
    const gap = gapOf(frame);
    this.gaps.push(gap);
    this.emit("gap", gap);
  }

  /** An `event: error` the gateway wrote: a fatal one ends the stream, expired credentials mint
   * again, the rest are told and the stream goes on (the browser reconnects if it ended). */
  private onErrorEvent(source: EventSourceLike, data: string): void {
    if (this.source !== source) return;
    const frame = this.parse(data);
    if (frame === undefined) return;
    const code = String(frame["code"]);
    const detail = String(frame["detail"] ?? "");
    const fatal = FATAL_CODES.get(code);
    if (fatal !== undefined) {
      this.fail(closeError(fatal, detail));
    } else if (REMINT_CODES.has(code)) {
      // the provider is asked for a fresh token (a static one then fails the mint: fatal)
      this.transport.forgetToken(undefined);
      this.onDrop(source, true);
    } else {
      this.emit("error", new FrameError(code, detail));
    }
  }

  /** The stream ended: the browser reconnects by itself (CONNECTING) unless it gave up or the
   * credentials behind the token expired; then this client opens a new stream. */
  private onDrop(source: EventSourceLike, remint = false): void {
    if (this.source !== source || this.closing) return;
    if (!remint && source.readyState === CONNECTING) {
      this.setState("reconnecting");
      return;
    }
    this.dropSource();
    this.reconnects.failures++;
    void this.connectLoop(false);
  }

  private parse(data: string): { [field: string]: unknown } | undefined {
    try {
      const parsed: unknown = JSON.parse(data);
      if (parsed !== null && typeof parsed === "object") return parsed as Record<string, unknown>;
    } catch {
      // told below
    }
    this.emit("error", new FrameError("bad-json", "the gateway sent an event that is not JSON"));
    return undefined;
  }

  // --- closing -----------------------------------------------------------------------------------

  private dropSource(): void {
    const source = this.source;
    this.source = undefined;
    source?.close();
  }

  private fail(error: StreamgateError): void {
    if (this.closing) return;
    this.failure = error;
    this.closing = true;
    this.dropSource();
    this.setState("closed");
    this.emit("error", error);
    this.readers.fail(error);
  }

  private setState(state: EventStreamState): void {
    if (this.state === state || this.state === "closed") return;
    this.state = state;
    this.emit("state", state);
  }
}
