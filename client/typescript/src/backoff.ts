/** Exponential backoff with full jitter, capped, and never shorter than what the server asked;
 * and the retry loop of the subscriptions that reconnect with it. */

import { ConnectionError, ProblemError, StreamgateError } from "./errors.js";

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

/** A wait that can be cut short: a subscription that closes while it backs off stops at once,
 * leaving no timer behind. */
class Pause {
  private current: (() => void) | undefined;

  /** Wait `ms`, or less if `wake` is called meanwhile. */
  wait(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => this.current?.(), ms);
      this.current = () => {
        clearTimeout(timer);
        this.current = undefined;
        resolve();
      };
    });
  }

  /** End the wait in progress, if any. */
  wake(): void {
    this.current?.();
  }
}

/** What a reconnecting subscription is told by its retry loop. */
export interface RetryHooks {
  /** True once the subscription closed: stop trying. */
  stopped(): boolean;
  /** A wait before the next attempt begins. */
  waiting(): void;
  /** A failure that trying again cannot fix, or one too many in a row. */
  giveUp(error: StreamgateError): void;
}

/** Connect attempts with backoff between them: `failures` counts those that failed in a row
 * (the owner resets it once a connection is fully set up, and counts drops too). */
export class Reconnects {
  failures = 0;
  /** The next attempt waits at least this long (a `Retry-After`, a `retry in <n> s`). */
  minDelayMs = 0;
  readonly max: number;
  private readonly backoff: Backoff;
  private readonly pause = new Pause();

  constructor(options: BackoffOptions | undefined, max: number | undefined) {
    this.backoff = new Backoff(options);
    this.max = max ?? 10;
  }

  /** Whether there were more failures in a row than allowed. */
  get exhausted(): boolean {
    return this.failures > this.max;
  }

  /** Run `attempt` until it resolves, waiting between failures; a failure that is not
   * retriable, or one too many, goes to `hooks.giveUp`. */
  async run(attempt: () => Promise<void>, hooks: RetryHooks): Promise<void> {
    while (!hooks.stopped()) {
      if (this.failures > 0) {
        hooks.waiting();
        await this.pause.wait(this.backoff.delayMs(this.failures, this.minDelayMs));
        this.minDelayMs = 0;
        if (hooks.stopped()) return;
      }
      try {
        await attempt();
        return;
      } catch (error) {
        const failed = error instanceof StreamgateError
          ? error : new ConnectionError(String(error), { cause: error });
        this.failures++;
        // a 429 or 503 says when to come back
        if (failed instanceof ProblemError) this.minDelayMs = failed.retryAfterMs ?? 0;
        if (!failed.retriable || this.exhausted) {
          hooks.giveUp(failed);
          return;
        }
      }
    }
  }

  /** Cut a wait in progress short (the subscription closed). */
  wake(): void {
    this.pause.wake();
  }
}
