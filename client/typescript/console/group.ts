/** One consumer group on one topic: per partition lag, pending and verdict (with a lag chart),
 * its pause, parked keys, members and assignment, and seek. */

import { GroupTopic } from "../src/index.js";
import { TimeChart } from "./chart.js";
import { Context } from "./context.js";
import {
  changed, formatCount, formatDuration, formatTime, h, replace, statusLine, table,
} from "./dom.js";
import { PausePanel, seekSection } from "./group_controls.js";
import { verdictBadge } from "./groups.js";
import { ParkedKeys } from "./parked_keys.js";

const POLL_MS = 2000;

export function renderGroup(context: Context, main: HTMLElement, group: string,
                            topic: string): void {
  const summary = h("p", { class: "lead" }, "Loading…");
  const status = statusLine();
  const members = h("div", {});
  const partitions = h("div", {});
  const totalLag = h("p", { class: "total", "aria-live": "polite" });
  const chart = new TimeChart(`Lag per partition of group ${group} on ${topic}, messages`,
                              "messages");
  const load = async (): Promise<void> => {
    try {
      const state = await context.admin.describeGroup(group, topic);
      if (state === undefined) {
        status.show(`Group ${group} has no state on ${topic}.`, "error");
        return;
      }
      show(state);
    } catch (error) {
      context.fail(error, status);
    }
  };
  const parked = new ParkedKeys(context, group, topic, load);
  const pause = new PausePanel(context, group, topic, load);
  const show = (state: GroupTopic): void => {
    const pending = state.partitions.reduce((sum, p) => sum + p.pending, 0);
    replace(summary, `Generation ${state.generation ?? "-"} · ${state.members.length} members`
      + ` · ${formatCount(pending)} pending`);
    replace(totalLag, `Total lag: ${formatCount(totalOf(state))} messages`);
    chart.add(new Map(state.partitions.map((p) => [`p${p.partition}`, p.lag ?? 0])));
    if (changed(partitions, state.partitions)) replace(partitions, partitionTable(state));
    if (changed(members, [state.members, state.assignment])) replace(members, memberTable(state));
    parked.show(state);
    pause.show(state);
  };
  replace(main, h("h1", { tabindex: -1 }, `Group ${group} on ${topic}`), summary, status,
          h("section", { "aria-labelledby": "lag" }, h("h2", { id: "lag" }, "Lag and verdicts"),
            totalLag, chart.element, partitions),
          pause.element, parked.element,
          h("section", { "aria-labelledby": "members" },
            h("h2", { id: "members" }, "Members and assignment"), members),
          seekSection(context, group, topic, load));
  context.every(POLL_MS, load);
}

function totalOf(state: GroupTopic): number {
  return state.partitions.reduce((sum, p) => sum + (p.lag ?? 0), 0);
}

function partitionTable(state: GroupTopic): HTMLTableElement {
  return table("Position and verdict per partition",
               ["Partition", "Lag", "Pending", "Verdict", "Detail", "Warnings", "Last delivered",
                "Oldest un-acked age"],
               state.partitions.map((p) => [
                 p.partition, p.lag === null ? "unknown" : formatCount(p.lag), p.pending,
                 verdictBadge(p.verdict), p.verdict?.detail ?? "-",
                 p.verdict === null || p.verdict.warnings.length === 0 ? "-"
                   : p.verdict.warnings.join(", "),
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
