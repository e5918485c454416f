/**
 * Errors the client raises: one base with a `retriable` flag, and a few leaves carrying the typed
 * fields of what went wrong (an RFC 9457 problem document, a WebSocket close code).
 */

import type * as api from "./openapi.gen.js";

/** HTTP statuses worth another try: the gateway says so (429, 503) or the answer was lost. */
export const RETRIABLE_STATUSES: ReadonlySet<number> = new Set([408, 429, 500, 502, 503, 504]);

/** Base of every error this client raises. */
export class StreamgateError extends Error {
  /** Whether the same request may succeed when tried again. */
  readonly retriable: boolean;

  constructor(message: string, retriable = false, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.retriable = retriable;
  }
}

/** The fields of an RFC 9457 problem document, as the gateway sends them (each may be missing
 * from an answer that is not one: a bare status, a proxy's page). `pointer` is an RFC 6901
 * pointer into the request body (or `/<name>` for a query parameter). */
export interface ProblemDocument extends Partial<api.Problem> {
  [extension: string]: unknown;
}

/** The gateway answered with a problem document (or a bare HTTP error status). */
export class ProblemError extends StreamgateError {
  readonly status: number;
  readonly type: string;
  readonly title: string;
  readonly detail: string;
  readonly instance: string | undefined;
  readonly pointer: string | undefined;
  /** What `Retry-After` asked for, in milliseconds. */
  readonly retryAfterMs: number | undefined;
  /** The whole document, extensions included. */
  readonly document: ProblemDocument;

  constructor(status: number, document: ProblemDocument, retryAfterMs?: number) {
    super(describe(status, document), RETRIABLE_STATUSES.has(status));
    this.status = status;
    this.document = document;
    this.type = document.type ?? "about:blank";
    this.title = document.title ?? "";
    this.detail = document.detail ?? (this.title || `HTTP ${status}`);
    this.instance = document.instance;
    this.pointer = document.pointer;
    this.retryAfterMs = retryAfterMs;
  }
}

/** 401 or close code 4401: credentials missing, rejected or expired. */
export class AuthError extends ProblemError {
  /** The WebSocket close code when a subscription was closed for this reason. */
  readonly closeCode: number | undefined;

  constructor(status: number, document: ProblemDocument, closeCode?: number) {
    super(status, document);
    this.closeCode = closeCode;
  }
}

/** 403 or close code 4403: authenticated, but not granted what was asked. */
export class ForbiddenError extends ProblemError {
  readonly closeCode: number | undefined;

  constructor(status: number, document: ProblemDocument, closeCode?: number) {
    super(status, document);
    this.closeCode = closeCode;
  }
}

/** 409 `unexpected-offset`: a conditional append's expectation did not hold and nothing was
 * written. `index` is the message whose key moved (null: the partition's last offset); read again
 * from `current` and decide again. */
export class UnexpectedOffsetError extends ProblemError {
  readonly index: number | null;
  readonly partition: number | null;
  readonly expected: string;
  readonly current: string;

  constructor(status: number, document: ProblemDocument) {
    super(status, document);
    this.index = typeof document["index"] === "number" ? document["index"] : null;
    this.partition = typeof document["partition"] === "number" ? document["partition"] : null;
    this.expected = String(document["expected"] ?? "");
    this.current = String(document["current"] ?? "");
  }
}

/** One change that made a schema incompatible: where in the new schema (a JSON pointer), its
 * name (`required_added`, `type_narrowed`, ...) and a human line. */
export type SchemaChange = api.SchemaIncompatible["changes"][number];

/** 409 `schema-incompatible`: a schema refused by its compatibility mode, each change named. */
export class SchemaIncompatibleError extends ProblemError {
  readonly compatibility: string;
  readonly changes: SchemaChange[];

  constructor(status: number, document: ProblemDocument) {
    super(status, document);
    this.compatibility = String(document["compatibility"] ?? "");
    const changes = Array.isArray(document["changes"]) ? document["changes"] : [];
    this.changes = changes.map((c: Partial<SchemaChange>) => ({
      path: String(c.path ?? ""), change: String(c.change ?? ""), detail: String(c.detail ?? ""),
    }));
  }
}

/** 422 `schema-mismatch`: a published message did not match its topic's schema and nothing of
 * the batch was written; `pointer` is the failing place (`/messages/3/value/total`). */
export class SchemaMismatchError extends ProblemError {
  readonly schemaVersion: number | null;
  readonly schemaError: string;

  constructor(status: number, document: ProblemDocument) {
    super(status, document);
    const version = document["schema_version"];
    this.schemaVersion = typeof version === "number" ? version : null;
    this.schemaError = String(document["schema_error"] ?? "");
  }
}

/** The gateway could not be reached, or the answer broke off or timed out. */
export class ConnectionError extends StreamgateError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, true, options);
  }
}

/** The gateway ended a subscription for a reason reconnecting cannot fix (topic deleted: 4404,
 * group served with other settings: 4409, or a close code the protocol does not list). */
export class SubscriptionClosedError extends StreamgateError {
  readonly code: number;
  readonly reason: string;

  constructor(code: number, reason: string) {
    super(`subscription closed with ${code}: ${reason || "no reason given"}`);
    this.code = code;
    this.reason = reason;
  }
}

/** An `error` frame: the gateway refused a frame this client sent; the subscription goes on. */
export class FrameError extends StreamgateError {
  readonly code: string;
  readonly detail: string;

  constructor(code: string, detail: string) {
    super(`gateway reported ${code}: ${detail}`);
    this.code = code;
    this.detail = detail;
  }
}

/** The typed error for an error status: 401 and 403 get their own classes. */
export function problemError(status: number, document: ProblemDocument,
                             retryAfterMs?: number): ProblemError {
  if (status === 401) return new AuthError(status, document);
  if (status === 403) return new ForbiddenError(status, document);
  const kind = (document.type ?? "").split("/").pop();
  if (status === 409 && kind === "unexpected-offset") {
    return new UnexpectedOffsetError(status, document);
  }
  if (status === 409 && kind === "schema-incompatible") {
    return new SchemaIncompatibleError(status, document);
  }
  if (status === 422 && kind === "schema-mismatch") return new SchemaMismatchError(status, document);
  return new ProblemError(status, document, retryAfterMs);
}

/** `Retry-After` in milliseconds (the delta-seconds form; an HTTP date is ignored). */
export function retryAfterMs(headers: Headers): number | undefined {
  const raw = headers.get("retry-after");
  if (raw === null || raw.trim() === "") return undefined;
  const seconds = Number(raw);
  return Number.isFinite(seconds) ? Math.max(0, seconds * 1000) : undefined;
}

function describe(status: number, document: ProblemDocument): string {
  const title = document.title ? ` ${document.title}` : "";
  const detail = document.detail ?? (document.title || `HTTP ${status}`);
  const where = document.pointer ? ` (at ${document.pointer})` : "";
  return `${status}${title}: ${detail}${where}`;
}
