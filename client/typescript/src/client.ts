/** The entry point: one gateway, one set of credentials; makes producers and subscriptions. */

import { Admin } from "./admin.js";
import { EventSourceConstructor, EventStream, EventsOptions } from "./events.js";
import { FetchLike, TokenProvider, Transport } from "./http.js";
import { Producer, ProducerOptions } from "./producer.js";
import { SubscribeOptions, Subscription, WebSocketConstructor } from "./subscription.js";

export interface ClientOptions {
  /** The gateway's base URL, e.g. `http://localhost:8080`. */
  url: string;
  /** A JWT, sent as `Authorization: Bearer` (and in the WebSocket's auth frame); or a function
   * returning one, asked again whenever the gateway refuses the last (expired) token. */
  token?: string | TokenProvider;
  /** An API key, used when no token is given. */
  apiKey?: string;
  /** The WebSocket class; defaults to the global one (Node 20 has none: pass `ws`'s). */
  WebSocket?: WebSocketConstructor;
  /** The EventSource class for `events()`; defaults to the global one (browsers; Node 20 has
   * none). */
  EventSource?: EventSourceConstructor;
  /** The fetch function; defaults to the global one. */
  fetch?: FetchLike;
  /** Per HTTP request attempt (default 10 s). */
  timeoutMs?: number;
}

export class Client {
  private readonly transport: Transport;
  private readonly WebSocketImpl: WebSocketConstructor | undefined;
  private readonly EventSourceImpl: EventSourceConstructor | undefined;

  constructor(options: ClientOptions) {
    this.transport = new Transport(options.url, { token: options.token, apiKey: options.apiKey },
                                   options.fetch, options.timeoutMs ?? 10_000);
    this.WebSocketImpl = options.WebSocket
      ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    this.EventSourceImpl = options.EventSource
      ?? (globalThis as { EventSource?: EventSourceConstructor }).EventSource;
  }

  /** A producer with its own batches, idempotency keys and publish WebSocket. */
  producer(options: ProducerOptions = {}): Producer {
    return new Producer(this.transport, options, this.WebSocketImpl);
  }

  /** Subscribe to a topic over a WebSocket; connects at once, in the background. */
  subscribe(options: SubscribeOptions): Subscription {
    if (this.WebSocketImpl === undefined) {
      throw new TypeError("no global WebSocket: pass the 'WebSocket' option (e.g. from 'ws')");
    }
    return new Subscription(this.transport, this.WebSocketImpl, options);
  }

  /** A broadcast subscription to `topic` over Server-Sent Events (the platform's EventSource,
   * opened with a minted event token, never the credentials); connects at once, in the
   * background. */
  events(topic: string, options: EventsOptions = {}): EventStream {
    if (this.EventSourceImpl === undefined) {
      throw new TypeError("no global EventSource (browsers have one; Node 20 has none): pass the "
                          + "'EventSource' option, or use subscribe() over a WebSocket");
    }
    return new EventStream(this.transport, this.EventSourceImpl, topic, options);
  }

  /** Topic and group administration. */
  admin(): Admin {
    return new Admin(this.transport);
  }
}
