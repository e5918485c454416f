/**
 * One HTTP request to the gateway: credentials, a timeout, and error answers turned into typed
 * errors. Everything else (retries, batching) lives with the callers.
 */

import {
  ConnectionError, ProblemDocument, ProblemError, StreamgateError, problemError, retryAfterMs,
} from "./errors.js";

/** The `fetch` this client calls: the global one unless another is injected. */
export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

/** Fetches a current JWT: called for the first request, then again whenever the gateway refuses
 * the one it gave (401, or a WebSocket closed with 4401 once the token expired). */
export type TokenProvider = () => string | Promise<string>;

/** How the client proves who it is: a JWT or a provider of them (preferred when both are given),
 * or an API key. */
export interface Credentials {
  token?: string | TokenProvider | undefined;
  apiKey?: string | undefined;
}

export interface RequestOptions {
  body?: string;
  headers?: Record<string, string>;
  timeoutMs?: number;
}

/** A request document of the OpenAPI type `T` whose optional fields may also be undefined
 * (`JSON.stringify` leaves those out): filled from options in one object literal, still checked
 * field by field against the document's type. */
export type Omittable<T> = { [K in keyof T]: {} extends Pick<T, K> ? T[K] | undefined : T[K] };

/** A decoded successful answer. */
export interface Answer<T> {
  status: number;
  headers: Headers;
  body: T;
}

/** Requests against one gateway with one set of credentials. */
export class Transport {
  readonly baseUrl: string;
  readonly credentials: Credentials;
  readonly timeoutMs: number;
  private readonly fetchImpl: FetchLike;
  /** The provider's latest token, shared by every request and subscription of this client. */
  private token: { promise: Promise<string>; value?: string } | undefined;

  constructor(baseUrl: string, credentials: Credentials, fetchImpl: FetchLike | undefined,
              timeoutMs: number) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.credentials = credentials;
    this.timeoutMs = timeoutMs;
    const found = fetchImpl ?? (globalThis.fetch as FetchLike | undefined);
    if (found === undefined) throw new TypeError("no global fetch: pass the 'fetch' option");
    // called unbound: a browser's fetch throws when invoked as a method of another object
    this.fetchImpl = (input, init) => found(input, init);
  }

  /** Whether the token comes from a provider that can be asked for a fresh one. */
  get refreshable(): boolean {
    return typeof this.credentials.token === "function";
  }

  /** The JWT to send now (asking the provider the first time), or undefined without one. */
  currentToken(): Promise<string | undefined> {
    const provider = this.credentials.token;
    if (typeof provider !== "function") return Promise.resolve(provider || undefined);
    if (this.token === undefined) {
      const entry: { promise: Promise<string>; value?: string } = {
        promise: Promise.resolve().then(provider),
      };
      // a provider that failed is asked again next time
      entry.promise.then((value) => { entry.value = value; },
                         () => { if (this.token === entry) this.token = undefined; });
      this.token = entry;
    }
    return this.token.promise;
  }

  /** Forget the provider's token that was refused, so the next use asks for a fresh one (unless
   * another caller already did). */
  forgetToken(refused: string | undefined): void {
    if (this.token !== undefined && (refused === undefined || this.token.value === refused)) {
      this.token = undefined;
    }
  }

  /** The `Authorization` header for the credentials; none without credentials. */
  async authHeaders(): Promise<Record<string, string>> {
    return this.headersFor(await this.currentToken());
  }

  private headersFor(token: string | undefined): Record<string, string> {
    if (token) return { Authorization: `Bearer ${token}` };
    if (this.credentials.apiKey) return { Authorization: `ApiKey ${this.credentials.apiKey}` };
    return {};
  }

  /** A bare request with the injected `fetch` (no credentials, no error mapping). */
  fetch(url: string, init?: RequestInit): Promise<Response> {
    return this.fetchImpl(url, init);
  }

  /** The absolute URL of a path such as `/v1/topics`. */
  url(path: string): string {
    return `${this.baseUrl}${path}`;
  }

  /** Send one request; `ProblemError` for a 4xx/5xx answer, `ConnectionError` when there is no
   * answer (refused, reset, timed out). */
  async request<T>(method: string, path: string, options: RequestOptions = {}): Promise<Answer<T>> {
    const token = await this.providedToken();
    try {
      return await this.requestOnce<T>(method, path, options, token);
    } catch (error) {
      if (!(this.refreshable && error instanceof ProblemError && error.status === 401)) throw error;
      // the token expired or was revoked: once more with a fresh one
      this.forgetToken(token);
      return this.requestOnce<T>(method, path, options, await this.providedToken());
    }
  }

  /** Why a WebSocket upgrade to `wsUrl` failed (the WebSocket API hides the answer): parameters,
   * credentials, grants and the route itself are checked before the upgrade, so a plain GET of the
   * same URL answers with the same problem; a 400 means the request itself was fine but is not an
   * upgrade, so the failure was the connection's. */
  async upgradeRefusal(wsUrl: string): Promise<StreamgateError> {
    const url = wsUrl.replace(/^ws/, "http");
    try {
      const response = await this.fetch(url, {
        headers: await this.authHeaders(), signal: AbortSignal.timeout(this.timeoutMs),
      });
      const text = await response.text();
      if (response.status > 400) {
        return problemError(response.status, problemDocument(response.status, text),
                            retryAfterMs(response.headers));
      }
    } catch (error) {
      return new ConnectionError(`connect ${wsUrl}: ${String(error)}`, { cause: error });
    }
    return new ConnectionError(`connect ${wsUrl}: the WebSocket upgrade failed`);
  }

  private providedToken(): Promise<string | undefined> {
    return this.currentToken().catch((error: unknown) => {
      throw new ConnectionError(`the token provider failed: ${String(error)}`, { cause: error });
    });
  }

  private async requestOnce<T>(method: string, path: string, options: RequestOptions,
                               token: string | undefined): Promise<Answer<T>> {
    const url = this.url(path);
    const headers: Record<string, string> = { ...this.headersFor(token), ...options.headers };
    if (options.body !== undefined) headers["Content-Type"] = "application/json";
    let response: Response;
    let text: string;
    try {
      response = await this.fetchImpl(url, {
        method, headers, body: options.body ?? null,
        signal: AbortSignal.timeout(options.timeoutMs ?? this.timeoutMs),
      });
      text = await response.text();
    } catch (error) {
      throw new ConnectionError(`${method} ${url}: ${String(error)}`, { cause: error });
    }
    if (response.status >= 400) {
      throw problemError(response.status, problemDocument(response.status, text),
                         retryAfterMs(response.headers));
    }
    return { status: response.status, headers: response.headers, body: parseJson(text) as T };
  }
}

/** The problem document of an error answer; a body that is not one still gives a useful error. */
export function problemDocument(status: number, text: string): ProblemDocument {
  const parsed = parseJson(text);
  if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) {
    return parsed as ProblemDocument;
  }
  return { status, detail: text.slice(0, 500) || `HTTP ${status}` };
}

function parseJson(text: string): unknown {
  if (text === "") return null;
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}
