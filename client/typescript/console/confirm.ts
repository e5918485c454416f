/** The confirmation panel of a destructive action: what it would do (its dry run), then the real
 * call only on an explicit confirm, for some only once the topic's name is typed. */

import { Context } from "./context.js";
import { h, replace, statusLine, uniqueId } from "./dom.js";

type Content = Node | string;

export interface Confirmation<T = void> {
  title: string;
  /** What the action would do, from its dry run. */
  impact: Content[];
  /** The confirm button's text. */
  action: string;
  /** When set, confirming needs this text typed first (a topic's name for a delete). */
  typed?: string;
  /** The real call; a thrown error is shown in the panel, which stays open. */
  run: () => Promise<T>;
  /** Given what `run` returned, once the panel has closed and the page is no longer inert. */
  after?: (result: T) => void;
}

/** A modal panel: Escape or "Cancel" closes it; the safe answer (or the name to type) has the
 * focus, so Enter alone never destroys anything. */
export function confirmPanel<T>(context: Context, options: Confirmation<T>): HTMLDialogElement {
  const titleId = uniqueId("confirm-title");
  const dialog = h("dialog", { "aria-labelledby": titleId });
  const status = statusLine("alert");
  const cancel = h("button", { type: "button", class: "secondary",
                               onclick: () => dialog.close() }, "Cancel");
  const confirm = h("button", { type: "button", class: "danger" }, options.action);
  const typed = typedName(options.typed, confirm);
  confirm.addEventListener("click", () => {
    confirm.disabled = true;
    options.run().then((result) => {
      dialog.close();
      options.after?.(result);
    }, (error: unknown) => {
      context.fail(error, status);
      confirm.disabled = false;
    });
  });
  replace(dialog, h("h2", { id: titleId }, options.title), ...options.impact, typed ?? "",
          h("div", { class: "actions" }, confirm, " ", cancel), status);
  dialog.addEventListener("close", () => dialog.remove());
  document.body.appendChild(dialog);
  dialog.showModal();
  (typed?.querySelector("input") ?? cancel).focus();
  return dialog;
}

/** The field the name must be typed into; the confirm button stays disabled until it matches. */
function typedName(name: string | undefined, confirm: HTMLButtonElement): HTMLElement | undefined {
  if (name === undefined) return undefined;
  const id = uniqueId("typed-name");
  const input = h("input", { id, type: "text", autocomplete: "off", spellcheck: false });
  confirm.disabled = true;
  input.addEventListener("input", () => {
    confirm.disabled = input.value !== name;
  });
  return h("div", { class: "field" },
           h("label", { for: id }, `Type ${name} to confirm`), input);
}
