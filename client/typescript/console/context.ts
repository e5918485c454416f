/** What every page gets: the client signed in as the user, failure reporting, and timers and
 * subscriptions that stop when the user leaves the page. */

import { Admin, AuthError, Client, ForbiddenError, ProblemError } from "../src/index.js";

export interface StatusTarget {
  show(text: string, tone?: "ok" | "error"): void;
}

export class Context {
  readonly client: Client;
  readonly admin: Admin;
  private readonly leaving: Array<() => void> = [];
  private readonly signIn: (reason: string) => void;
  private left = false;

  constructor(client: Client, signIn: (reason: string) => void) {
    this.client = client;
    this.admin = client.admin();
    this.signIn = signIn;
  }

  /** Show why a call failed where it was made; a refused sign-in sends the user to sign in. */
  fail(error: unknown, where: StatusTarget): void {
    if (error instanceof AuthError) {
      this.signIn(`Please sign in: ${error.detail}`);
    } else if (error instanceof ForbiddenError) {
      where.show(`Not permitted: ${error.detail}`, "error");
    } else if (error instanceof ProblemError) {
      where.show(`${error.title || `HTTP ${error.status}`}: ${error.detail}`, "error");
    } else {
      where.show(`Failed: ${error instanceof Error ? error.message : String(error)}`, "error");
    }
  }

  /** Run `task` now and then every `ms` while the page is shown (never two at once). */
  every(ms: number, task: () => Promise<void>): void {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const run = async (): Promise<void> => {
      if (this.left) return;
      try {
        await task();
      } finally {
        if (!this.left) timer = setTimeout(() => void run(), ms);
      }
    };
    this.onLeave(() => clearTimeout(timer));
    void run();
  }

  /** Call `stop` when the user leaves the page. */
  onLeave(stop: () => void): void {
    this.leaving.push(stop);
  }

  /** The page is gone: stop its timers and subscriptions. */
  leave(): void {
    this.left = true;
    for (const stop of this.leaving.splice(0)) stop();
  }

  /** Whether the page is still shown. */
  get active(): boolean {
    return !this.left;
  }
}
