/**
 * One HTTP request to the gateway: credentials, a timeout, and error answers turned into typed
 * errors. Everything else (retries, batching) lives with the callers.
 */

import { ConnectionError, ProblemDocument, problemError, retryAfterMs } from "./errors.js";

/** The `fetch` this client calls: the global one unless another is injected. */
export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

/** How the client proves who it is: a JWT (preferred when both are given) or an API key. */
export interface Credentials {
  token?: string | undefined;
  apiKey?: string | undefined;
}

/** The `Authorization` header for the credentials; none without credentials. */
export function authHeaders(credentials: Credentials): Record<string, string> {
  if (credentials.token) return { Authorization: `Bearer ${credentials.token}` };
  if (credentials.apiKey) return { Authorization: `ApiKey ${credentials.apiKey}` };
  return {};
}

export interface RequestOptions {
  body?: string;
  headers?: Record<string, string>;
  timeoutMs?: number;
}

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
    const url = this.url(path);
    const headers: Record<string, string> = {
      ...authHeaders(this.credentials), ...options.headers,
    };
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
