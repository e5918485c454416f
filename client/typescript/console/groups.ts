/** The consumer groups: each with its lag (summed over partitions) and its worst verdict. */

import { GroupTopic, GroupVerdict } from "../src/index.js";
import { Context } from "./context.js";
import { changed, formatCount, h, replace, statusLine, table } from "./dom.js";

const POLL_MS = 5000;
// describes in flight at once while the list is filled: many groups must not flood the gateway
const CONCURRENT_DESCRIBES = 4;
// the worse a state, the later: a group shows its worst partition's verdict
const SEVERITY: Array<GroupVerdict["state"]> = ["idle", "ok", "paused", "behind", "stalled"];

interface Listed {
  group: string;
  topic: string;
  /** null: some partition's lag is unknown, or the group could not be described. */
  lag: number | null;
  worst: GroupVerdict | null;
  paused: boolean;
}

export function groupHref(group: string, topic: string): string {
  return `#/groups/${encodeURIComponent(group)}/${encodeURIComponent(topic)}`;
}

export function renderGroups(context: Context, main: HTMLElement): void {
  const listing = h("div", {}, h("p", {}, "Loading…"));
  const status = statusLine();
  replace(main, h("h1", { tabindex: -1 }, "Consumer groups"),
          h("p", { class: "lead" }, "Lag is what waits to be delivered, summed over the "
            + "partitions; the verdict is the worst partition's (ok, idle, behind, stalled, "
            + "paused) with its reason."), listing, status);
  context.every(POLL_MS, async () => {
    try {
      const groups = await context.admin.listGroups();
      const rows = await mapBounded(groups, CONCURRENT_DESCRIBES,
                                    (g) => listed(context, g.group, g.topic));
      if (context.active && changed(listing, rows)) replace(listing, groupTable(rows));
    } catch (error) {
      context.fail(error, status);
    }
  });
}

async function listed(context: Context, group: string, topic: string): Promise<Listed> {
  let state: GroupTopic | undefined;
  try {
    state = await context.admin.describeGroup(group, topic);
  } catch {
    state = undefined;  // gone since the listing, or not readable: the row shows "unknown"
  }
  const lags = state?.partitions.map((p) => p.lag) ?? [null];
  return {
    group, topic, paused: state?.paused ?? false,
    lag: lags.includes(null) ? null : lags.reduce<number>((sum, lag) => sum + (lag ?? 0), 0),
    worst: worstVerdict(state?.partitions.map((p) => p.verdict) ?? []),
  };
}

/** The most severe of some partitions' verdicts (null when none has one). */
export function worstVerdict(verdicts: Array<GroupVerdict | null>): GroupVerdict | null {
  let worst: GroupVerdict | null = null;
  for (const verdict of verdicts) {
    if (verdict === null) continue;
    if (worst === null || SEVERITY.indexOf(verdict.state) > SEVERITY.indexOf(worst.state)) {
      worst = verdict;
    }
  }
  return worst;
}

/** A verdict as a badge: its state, then its reason. */
export function verdictBadge(verdict: GroupVerdict | null): HTMLElement {
  if (verdict === null) return h("span", { class: "verdict" }, "no verdict yet");
  return h("span", { class: `verdict verdict-${verdict.state}`, title: verdict.detail },
           verdict.reason === null ? verdict.state : `${verdict.state}: ${verdict.reason}`);
}

function groupTable(rows: Listed[]): HTMLElement {
  if (rows.length === 0) return h("p", {}, "No consumer groups yet.");
  return table("Consumer groups you may see", ["Group", "Topic", "Lag", "Verdict"],
               rows.map((row) => [
                 h("a", { href: groupHref(row.group, row.topic) }, row.group),
                 h("a", { href: `#/topics/${encodeURIComponent(row.topic)}` }, row.topic),
                 row.lag === null ? "unknown" : formatCount(row.lag),
                 h("span", {}, verdictBadge(row.worst),
                   row.paused && row.worst?.state !== "paused" ? " (paused)" : "")]));
}

/** `work` over every item, at most `limit` at once, the results in the items' order. */
export async function mapBounded<T, R>(items: T[], limit: number,
                                       work: (item: T) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const at = next++;
      results[at] = await work(items[at] as T);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}
