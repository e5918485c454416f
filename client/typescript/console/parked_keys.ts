/** A key_shared group's parked keys: each waits alone for its failed message, and an admin lets it
 * go on (Release: the message comes again now; Dead-letter: it goes to the dead letters). */

import { GroupTopic, ParkedKey, ParkedKeyAction } from "../src/index.js";
import { Context } from "./context.js";
import { changed, formatTime, h, keepFocus, replace, statusLine, table } from "./dom.js";

interface Row extends ParkedKey {
  partition: number;
}

/** The section of the group page, hidden until the group has parked a key. */
export class ParkedKeys {
  readonly element: HTMLElement;
  private readonly context: Context;
  private readonly group: string;
  private readonly topic: string;
  /** Describes the group again after a key went on. */
  private readonly reload: () => Promise<void>;
  private readonly listing = h("div", {});
  private readonly status = statusLine();

  constructor(context: Context, group: string, topic: string, reload: () => Promise<void>) {
    this.context = context;
    this.group = group;
    this.topic = topic;
    this.reload = reload;
    this.element = h("section", { "aria-labelledby": "parked", hidden: true },
                     h("h2", { id: "parked" }, "Parked keys"),
                     h("p", { class: "hint" }, "A key whose message failed waits alone for that "
                       + "message's redelivery while the other keys go on. Release delivers the "
                       + "message again now; Dead-letter sends it to the dead letters and the "
                       + "key's next message follows."),
                     this.status, this.listing);
  }

  /** Show the group's parked keys (rendered again only when they changed, so a focused button
   * stays focused across polls). */
  show(state: GroupTopic): void {
    const rows: Row[] = state.partitions.flatMap((p) => p.parkedKeys.map((key) => ({
      partition: p.partition, ...key })));
    if (rows.length > 0) this.element.hidden = false;
    if (!changed(this.listing, rows)) return;
    const focused = this.listing.contains(document.activeElement);
    replace(this.listing, rows.length === 0 ? h("p", {}, "No parked keys now.")
      : table(`${rows.length} parked keys`,
              ["Key", "Partition", "Failed message", "Parked since", "Actions"],
              rows.map((row) => [row.key ?? "(not shown to you)", row.partition, row.offset,
                                 formatTime(row.sinceMs), this.actions(row)])));
    if (focused) keepFocus(this.status);  // a key that went on took its focused button along
  }

  private actions(row: Row): HTMLElement | string {
    const key = row.key;
    if (key === null) return "-";
    const name = `key ${key} of partition ${row.partition}`;
    return h("span", { class: "actions" },
             h("button", { type: "button", "aria-label": `Release ${name}`,
                           onclick: () => void this.settle(row.partition, key, "release") },
               "Release"), " ",
             h("button", { type: "button", class: "secondary", "aria-label": `Dead-letter ${name}`,
                           onclick: () => void this.settle(row.partition, key, "dead_letter") },
               "Dead-letter"));
  }

  private async settle(partition: number, key: string, action: ParkedKeyAction): Promise<void> {
    try {
      const done = await this.context.admin.settleParkedKey({
        group: this.group, topic: this.topic, partition, key, action });
      const message = `${done.partition}:${done.offset}`;
      this.status.show(action === "release"
        ? `Released key ${key}: message ${message} is delivered again now.`
        : `Sent message ${message} of key ${key} to the dead letters; the key's next message `
          + "follows.", "ok");
    } catch (error) {
      this.context.fail(error, this.status);
    }
    await this.reload();
    keepFocus(this.status);
  }
}
