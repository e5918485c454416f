/** A topic's destructive operations: grow its partitions, purge it (every partition or one),
 * delete it; each shows its dry run in a confirmation panel before the real call. */

import { openapi, Topic } from "../src/index.js";
import { Confirmation, confirmPanel } from "./confirm.js";
import { Context } from "./context.js";
import { field, formatCount, h, replace, StatusLine, table } from "./dom.js";

/** The section of operations; `status` outlives it (a growth renders it anew). */
export function renderTopicOps(context: Context, area: HTMLElement, topic: Topic,
                               status: StatusLine): void {
  replace(area, h("section", { "aria-labelledby": "manage" },
                  h("h2", { id: "manage" }, "Manage this topic"),
                  h("p", { class: "hint" }, "Each action first shows what it would do, "
                    + "nothing changes before you confirm."),
                  growForm(context, topic, status), purgeForm(context, topic, status),
                  deleteForm(context, topic, status), status));
}

function growForm(context: Context, topic: Topic, status: StatusLine): HTMLElement {
  const count = h("input", { type: "number", min: topic.partitions + 1, max: 4096,
                             value: topic.partitions + 1, required: true });
  const form = h("form", { class: "card" }, h("h3", {}, "Grow partitions"),
                 field("New partition count", count, "Partitions may only grow; every key keeps "
                   + "its order for consumers."),
                 h("button", { type: "submit" }, "Preview growth"));
  return previewOnSubmit(context, form, status, async () => {
    const partitions = Number(count.value);
    const preview = await context.admin.updateTopicDryRun(topic.name, { partitions });
    return {
      title: `Grow ${topic.name} to ${partitions} partitions?`,
      impact: growthImpact(preview.impact.growth), action: "Grow topic",
      run: async () => {
        await context.admin.updateTopic(topic.name, { partitions });
        status.show(`Grew ${topic.name} to ${partitions} partitions.`, "ok");
      },
    };
  });
}

/** A form whose submit runs a dry run and shows its confirmation panel. */
function previewOnSubmit(context: Context, form: HTMLFormElement, status: StatusLine,
                         preview: () => Promise<Confirmation>): HTMLFormElement {
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    preview().then((confirmation) => confirmPanel(context, confirmation),
                   (error: unknown) => context.fail(error, status));
  });
  return form;
}

function growthImpact(growth: openapi.GrowthImpact | null): Node[] {
  if (growth === null) return [h("p", {}, "The partition count stays: nothing would change.")];
  const staying = Math.round(growth.keys_staying * 100);
  const rows = growth.groups.flatMap((g) => (g.partitions ?? []).map((p) => [
    g.group ?? "?", p.partition ?? "?", unknownIfNull(p.unread), formatCount(p.pending ?? 0)]));
  return [
    h("p", {}, `Adds partitions ${growth.added.join(", ")} (from ${growth.from} to `
      + `${growth.to}). ${staying}% of the key space keeps its partition; the other keys' new `
      + "messages go to their new partition."),
    h("p", {}, growth.publishes_pause ? "Publishing pauses briefly while every gateway reaches "
      + "the cut." : "Publishing goes on."),
    rows.length === 0 ? h("p", {}, "No consumer group has a backlog on the old partitions.")
      : table("Backlog each group consumes before the moved keys' new messages",
              ["Group", "Partition", "Unread", "Pending"], rows),
  ];
}

function purgeForm(context: Context, topic: Topic, status: StatusLine): HTMLElement {
  const partition = h("select", {}, h("option", { value: "" }, "every partition"),
                      ...Array.from({ length: topic.partitions },
                                    (_, p) => h("option", { value: String(p) }, String(p))));
  const form = h("form", { class: "card" }, h("h3", {}, "Purge messages"),
                 field("Purge partition", partition, "Groups move past the purged messages; "
                   + "what is published afterwards is kept."),
                 h("button", { type: "submit" }, "Preview purge"));
  return previewOnSubmit(context, form, status, async () => {
    const which = partition.value === "" ? {} : { partition: Number(partition.value) };
    const where = partition.value === "" ? topic.name
      : `partition ${partition.value} of ${topic.name}`;
    const preview = await context.admin.purgeDryRun(topic.name, which);
    return {
      title: `Purge ${where}?`, impact: purgeImpact(preview), action: "Purge messages",
      run: async () => {
        const done = await context.admin.purge(topic.name, which);
        status.show(`Purged ${formatCount(done.purged)} messages and `
          + `${formatCount(done.scheduled)} scheduled ones from ${where}.`, "ok");
      },
    };
  });
}

/** What a purge would remove and what each group would lose, as its dry run tells. */
export function purgeImpact(preview: openapi.PurgeDryRun): Node[] {
  return [
    h("p", { class: "impact" }, `${formatCount(preview.purged)} `
      + `${preview.purged === 1 ? "message" : "messages"} and `
      + `${formatCount(preview.scheduled)} scheduled ones would go.`),
    preview.groups.length === 0 ? h("p", {}, "No consumer group reads them.")
      : table("What each group would lose",
              ["Group", "Delivered, not acked", "Never delivered", "Parked keys"],
              preview.groups.map((g) => [g.group, formatCount(g.pending_dropped),
                                         unknownIfNull(g.unread_dropped),
                                         formatCount(g.parked_keys)])),
  ];
}

function deleteForm(context: Context, topic: Topic, status: StatusLine): HTMLElement {
  const form = h("form", { class: "card" }, h("h3", {}, "Delete the topic"),
                 h("p", {}, "Its metadata and every message, archived ones included."),
                 h("button", { type: "submit", class: "danger" }, "Preview deletion"));
  // a deletion loses what a purge of every partition would: its dry run tells
  return previewOnSubmit(context, form, status, async () => ({
    title: `Delete topic ${topic.name}?`,
    impact: [h("p", {}, "This cannot be undone. Everything in it goes:"),
             ...purgeImpact(await context.admin.purgeDryRun(topic.name))],
    action: "Delete topic", typed: topic.name,
    run: async () => {
      await context.admin.deleteTopic(topic.name);
      window.location.hash = "#/topics";
    },
  }));
}

function unknownIfNull(count: number | null | undefined): string {
  return count === null || count === undefined ? "unknown" : formatCount(count);
}
