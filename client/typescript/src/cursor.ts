/** Broadcast resume cursors: the last offset seen per partition, as `from=<p>:<offset>,...`. */

/** Partition -> the last offset received (resume strictly after it). */
export type Cursor = Map<number, string>;

/** `<partition>:<offset>,...`, the `from` that resumes strictly after each offset. */
export function formatCursor(cursor: ReadonlyMap<number, string>): string {
  return [...cursor.entries()].sort(([a], [b]) => a - b).map(([p, o]) => `${p}:${o}`).join(",");
}

/** The inverse of `formatCursor`; throws on text that is not a cursor. */
export function parseCursor(text: string): Cursor {
  const cursor: Cursor = new Map();
  for (const part of text.split(",")) {
    const match = /^(\d+):(\d+-\d+)$/.exec(part.trim());
    if (match === null) throw new TypeError(`not a cursor entry: ${JSON.stringify(part)}`);
    cursor.set(Number(match[1]), match[2] as string);
  }
  return cursor;
}
