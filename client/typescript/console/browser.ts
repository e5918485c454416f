/** The message browser: one partition from an offset or a time, a page at a time; a selected
 * message shown whole. */

import { TopicDetails } from "../src/index.js";
import { Context } from "./context.js";
import { field, h, replace, statusLine } from "./dom.js";
import { messageTable } from "./messages.js";

export function renderBrowser(context: Context, area: HTMLElement, topic: TopicDetails): void {
  const partition = h("select", {}, ...Array.from(
    { length: topic.partitions }, (_, p) => h("option", { value: String(p) }, String(p))));
  const start = h("select", {}, h("option", { value: "earliest" }, "the earliest message"),
                  h("option", { value: "offset" }, "an offset"),
                  h("option", { value: "time" }, "a time"));
  const offset = h("input", { type: "text", placeholder: "1700000000000-0", autocomplete: "off" });
  const time = h("input", { type: "datetime-local", step: 1 });
  const limit = h("input", { type: "number", min: 1, max: 1000, value: 50 });
  const status = statusLine();
  const results = h("div", {});
  const selected = h("div", { class: "selected", "aria-live": "polite" });
  const next = h("button", { type: "button", class: "secondary", disabled: true }, "Next page");
  let nextOffset: string | undefined;

  const read = async (from: { from?: string; fromTimeMs?: number }): Promise<void> => {
    try {
      const page = await context.admin.readPartition(topic.name, Number(partition.value),
                                                     { ...from, limit: Number(limit.value) });
      nextOffset = page.nextOffset;
      next.disabled = false;
      replace(results, page.messages.length === 0 ? h("p", {}, "No messages there.")
        : messageTable("Messages", page.messages, selected));
      status.show(`${page.messages.length} messages from partition ${partition.value}.`);
    } catch (error) {
      context.fail(error, status);
    }
  };
  const form = h("form", { class: "card" },
                 h("div", { class: "row" }, field("Browse partition", partition),
                   field("Start at", start), field("Offset", offset),
                   field("Time", time), field("Messages per page", limit)),
                 h("button", { type: "submit" }, "Read messages"), " ", next, status);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (start.value === "offset" && offset.value.trim() === "") {
      status.show("Give an offset to start at.", "error");
      return;
    }
    if (start.value === "time" && Number.isNaN(new Date(time.value).getTime())) {
      status.show("Give a time to start at.", "error");
      return;
    }
    void read(start.value === "offset" ? { from: offset.value.trim() }
      : start.value === "time" ? { fromTimeMs: new Date(time.value).getTime() }
        : { from: "earliest" });
  });
  next.addEventListener("click", () => {
    if (nextOffset !== undefined) void read({ from: nextOffset });
  });
  replace(area, h("section", { "aria-labelledby": "browse" },
                  h("h2", { id: "browse" }, "Browse messages"), form, results, selected));
}
