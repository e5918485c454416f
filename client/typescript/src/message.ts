/**
 * A delivered message and the settler that turns its ack/nack/extend into few frames: the gateway
 * sends more only as acks come back (credit), so acks leave a few milliseconds after they are made,
 * or at once when they would return half the credit.
 */

import { fromBase64 } from "./base64.js";

/** The gateway's limit on references per settle frame. */
export const MAX_REFS_PER_FRAME = 10_000;

/** The `message` frame's fields, as the gateway sends them. */
export interface MessageFrame {
  topic?: string;
  partition: number;
  offset: string;
  key?: string | null;
  value?: unknown;
  value_b64?: string;
  headers?: Record<string, string> | null;
  timestamp_ms?: number;
  delivery_count?: number;
}

type Action = "ack" | "nack" | "extend";

/** The socket a settler writes to: only what it needs of a WebSocket. */
export interface FrameSink {
  readonly readyState: number;
  send(data: string): void;
}

const OPEN = 1;

/** Collects the settles of one connection; dropped with it, because the gateway redelivers what a
 * closed connection held and ignores acks for messages the socket no longer holds. */
export class Settler {
  private readonly socket: FrameSink;
  private readonly lingerMs: number;
  private readonly flushAt: number;
  private pending = new Map<string, { action: Action; delayMs: number;
                                      refs: Array<{ partition: number; offset: string }> }>();
  private count = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(socket: FrameSink, lingerMs: number, flushAt: number) {
    this.socket = socket;
    this.lingerMs = lingerMs;
    this.flushAt = Math.max(1, flushAt);
  }

  add(action: Action, partition: number, offset: string, delayMs = 0): void {
    if (this.socket.readyState !== OPEN) return;
    const slot = `${action}/${delayMs}`;
    let entry = this.pending.get(slot);
    if (entry === undefined) {
      entry = { action, delayMs, refs: [] };
      this.pending.set(slot, entry);
    }
    entry.refs.push({ partition, offset });
    this.count++;
    if (this.count >= this.flushAt) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), this.lingerMs);
  }

  /** One settle frame of its own, at once (rare ones, such as a reject with its reason). */
  sendNow(action: string, partition: number, offset: string, extra: Record<string, unknown>): void {
    if (this.socket.readyState !== OPEN) return;
    this.socket.send(JSON.stringify({ type: action, messages: [{ partition, offset }], ...extra }));
  }

  /** Send every pending settle now. */
  flush(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    const pending = this.pending;
    this.pending = new Map();
    this.count = 0;
    if (this.socket.readyState !== OPEN) return;
    for (const { action, delayMs, refs } of pending.values()) {
      for (let start = 0; start < refs.length; start += MAX_REFS_PER_FRAME) {
        const frame: Record<string, unknown> = {
          type: action, messages: refs.slice(start, start + MAX_REFS_PER_FRAME),
        };
        if (action === "nack") frame["delay_ms"] = delayMs;
        this.socket.send(JSON.stringify(frame));
      }
    }
  }
}

/** One delivered message. In a group (without `autoAck`), `ack()` it when done, or `nack()` or
 * `extend()` or `reject()` it; in broadcast mode these do nothing. */
export class Message {
  readonly topic: string;
  readonly partition: number;
  readonly offset: string;
  readonly key: string | null;
  /** The JSON value (undefined for a binary value: see `valueBytes`). */
  readonly value: unknown;
  /** A binary value as the gateway sent it (base64), else undefined. */
  readonly valueB64: string | undefined;
  readonly headers: Record<string, string>;
  readonly timestampMs: number;
  /** 1 on first delivery; grows with every redelivery. */
  readonly deliveryCount: number;
  private readonly settler: Settler | undefined;

  constructor(frame: MessageFrame, topic: string, settler: Settler | undefined) {
    this.topic = frame.topic ?? topic;
    this.partition = frame.partition;
    this.offset = frame.offset;
    this.key = frame.key ?? null;
    this.value = frame.value;
    this.valueB64 = frame.value_b64;
    this.headers = frame.headers ?? {};
    this.timestampMs = frame.timestamp_ms ?? 0;
    this.deliveryCount = frame.delivery_count ?? 1;
    this.settler = settler;
  }

  /** The decoded bytes of a binary value, undefined for a JSON value. */
  get valueBytes(): Uint8Array | undefined {
    return this.valueB64 === undefined ? undefined : fromBase64(this.valueB64);
  }

  /** Settle the message (batched with other acks into one frame a few milliseconds later). */
  ack(): void {
    this.settler?.add("ack", this.partition, this.offset);
  }

  /** Give the message back: it is redelivered after `delayMs` (0: at once). */
  nack(delayMs = 0): void {
    this.settler?.add("nack", this.partition, this.offset, Math.max(0, Math.trunc(delayMs)));
  }

  /** Restart the message's ack timeout: it is still being worked on. */
  extend(): void {
    this.settler?.add("extend", this.partition, this.offset);
  }

  /** The message can never be processed: to the dead-letter topic now (`reason` lands in its
   * `sg-dlq-reason` header), whatever the group's maxDeliveries says. */
  reject(reason?: string): void {
    this.settler?.sendNow("reject", this.partition, this.offset,
                          reason === undefined ? {} : { reason });
  }
}
