/** Exponential backoff with full jitter, capped, and never shorter than what the server asked. */

export interface BackoffOptions {
  /** The first retry waits up to this long. */
  baseMs?: number;
  /** No wait is longer than this (unless the server asks for longer). */
  maxMs?: number;
}

export class Backoff {
  readonly baseMs: number;
  readonly maxMs: number;

  constructor(options: BackoffOptions = {}) {
    this.baseMs = options.baseMs ?? 100;
    this.maxMs = options.maxMs ?? 5000;
  }

  /** How long to wait before retry number `attempt` (1-based). Full jitter spreads clients that
   * failed together, so they do not come back together; `atLeastMs` is a `Retry-After`. */
  delayMs(attempt: number, atLeastMs = 0): number {
    const ceiling = Math.min(this.maxMs, this.baseMs * 2 ** Math.max(0, attempt - 1));
    return Math.max(Math.random() * ceiling, atLeastMs);
  }
}

/** A promise that resolves after `ms`. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
