/** The topics page: what the user may see, and a form to create one. */

import { Context } from "./context.js";
import {
  changed, field, formatDuration, formatTime, h, replace, statusLine, table,
} from "./dom.js";

const HOUR_MS = 3_600_000;

export function renderTopics(context: Context, main: HTMLElement): void {
  const status = statusLine();
  const listing = h("div", {}, h("p", {}, "Loading…"));
  replace(main, h("h1", { tabindex: -1 }, "Topics"),
          h("section", { "aria-labelledby": "topics-list" },
            h("h2", { id: "topics-list" }, "All topics"), listing, status),
          createForm(context));
  context.every(5000, async () => {
    try {
      const topics = await context.admin.listTopics();
      if (!changed(listing, topics)) return;
      replace(listing, topics.length === 0
        ? h("p", {}, "No topics yet: create one below.")
        : table("Topics you may see", ["Name", "Partitions", "Retention", "Owner", "Created"],
                topics.map((t) => [
                  h("a", { href: `#/topics/${encodeURIComponent(t.name)}` }, t.name),
                  t.partitions, formatDuration(t.retentionMs), t.owner, formatTime(t.createdAtMs),
                ])));
    } catch (error) {
      context.fail(error, status);
    }
  });
}

function createForm(context: Context): HTMLElement {
  const name = h("input", { type: "text", required: true, pattern: "[A-Za-z0-9._\\-]{1,200}",
                            autocomplete: "off" });
  const partitions = h("input", { type: "number", min: 1, max: 4096, value: 3, required: true });
  const retention = h("input", { type: "number", min: 1, placeholder: "336" });
  const status = statusLine();
  const form = h("form", { class: "card" },
                 field("Topic name", name, "Letters, digits, '.', '_' and '-'."),
                 field("Partitions", partitions),
                 field("Retention (hours)", retention, "Empty: the gateway's default (14 days)."),
                 h("button", { type: "submit" }, "Create topic"), status);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const hours = retention.value === "" ? undefined : Number(retention.value) * HOUR_MS;
    context.admin.createTopic({
      name: name.value.trim(), partitions: Number(partitions.value),
      ...(hours === undefined ? {} : { retentionMs: hours }),
    }).then((topic) => {
      window.location.hash = `#/topics/${encodeURIComponent(topic.name)}`;
    }, (error: unknown) => context.fail(error, status));
  });
  return h("section", { "aria-labelledby": "create-topic" },
           h("h2", { id: "create-topic" }, "Create a topic"), form);
}
