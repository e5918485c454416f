/** Search within a partition by key or by text in the value: replay pages read here, a bounded
 * number of messages per run, and "continue" to scan on from where it stopped. */

import { StoredMessage, TopicDetails } from "../src/index.js";
import { Context } from "./context.js";
import { field, formatCount, h, replace, statusLine } from "./dom.js";
import { messageTable } from "./messages.js";

const SCAN_LIMIT = 10_000;
const PAGE = 1000;
const MAX_SHOWN = 500;

interface Scan {
  partition: number;
  matches: (message: StoredMessage) => boolean;
  from: string;
  scanned: number;
  found: StoredMessage[];
  ended: boolean;
}

export function renderSearch(context: Context, area: HTMLElement, topic: TopicDetails): void {
  const partition = h("select", {}, ...Array.from(
    { length: topic.partitions }, (_, p) => h("option", { value: String(p) }, String(p))));
  const by = h("select", {}, h("option", { value: "key" }, "key (exactly)"),
               h("option", { value: "text" }, "text in the value"));
  const query = h("input", { type: "search", autocomplete: "off", required: true });
  const status = statusLine();
  const results = h("div", {});
  const selected = h("div", { class: "selected", "aria-live": "polite" });
  const more = h("button", { type: "button", class: "secondary", disabled: true },
                 "Continue scanning");
  let scan: Scan | undefined;
  const run = async (): Promise<void> => {
    if (scan === undefined) return;
    more.disabled = true;
    try {
      await scanOn(context, topic.name, scan);
    } catch (error) {
      context.fail(error, status);
      return;
    }
    more.disabled = scan.ended;
    status.show(`Scanned ${formatCount(scan.scanned)} messages, found `
      + `${formatCount(scan.found.length)}${scan.ended ? ": the end of the partition." : "."}`);
    replace(results, scan.found.length === 0 ? null : messageTable(
      `Messages found in partition ${scan.partition}`, scan.found.slice(0, MAX_SHOWN), selected));
  };
  const form = h("form", { class: "card" },
                 h("div", { class: "row" }, field("Search partition", partition),
                   field("Search by", by), field("Search for", query,
                     `Reads up to ${formatCount(SCAN_LIMIT)} messages a run, from the earliest.`)),
                 h("button", { type: "submit" }, "Search"), " ", more, status);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    scan = { partition: Number(partition.value), matches: matcher(by.value, query.value),
             from: "earliest", scanned: 0, found: [], ended: false };
    void run();
  });
  more.addEventListener("click", () => void run());
  replace(area, h("section", { "aria-labelledby": "search" },
                  h("h2", { id: "search" }, "Search a partition"), form, results, selected));
}

/** Read on from where the scan stopped, at most `SCAN_LIMIT` messages. */
async function scanOn(context: Context, topic: string, scan: Scan): Promise<void> {
  const stop = scan.scanned + SCAN_LIMIT;
  while (!scan.ended && scan.scanned < stop) {
    const page = await context.admin.readPartition(topic, scan.partition, {
      from: scan.from, limit: Math.min(PAGE, stop - scan.scanned) });
    scan.scanned += page.messages.length;
    scan.found.push(...page.messages.filter(scan.matches));
    scan.ended = page.messages.length === 0;
    scan.from = page.nextOffset;
  }
}

/** The test a message must pass: its key equal to the query, or the query (any case) in the
 * text of its value. */
export function matcher(by: string, query: string): (message: StoredMessage) => boolean {
  if (by === "key") return (message) => message.key === query;
  const needle = query.toLowerCase();
  return (message) => valueText(message).toLowerCase().includes(needle);
}

function valueText(message: StoredMessage): string {
  if (message.valueB64 !== undefined) return atob(message.valueB64);
  return typeof message.value === "string" ? message.value : JSON.stringify(message.value) ?? "";
}
