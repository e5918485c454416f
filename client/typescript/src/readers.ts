/** The readers of an async iterator fed by events: each waits for the next item, in turn. */

export class Readers<T> {
  private waiting: Array<{ resolve: (r: IteratorResult<T>) => void;
                           reject: (e: unknown) => void }> = [];

  /** The next item handed to this reader. */
  wait(): Promise<IteratorResult<T>> {
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  /** Hand `item` to the reader waiting longest; false when none waits. */
  hand(item: T): boolean {
    const reader = this.waiting.shift();
    reader?.resolve({ done: false, value: item });
    return reader !== undefined;
  }

  /** The iteration ended: every waiting reader is done. */
  end(): void {
    for (const reader of this.waiting.splice(0)) reader.resolve({ done: true, value: undefined });
  }

  /** The iteration failed: every waiting reader rejects with `error`. */
  fail(error: unknown): void {
    for (const reader of this.waiting.splice(0)) reader.reject(error);
  }
}
