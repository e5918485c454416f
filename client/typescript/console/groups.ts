/** Consumer groups: the list, and one group's members, assignment, lag (with a chart), parked
 * keys and seek. */

import { GroupTopic, SeekTarget } from "../src/index.js";
import { TimeChart } from "./chart.js";
import { Context } from "./context.js";
import {
  changed, field, formatCount, formatDuration, formatTime, h, replace, statusLine, table,
} from "./dom.js";
import { ParkedKeys } from "./parked_keys.js";

const POLL_MS = 2000;

function groupHref(group: string, topic: string): string {
  return `#/groups/${encodeURIComponent(group)}/${encodeURIComponent(topic)}`;
}

export function renderGroups(context: Context, main: HTMLElement): void {
  const listing = h("div", {}, h("p", {}, "Loading…"));
  const status = statusLine();
  replace(main, h("h1", { tabindex: -1 }, "Consumer groups"), listing, status);
  context.every(5000, async () => {
    try {
      const groups = await context.admin.listGroups();
      if (!changed(listing, groups)) return;
      replace(listing, groups.length === 0 ? h("p", {}, "No consumer groups yet.")
        : table("Consumer groups you may see", ["Group", "Topic"], groups.map((g) => [
          h("a", { href: groupHref(g.group, g.topic) }, g.group),
          h("a", { href: `#/topics/${encodeURIComponent(g.topic)}` }, g.topic)])));
    } catch (error) {
      context.fail(error, status);
    }
  });
}

export function renderGroup(context: Context, main: HTMLElement, group: string,
                            topic: string): void {
  const summary = h("p", { class: "lead" }, "Loading…");
  const status = statusLine();
  const members = h("div", {});
  const partitions = h("div", {});
  const totalLag = h("p", { class: "total", "aria-live": "polite" });
  const chart = new TimeChart(`Lag per partition of group ${group} on ${topic}, messages`,
                              "messages");
  const parked = new ParkedKeys(context, group, topic, () => load());
  replace(main, h("h1", { tabindex: -1 }, `Group ${group} on ${topic}`), summary, status,
          h("section", { "aria-labelledby": "lag" }, h("h2", { id: "lag" }, "Lag"), totalLag,
            chart.element, partitions),
          parked.element,
          h("section", { "aria-labelledby": "members" },
            h("h2", { id: "members" }, "Members and assignment"), members),
          seekForm(context, group, topic));
  const load = async (): Promise<void> => {
    try {
      const state = await context.admin.describeGroup(group, topic);
      if (state === undefined) {
        status.show(`Group ${group} has no state on ${topic}.`, "error");
        return;
      }
      const lag = state.partitions.reduce((sum, p) => sum + (p.lag ?? 0), 0);
      const pending = state.partitions.reduce((sum, p) => sum + p.pending, 0);
      replace(summary, `Generation ${state.generation ?? "-"} · ${state.members.length} members`
        + ` · ${formatCount(pending)} pending`);
      replace(totalLag, `Total lag: ${formatCount(lag)} messages`);
      chart.add(new Map(state.partitions.map((p) => [`p${p.partition}`, p.lag ?? 0])));
      if (changed(partitions, state.partitions)) replace(partitions, partitionTable(state));
      if (changed(members, [state.members, state.assignment])) {
        replace(members, memberTable(state));
      }
      parked.show(state);
    } catch (error) {
      context.fail(error, status);
    }
  };
  context.every(POLL_MS, load);
}

function partitionTable(state: GroupTopic): HTMLTableElement {
  return table("Position per partition", ["Partition", "Lag", "Pending", "Last delivered",
                                          "Oldest un-acked age"],
               state.partitions.map((p) => [
                 p.partition, p.lag === null ? "unknown" : formatCount(p.lag), p.pending,
                 p.lastDeliveredOffset ?? "-",
                 p.oldestPendingAgeMs === null ? "-" : formatDuration(p.oldestPendingAgeMs)]));
}

function memberTable(state: GroupTopic): HTMLElement {
  if (state.members.length === 0) {
    return h("p", {}, "No exclusive members now (shared members and HTTP pull hold no "
      + "assignment).");
  }
  return table("Members", ["Member", "Gateway node", "Joined", "Partitions"],
               state.members.map((m) => [m.memberId, m.node, formatTime(m.joinedAtMs),
                                         (state.assignment[m.memberId] ?? []).join(", ") || "-"]));
}

function seekForm(context: Context, group: string, topic: string): HTMLElement {
  const to = h("select", {}, h("option", { value: "earliest" }, "the earliest message"),
               h("option", { value: "latest" }, "the latest (skip everything)"),
               h("option", { value: "time" }, "a time"),
               h("option", { value: "cursor" }, "a cursor"));
  const time = h("input", { type: "datetime-local", step: 1 });
  const cursor = h("input", { type: "text", placeholder: "0:1700000000000-0,1:…",
                              autocomplete: "off" });
  const status = statusLine();
  const form = h("form", { class: "card" },
                 h("div", { class: "row" }, field("Move the group to", to),
                   field("Seek time", time),
                   field("Seek cursor", cursor, "Delivery goes on strictly after these offsets.")),
                 h("button", { type: "submit" }, "Seek"), status);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const target: SeekTarget = to.value === "time"
      ? { timestampMs: new Date(time.value).getTime() }
      : to.value === "cursor" ? cursor.value.trim() : to.value;
    context.admin.seek(group, topic, target).then(
      () => status.show("Moved. Pending messages stay pending.", "ok"),
      (error: unknown) => context.fail(error, status));
  });
  return h("section", { "aria-labelledby": "seek" }, h("h2", { id: "seek" }, "Seek"), form);
}
