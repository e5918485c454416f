/** Key history (a topic with a key index) and the snapshot of a compacted partition, each a page
 * at a time. */

import { StoredMessage, Topic } from "../src/index.js";
import { Context } from "./context.js";
import { field, h, replace, statusLine } from "./dom.js";
import { messageTable } from "./messages.js";

const PAGE = 50;

/** One page of results at a time: `load` reads the first (no cursor) or the next one. */
interface Pager<C> {
  load(cursor: C | undefined): Promise<{ messages: StoredMessage[]; next: C | undefined;
                                         caption: string; summary: string }>;
}

function pagedSection<C>(context: Context, id: string, title: string, controls: HTMLElement[],
                         submit: string, pager: Pager<C>): HTMLElement {
  const status = statusLine();
  const results = h("div", {});
  const selected = h("div", { class: "selected", "aria-live": "polite" });
  const next = h("button", { type: "button", class: "secondary", disabled: true }, "Next page");
  let cursor: C | undefined;
  const read = async (from: C | undefined): Promise<void> => {
    try {
      const page = await pager.load(from);
      cursor = page.next;
      next.disabled = cursor === undefined;
      replace(results, page.messages.length === 0 ? h("p", {}, "No messages there.")
        : messageTable(page.caption, page.messages, selected));
      status.show(page.summary);
    } catch (error) {
      context.fail(error, status);
    }
  };
  const form = h("form", { class: "card" }, h("div", { class: "row" }, ...controls),
                 h("button", { type: "submit" }, submit), " ", next, status);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    void read(undefined);
  });
  next.addEventListener("click", () => void read(cursor));
  return h("section", { "aria-labelledby": id }, h("h2", { id }, title), form, results, selected);
}

export function keyHistorySection(context: Context, topic: Topic): HTMLElement {
  if (!topic.keyIndex) {
    return h("section", { "aria-labelledby": "history" },
             h("h2", { id: "history" }, "Key history"),
             h("p", { class: "hint" }, "This topic keeps no key index: create a topic with "
               + "key_index (or compact) to read one key's messages."));
  }
  const key = h("input", { type: "text", autocomplete: "off", required: true });
  const order = h("select", {}, h("option", { value: "asc" }, "oldest first"),
                  h("option", { value: "desc" }, "newest first"));
  return pagedSection<string>(context, "history", "Key history",
                              [field("History of key", key), field("Order", order)],
                              "Read history", {
    load: async (from) => {
      const page = await context.admin.keyHistory(topic.name, key.value, {
        newestFirst: order.value === "desc", limit: PAGE, ...(from === undefined ? {} : { from }),
      });
      const more = page.messages.length === PAGE && page.nextOffset !== null;
      return { messages: page.messages, next: more ? page.nextOffset ?? undefined : undefined,
               caption: `History of key ${key.value}`,
               summary: `${page.messages.length} messages of key ${key.value} in partition `
                 + `${page.partition}.` };
    },
  });
}

export function snapshotSection(context: Context, topic: Topic): HTMLElement | null {
  if (!topic.compact) return null;
  const partition = h("select", {}, ...Array.from(
    { length: topic.partitions }, (_, p) => h("option", { value: String(p) }, String(p))));
  return pagedSection<{ asOf: string; after: string }>(
    context, "snapshot", "Snapshot (newest value of every key)",
    [field("Snapshot of partition", partition)], "Read snapshot", {
      load: async (cursor) => {
        const page = await context.admin.snapshotPage(topic.name, Number(partition.value), {
          limit: PAGE, ...(cursor ?? {}) });
        return { messages: page.messages,
                 next: page.after === null ? undefined : { asOf: page.asOf, after: page.after },
                 caption: `Snapshot of partition ${partition.value} as of ${page.asOf}`,
                 summary: `${page.messages.length} keys of partition ${partition.value} as of `
                   + `${page.asOf}${page.after === null ? " (the last page)" : ""}.` };
      },
    });
}
