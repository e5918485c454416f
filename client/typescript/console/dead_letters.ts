/** A topic's dead letters: why each died, the whole letter, and redrive of one or all. */

import { ProblemError, StoredMessage } from "../src/index.js";
import { Context } from "./context.js";
import { formatTime, h, keepFocus, replace, statusLine, table } from "./dom.js";
import { details, preview } from "./messages.js";

const PER_PARTITION = 100;

export function renderDeadLetters(context: Context, main: HTMLElement, topic: string): void {
  const status = statusLine();
  const listing = h("div", {}, h("p", {}, "Loading…"));
  const selected = h("div", { class: "selected", "aria-live": "polite" });
  const redriveAll = h("button", { type: "button" }, "Redrive all");
  const refresh = h("button", { type: "button", class: "secondary" }, "Refresh");
  const dialog = confirmDialog(`Send every dead letter of ${topic} back to it?`, async () => {
    try {
      const moved = await context.admin.redrive(topic, {});
      status.show(`Redrove ${moved} dead letters to ${topic}.`, "ok");
      await load();
      keepFocus(status);
    } catch (error) {
      context.fail(error, status);
    }
  });

  const load = async (): Promise<void> => {
    try {
      const letters = await deadLetters(context, topic);
      redriveAll.disabled = letters.length === 0;
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
  redriveAll.addEventListener("click", () => dialog.showModal());
  refresh.addEventListener("click", () => void load());
  replace(main, h("h1", { tabindex: -1 }, `Dead letters of ${topic}`),
          h("p", { class: "lead" }, "Messages a group gave up on after their last delivery "
            + "attempt. Redriving sends a letter back to its original partition and removes it "
            + "from here."),
          h("p", {}, h("a", { href: `#/topics/${encodeURIComponent(topic)}` }, `Topic ${topic}`)),
          h("div", { class: "actions" }, redriveAll, " ", refresh), status, listing, selected,
          dialog);
  void load();
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

/** A modal question: Escape or "Cancel" closes it, "Confirm" runs `confirmed`. */
function confirmDialog(question: string, confirmed: () => Promise<void>): HTMLDialogElement {
  const dialog = h("dialog", { "aria-labelledby": "confirm-title" });
  // the safe answer has the focus: Enter alone must not send every letter back
  const cancel = h("button", { type: "button", class: "secondary", autofocus: true,
                               onclick: () => dialog.close() }, "Cancel");
  const confirm = h("button", { type: "button", onclick: () => {
    dialog.close();
    void confirmed();
  } }, "Confirm redrive");
  replace(dialog, h("h2", { id: "confirm-title" }, question), h("p", {},
          "They are published to the topic again and leave the dead letters."), confirm, " ",
          cancel);
  return dialog;
}
