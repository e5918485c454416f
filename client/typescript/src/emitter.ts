/** A small typed event emitter that runs in Node and browsers alike (no `events` import). */

export type Listener<A extends unknown[]> = (...args: A) => void;

// listeners of every event share one map; each is called only with its own event's arguments
type AnyListener = (...args: any[]) => void;

export class Emitter<E extends { [K in keyof E]: unknown[] }> {
  private readonly listeners = new Map<keyof E, Set<AnyListener>>();

  /** Call `listener` on every `event`. */
  on<K extends keyof E>(event: K, listener: Listener<E[K]>): this {
    let set = this.listeners.get(event);
    if (set === undefined) {
      set = new Set();
      this.listeners.set(event, set);
    }
    set.add(listener as AnyListener);
    return this;
  }

  /** Stop calling `listener`. */
  off<K extends keyof E>(event: K, listener: Listener<E[K]>): this {
    this.listeners.get(event)?.delete(listener as AnyListener);
    return this;
  }

  /** Call `listener` on the next `event` only. */
  once<K extends keyof E>(event: K, listener: Listener<E[K]>): this {
    const wrapper: Listener<E[K]> = (...args) => {
      this.off(event, wrapper);
      listener(...args);
    };
    return this.on(event, wrapper);
  }

  listenerCount(event: keyof E): number {
    return this.listeners.get(event)?.size ?? 0;
  }

  protected emit<K extends keyof E>(event: K, ...args: E[K]): void {
    for (const listener of [...(this.listeners.get(event) ?? [])]) {
      try {
        (listener as Listener<E[K]>)(...args);
      } catch (error) {
        // a throwing listener must not break the frame loop that called it; rethrown on its own
        // so it still surfaces as an uncaught error, as Node's EventEmitter would have it
        queueMicrotask(() => {
          throw error;
        });
      }
    }
  }
}
