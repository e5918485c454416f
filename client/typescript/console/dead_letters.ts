/** A topic's dead letters: why each died, the whole letter, redrive of one or all (all after
 * its dry run), and their purge after its dry run. */

import { openapi, ProblemError, StoredMessage } from "../src/index.js";
import { confirmPanel } from "./confirm.js";
import { Context } from "./context.js";
import {
  formatCount, formatTime, h, keepFocus, replace, statusLine, StatusLine, table,
} from "./dom.js";
import { details, preview } from "./messages.js";
import { purgeImpact } from "./topic_ops.js";

const PER_PARTITION = 100;

export function renderDeadLetters(context: Context, main: HTMLElement, topic: string): void {
  const status = statusLine();
  const listing = h("div", {}, h("p", {}, "Loading…"));
  const selected = h("div", { class: "selected", "aria-live": "polite" });
  const redriveAll = h("button", { type: "button" }, "Redrive all");
  const purgeAll = h("button", { type: "button", class: "danger" }, "Purge dead letters");
  const refresh = h("button", { type: "button", class: "secondary" }, "Refresh");
  const settled = async (text: string): Promise<void> => {
    status.show(text, "ok");
    await load();
    keepFocus(status);
  };

  const load = async (): Promise<void> => {
    try {
      const letters = await deadLetters(context, topic);
      redriveAll.disabled = letters.length === 0;
      purgeAll.disabled = letters.length === 0;
      replace(listing, letters.length === 0 ? h("p", {}, "No dead letters.")
        : letterTable(letters, async (letter) => {
          try {
            await context.admin.redrive(topic, { partition: letter.partition,
                                                 offset: letter.offset });
            status.show(`Redrove ${letter.partition}:${letter.offset} to ${topic}.`, "ok");
          } catch (error) {
            context.fail(error, status);
          }
          await load();
          keepFocus(status);
        }, (letter) => {
          replace(selected, h("h2", { tabindex: -1 }, `Dead letter ${letter.partition}:`
            + `${letter.offset}`), details(letter));
          selected.querySelector("h2")?.focus();
        }));
    } catch (error) {
      context.fail(error, status);
    }
  };
  redriveAll.addEventListener("click", () => void previewRedrive(context, topic, status, settled));
  purgeAll.addEventListener("click", () => void previewPurge(context, topic, status, settled));
  refresh.addEventListener("click", () => void load());
  replace(main, h("h1", { tabindex: -1 }, `Dead letters of ${topic}`),
          h("p", { class: "lead" }, "Messages a group gave up on after their last delivery "
            + "attempt. Redriving sends a letter back to its original partition and removes it "
            + "from here."),
          h("p", {}, h("a", { href: `#/topics/${encodeURIComponent(topic)}` }, `Topic ${topic}`)),
          h("div", { class: "actions" }, redriveAll, " ", purgeAll, " ", refresh), status, listing,
          selected);
  void load();
}

/** The redrive of every dead letter, after its dry run in a confirmation panel. */
async function previewRedrive(context: Context, topic: string, status: StatusLine,
                              settled: (text: string) => Promise<void>): Promise<void> {
  try {
    const preview = await context.admin.redriveDryRun(topic);
    confirmPanel(context, {
      title: `Send every dead letter of ${topic} back to it?`,
      impact: redriveImpact(topic, preview), action: "Confirm redrive",
      run: async () => context.admin.redrive(topic),
      after: (moved) => void settled(`Redrove ${formatCount(moved)} dead letters to ${topic}.`),
    });
  } catch (error) {
    context.fail(error, status);
  }
}

/** What a redrive of every letter would move back, per partition of the dead letters, as its
 * dry run tells. */
function redriveImpact(topic: string, preview: openapi.RedriveDryRun): Node[] {
  const partitions = preview.partitions ?? [];
  const waiting = partitions.reduce((sum, p) => sum + (p.waiting ?? 0), 0);
  const capped = preview.redriven < waiting
    ? [h("p", {}, "A redrive takes the oldest first, up to its limit; redrive again for the "
      + "rest.")] : [];
  return [
    h("p", { class: "impact" }, `${formatCount(preview.redriven)} of ${formatCount(waiting)} `
      + `dead ${waiting === 1 ? "letter" : "letters"} would go back to ${topic} and leave the `
      + "dead letters."),
    ...capped,
    partitions.length === 0 ? h("p", {}, "No dead letters wait.")
      : table("What each partition would send back", ["Partition", "Waiting", "Going back"],
              partitions.map((p) => [String(p.partition ?? "?"), formatCount(p.waiting ?? 0),
                                     formatCount(p.redriven ?? 0)])),
  ];
}

/** The dead letters' purge, after its dry run in a confirmation panel. */
async function previewPurge(context: Context, topic: string, status: StatusLine,
                            settled: (text: string) => Promise<void>): Promise<void> {
  try {
    const preview = await context.admin.purgeDryRun(topic, { deadLetters: true });
    confirmPanel(context, {
      title: `Purge every dead letter of ${topic}?`, impact: purgeImpact(preview),
      action: "Purge dead letters",
      run: async () => context.admin.purge(topic, { deadLetters: true }),
      after: (done) => void settled(`Purged ${formatCount(done.purged)} dead letters of `
        + `${topic}.`),
    });
  } catch (error) {
    context.fail(error, status);
  }
}

/** The first letters of every partition of `<topic>.dlq`; none before it exists. */
async function deadLetters(context: Context, topic: string): Promise<StoredMessage[]> {
  const dlq = `${topic}.dlq`;
  let partitions: number;
  try {
    partitions = (await context.admin.describeTopic(dlq)).partitions;
  } catch (error) {
    if (error instanceof ProblemError && error.status === 404) return [];
    throw error;
  }
  const pages = await Promise.all(Array.from({ length: partitions }, (_, p) =>
    context.admin.readPartition(dlq, p, { limit: PER_PARTITION })));
  return pages.flatMap((page) => page.messages);
}

function letterTable(letters: StoredMessage[], redrive: (letter: StoredMessage) => Promise<void>,
                     inspect: (letter: StoredMessage) => void): HTMLTableElement {
  return table(`${letters.length} dead letters`,
               ["Letter", "Died", "Reason", "Group", "Deliveries", "From", "Value", "Actions"],
               letters.map((letter) => {
                 const hd = letter.headers;
                 const name = `${letter.partition}:${letter.offset}`;
                 return [name, formatTime(letter.timestampMs), hd["sg-dlq-reason"] ?? "-",
                         hd["sg-dlq-group"] ?? "-", hd["sg-dlq-delivery-count"] ?? "-",
                         `${hd["sg-dlq-partition"] ?? "?"}:${hd["sg-dlq-offset"] ?? "?"}`,
                         h("code", {}, preview(letter)),
                         h("span", { class: "actions" },
                           h("button", { type: "button", class: "secondary",
                                         "aria-label": `Inspect letter ${name}`,
                                         onclick: () => inspect(letter) }, "Inspect"), " ",
                           h("button", { type: "button", "aria-label": `Redrive letter ${name}`,
                                         onclick: () => void redrive(letter) }, "Redrive"))];
               }));
}
