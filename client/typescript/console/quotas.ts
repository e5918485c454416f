/** The signed-in caller's quotas: whom its use counts against, each quota's use against its cap;
 * and how a publish refused by a quota is told plainly. */

import { ProblemError, type Quotas, type QuotaUsage } from "../src/index.js";
import { Context } from "./context.js";
import { changed, formatBytes, formatCount, h, replace, statusLine, table } from "./dom.js";

const POLL_MS = 5000;
// the problem types a quota refusal carries, and what the user can do about each
const QUOTA_PROBLEMS: Record<string, string> = {
  "quota-retained-bytes": "Your retained-bytes quota is full: room comes back as your older "
    + "messages leave retention (or a topic is purged).",
  "quota-in-flight": "Your in-flight messages quota is full: room comes back as deliveries are "
    + "acked or time out.",
};

interface QuotaKind {
  name: keyof Quotas["quotas"];
  label: string;
  amount: (n: number) => string;
}

const KINDS: QuotaKind[] = [
  { name: "retained_bytes", label: "Retained bytes", amount: formatBytes },
  { name: "in_flight_messages", label: "Messages in flight", amount: formatCount },
];

export function renderQuotas(context: Context, main: HTMLElement): void {
  const subject = h("p", {}, "Loading…");
  const usage = h("div", {});
  const status = statusLine();
  replace(main, h("h1", { tabindex: -1 }, "Quotas"), status, subject,
          h("p", { class: "hint" }, "What you hold at once, counted across every gateway: the "
            + "bytes your publishes keep in the log (a publish past the cap is refused with "
            + "507) and the deliveries to you not yet acked (a pull past the cap is refused "
            + "with 429). Operators set the caps."),
          usage);
  context.every(POLL_MS, async () => {
    let quotas: Quotas;
    try {
      quotas = await context.admin.quotas();
    } catch (error) {
      context.fail(error, status);
      return;
    }
    status.show("");
    if (changed(subject, quotas.subject)) {
      replace(subject, "Your use counts against ", h("strong", { class: "subject" },
                                                     quotas.subject), ".");
    }
    if (changed(usage, quotas.quotas)) replace(usage, usageTable(quotas));
  });
}

function usageTable(quotas: Quotas): HTMLElement {
  return table(`Quotas of ${quotas.subject}`, ["Quota", "Used", "Cap", "Use"],
               KINDS.map((kind) => usageRow(kind, quotas.quotas[kind.name])));
}

function usageRow(kind: QuotaKind, usage: QuotaUsage): Array<string | HTMLElement> {
  if (usage.limit === null) return [kind.label, "not counted", "no cap", "-"];
  const used = usage.used ?? 0;
  return [kind.label, kind.amount(used), kind.amount(usage.limit), share(kind, used, usage.limit)];
}

/** A bar of the share used, with the percentage as its text (and its accessible value). */
function share(kind: QuotaKind, used: number, limit: number): HTMLElement {
  const percent = limit === 0 ? 100 : Math.min(100, Math.round((used / limit) * 100));
  const bar = h("meter", { min: 0, max: limit, value: Math.min(used, limit), low: limit * 0.75,
                           high: limit * 0.9, optimum: 0,
                           "aria-label": `${kind.label}: ${percent}% of the cap used` });
  return h("span", { class: "quota-share" }, bar, ` ${percent}%`);
}

/** A publish refused by a quota, said plainly (what is full, how full, when to retry); any other
 * failure: undefined. */
export function quotaRefusal(error: unknown): string | undefined {
  if (!(error instanceof ProblemError)) return undefined;
  const kind = error.type.split("/").pop() ?? "";
  const explanation = QUOTA_PROBLEMS[kind];
  if (explanation === undefined) return undefined;
  const retry = error.retryAfterMs === undefined ? ""
    : ` Try again in ${Math.max(1, Math.round(error.retryAfterMs / 1000))} s.`;
  const detail = /[.!?]$/.test(error.detail) ? error.detail : `${error.detail}.`;
  return `${explanation} ${detail}${retry}`;
}
