/**
 * Publishing over one WebSocket (`GET /v1/publish`): frames matched to their answers by id, at most
 * the gateway's `max_in_flight` awaiting an answer, and what a dropped connection left unanswered
 * sent again on the next one, in its original order, under the same ids and idempotency keys.
 */

import { ConnectionError, ProblemError, StreamgateError, problemError } from "./errors.js";
import { Transport } from "./http.js";
import type * as api from "./openapi.gen.js";
import { WebSocketConstructor, WebSocketLike, closeError } from "./subscription.js";
import { SocketTokenRefresh } from "./token_refresh.js";

/** 200 with offsets, or 202 with a count for acks "0": a `published` frame carries the same. */
export type PublishAnswer = api.PublishResults | api.PublishAccepted;

/** Close codes after which a fresh connection may succeed: the gateway going away or restarting,
 * a network drop, a refusal for load. */
const RECONNECT_CODES = new Set([1001, 1006, 1011, 1012, 1013, 4008, 4429, 4503]);

/** The attempt should go over HTTP: the gateway does not offer `/v1/publish` (`forGood`), or this
 * frame is larger than the gateway takes on a socket. */
export class UseHttp extends StreamgateError {
  readonly forGood: boolean;

  constructor(forGood: boolean) {
    super(forGood ? "the gateway does not offer /v1/publish"
      : "the batch is larger than a publish frame may be");
    this.forGood = forGood;
  }
}

interface Connection {
  readonly socket: WebSocketLike;
  /** Sends a fresh token before the one the socket authenticated with expires. */
  readonly refresh: SocketTokenRefresh;
  opened: boolean;
  /** Set by the `ready` frame: nothing is sent before it. */
  ready: boolean;
  maxInFlight: number;
  maxFrameBytes: number;
  inFlight: number;
}

/** A frame not answered yet. */
interface Pending {
  readonly id: string;
  readonly text: string;
  readonly resolve: (answer: PublishAnswer) => void;
  readonly reject: (error: unknown) => void;
  timer: ReturnType<typeof setTimeout> | undefined;
  /** The connection it went out on; undefined while it waits to be sent. */
  sentOn: Connection | undefined;
  /** Its caller was already told it timed out: dropped at the next reconnect. */
  abandoned: boolean;
}

/** One producer's publish connection: opened on first use, reopened when it drops with frames
 * unanswered. A connection that cannot be set up fails what waits on it, and the caller's retries
 * (with their backoff) open the next one. */
export class PublishSocket {
  private readonly transport: Transport;
  private readonly WebSocketImpl: WebSocketConstructor;
  /** Every unanswered frame, in the order it was first published. */
  private readonly pending = new Map<string, Pending>();
  /** Frames to send on the current connection once it is ready and has room, in order. */
  private unsent: Pending[] = [];
  private connection: Connection | undefined;
  private frameNumber = 0;
  private opening = false;
  private closed = false;
  /** Whether a 4401 already led to a fresh token since the last `ready` (another one is then
   * final). */
  private refreshedToken = false;

  constructor(transport: Transport, WebSocketImpl: WebSocketConstructor) {
    this.transport = transport;
    this.WebSocketImpl = WebSocketImpl;
  }

  /** Send one publish frame (`fields`: its members after `type` and `id`, as JSON text) and wait
   * for its answer: a `problem` frame rejects with the `ProblemError` HTTP would have given. */
  publish(fields: string, timeoutMs: number): Promise<PublishAnswer> {
    if (this.closed) return Promise.reject(new StreamgateError("the producer is closed"));
    return new Promise((resolve, reject) => {
      const id = `r${++this.frameNumber}`;
      const entry: Pending = {
        id, text: `{"type":"publish","id":"${id}",${fields}}`, resolve, reject,
        timer: undefined, sentOn: undefined, abandoned: false,
      };
      entry.timer = setTimeout(() => this.expire(entry, timeoutMs), timeoutMs);
      this.pending.set(id, entry);
      this.unsent.push(entry);
      this.pump();
    });
  }

  /** Close the connection; frames still unanswered fail with `error`. Idempotent. */
  close(error: StreamgateError = new StreamgateError("the producer is closed")): void {
    if (this.closed) return;
    this.closed = true;
    const connection = this.connection;
    this.connection = undefined;
    connection?.refresh.cancel();
    connection?.socket.close(1000, "producer closing");
    this.failAll(error);
  }

  /** Send what waits, as far as the connection's room allows; open one if there is none. */
  private pump(): void {
    const connection = this.connection;
    if (connection === undefined) {
      if (!this.opening) void this.connect();
      return;
    }
    if (!connection.ready) return;
    while (connection.inFlight < connection.maxInFlight) {
      const entry = this.unsent.shift();
      if (entry === undefined) return;
      if (!fits(entry.text, connection.maxFrameBytes)) {
        this.settle(entry);
        entry.reject(new UseHttp(false));
        continue;
      }
      entry.sentOn = connection;
      connection.inFlight++;
      connection.socket.send(entry.text);
    }
  }

  // --- connecting --------------------------------------------------------------------------------

  private async connect(): Promise<void> {
    this.opening = true;
    try {
      const token = await this.transport.currentToken();
      if (this.closed) return;
      await this.open(token);
    } catch (error) {
      this.failAll(error instanceof StreamgateError
        ? error : new ConnectionError(String(error), { cause: error }));
    } finally {
      this.opening = false;
      // frames that waited on a socket given up before it opened need the next one
      if (this.connection === undefined && this.unsent.length > 0) this.pump();
    }
  }

  /** Open a socket (the current connection from now on); resolves once it is open or given up,
   * rejects with why the upgrade failed. */
  private open(token: string | undefined): Promise<void> {
    const url = this.transport.url("/v1/publish").replace(/^http/, "ws");
    const socket = new this.WebSocketImpl(url);
    const connection: Connection = {
      socket, refresh: new SocketTokenRefresh(this.transport, socket, token), opened: false,
      ready: false, maxInFlight: 1, maxFrameBytes: 0, inFlight: 0,
    };
    this.connection = connection;
    return new Promise((resolve, reject) => {
      // a close event always follows; without a listener the `ws` package throws the error
      socket.addEventListener("error", () => undefined);
      socket.addEventListener("open", () => {
        connection.opened = true;
        if (this.connection === connection) connection.refresh.start();
        else socket.close(1000, "producer closing");
        resolve();
      });
      socket.addEventListener("message", (event) => this.onFrame(connection, event.data));
      socket.addEventListener("close", (event) => {
        connection.refresh.cancel();
        if (connection.opened) {
          this.onClose(connection, event.code, event.reason);
        } else if (this.connection !== connection) {
          resolve();
        } else {
          this.connection = undefined;
          this.refusal(url).then(reject, reject);
        }
      });
    });
  }

  /** Why an upgrade failed (browsers do not tell the status): a plain GET of `/v1/publish` is
   * answered 404 by a gateway that does not offer it. */
  private async refusal(wsUrl: string): Promise<StreamgateError> {
    const error = await this.transport.upgradeRefusal(wsUrl);
    return error instanceof ProblemError && error.status === 404 ? new UseHttp(true) : error;
  }

  // --- frames ------------------------------------------------------------------------------------

  private onFrame(connection: Connection, data: unknown): void {
    if (this.connection !== connection || typeof data !== "string") return;
    let frame: { type?: unknown; id?: unknown; [field: string]: unknown };
    try {
      frame = JSON.parse(data) as typeof frame;
    } catch {
      return;
    }
    if (frame.type === "ready") {
      connection.ready = true;
      connection.maxInFlight = Math.max(1, Number(frame["max_in_flight"]) || 1);
      connection.maxFrameBytes = Number(frame["max_frame_bytes"]) || Infinity;
      this.refreshedToken = false;
      this.pump();
      return;
    }
    if (frame.type === "authenticated") {
      // a fresh token was taken: not an answer, whatever its fields
      connection.refresh.authenticated();
      return;
    }
    if (frame.type !== "published" && frame.type !== "problem") return;
    const entry = this.pending.get(String(frame.id));
    if (entry === undefined || entry.sentOn !== connection) return;
    connection.inFlight--;
    this.settle(entry);
    if (!entry.abandoned) this.answer(entry, frame);
    this.pump();
  }

  private answer(entry: Pending, frame: { type?: unknown; [field: string]: unknown }): void {
    if (frame.type === "published") {
      entry.resolve(frame as unknown as PublishAnswer);
      return;
    }
    const document = (frame["problem"] ?? {}) as Record<string, unknown>;
    const status = Number(document["status"]) || 500;
    const retryAfterS = frame["retry_after_s"];
    entry.reject(problemError(status, document,
                              typeof retryAfterS === "number" ? retryAfterS * 1000 : undefined));
  }

  /** No answer in time: the caller may retry (under the same idempotency key). The connection is
   * stuck (in its handshake, or on frames it does not answer): the others go on a fresh one. */
  private expire(entry: Pending, timeoutMs: number): void {
    entry.timer = undefined;
    entry.abandoned = true;
    entry.reject(new ConnectionError(`no answer to a publish frame in ${timeoutMs} ms`));
    if (entry.sentOn === undefined) {
      this.settle(entry);
      this.unsent = this.unsent.filter((waiting) => waiting !== entry);
    }
    const connection = this.connection;
    if (connection !== undefined) {
      connection.socket.close(4000, "no answer");
      this.reconnect(connection);
    }
  }

  /** Forget a frame: answered, timed out before it was sent, or refused. */
  private settle(entry: Pending): void {
    clearTimeout(entry.timer);
    entry.timer = undefined;
    this.pending.delete(entry.id);
  }

  // --- closing -----------------------------------------------------------------------------------

  private onClose(connection: Connection, code: number, reason: string): void {
    if (this.connection !== connection) return;
    if (code === 4401 && this.transport.refreshable && !this.refreshedToken) {
      // the token expired (or was stale from the start): once more with a fresh one
      this.refreshedToken = true;
      connection.refresh.forgetTokens();
      this.reconnect(connection);
    } else if (connection.ready && RECONNECT_CODES.has(code)) {
      this.reconnect(connection);
    } else {
      this.connection = undefined;
      this.failAll(closeFailure(code, reason));
    }
  }

  /** Leave `connection` and send everything unanswered again on a new one, in original order;
   * frames whose caller already gave up are dropped. */
  private reconnect(connection: Connection): void {
    if (this.connection === connection) this.connection = undefined;
    for (const entry of [...this.pending.values()]) {
      if (entry.abandoned) this.settle(entry);
      else entry.sentOn = undefined;
    }
    this.unsent = [...this.pending.values()];
    if (this.unsent.length > 0) this.pump();
  }

  private failAll(error: StreamgateError): void {
    const entries = [...this.pending.values()];
    this.unsent = [];
    for (const entry of entries) {
      this.settle(entry);
      if (!entry.abandoned) entry.reject(error);
    }
  }
}

/** Why a connection's close fails what waited on it: a refusal for load says when to come back
 * (as a 429/503 problem, which the caller's retries honour), an auth close is final. */
function closeFailure(code: number, reason: string): StreamgateError {
  if (code === 4401 || code === 4403) return closeError(code, reason);
  if (code === 4429 || code === 4503) {
    const status = code - 4000;
    return problemError(status, { status, detail: reason || `closed with ${code}` },
                        retryInMs(reason));
  }
  return new ConnectionError(`the publish socket closed with ${code} ${reason}`.trim());
}

/** A 4429's reason says `retry in <n> s` when a rate limit refused: wait that long. */
function retryInMs(reason: string): number | undefined {
  const match = /retry in (\d+(?:\.\d+)?) s/.exec(reason);
  return match === null ? undefined : Number(match[1]) * 1000;
}

/** Whether `text` is at most `maxBytes` of UTF-8 (encoded only when it could be too long). */
function fits(text: string, maxBytes: number): boolean {
  if (text.length * 3 <= maxBytes) return true;
  return new TextEncoder().encode(text).length <= maxBytes;
}
