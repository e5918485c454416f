/** The live tail: a broadcast subscription from now, with header filters, paused or cleared at
 * will; the newest messages first, a bounded number kept. */

import { Message, Subscription } from "../src/index.js";
import { Context } from "./context.js";
import { field, formatTime, h, replace, statusLine } from "./dom.js";
import { headerText, preview } from "./messages.js";

const KEPT = 500;

export function renderTail(context: Context, area: HTMLElement, topic: string): void {
  const filters = h("textarea", { rows: 2, placeholder: "tag=a,b" });
  const state = statusLine();
  const toggle = h("button", { type: "submit" }, "Start tail");
  const pause = h("button", { type: "button", class: "secondary", disabled: true }, "Pause");
  const clear = h("button", { type: "button", class: "secondary" }, "Clear");
  const list = h("ol", { class: "tail", role: "log", "aria-label": "Tailed messages",
                         reversed: true });
  let subscription: Subscription | undefined;
  let paused = false;

  const stop = (): void => {
    void subscription?.close();
    subscription = undefined;
    toggle.textContent = "Start tail";
    pause.disabled = true;
  };
  const show = (message: Message): void => {
    if (paused) return;
    list.prepend(h("li", {},
                   h("span", { class: "meta" }, `${message.partition}:${message.offset} · `
                     + `${formatTime(message.timestampMs)} · key ${message.key ?? "-"}`
                     + (Object.keys(message.headers).length
                       ? ` · ${headerText(message.headers).replace(/\n/g, ", ")}` : "")),
                   h("code", {}, preview(message))));
    while (list.childElementCount > KEPT) list.lastElementChild?.remove();
  };
  const form = h("form", { class: "card" },
                 field("Tail filters", filters, "One header=value[,value…] per line; all must "
                   + "match. Empty: every message."),
                 toggle, " ", pause, " ", clear, state);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (subscription !== undefined) {
      stop();
      state.show("Tail stopped.");
      return;
    }
    let filter: Record<string, string[]>;
    try {
      filter = parseFilters(filters.value);
    } catch (error) {
      state.show(error instanceof Error ? error.message : String(error), "error");
      return;
    }
    const started = context.client.subscribe({ topic, mode: "broadcast", from: "latest",
                                               filter });
    subscription = started;
    started.on("message", show);
    // a stopped tail's last events would overwrite "Tail stopped."
    started.on("state", (now) => {
      if (subscription === started) state.show(`Tail ${now}.`);
    });
    started.on("error", (error) => {
      if (subscription !== started) return;
      context.fail(error, state);
      if (started.state === "closed") stop();
    });
    toggle.textContent = "Stop tail";
    pause.disabled = false;
    state.show("Tail connecting…");
  });
  pause.addEventListener("click", () => {
    paused = !paused;
    pause.textContent = paused ? "Resume" : "Pause";
    state.show(paused ? "Tail paused: new messages are not shown." : "Tail resumed.");
  });
  clear.addEventListener("click", () => replace(list));
  context.onLeave(stop);
  replace(area, h("section", { "aria-labelledby": "tail" },
                  h("h2", { id: "tail" }, "Live tail"), form, list));
}

/** `name=v1,v2` lines as the client's filter. */
export function parseFilters(text: string): Record<string, string[]> {
  const filter: Record<string, string[]> = {};
  for (const line of text.split("\n").map((l) => l.trim()).filter(Boolean)) {
    const at = line.indexOf("=");
    if (at <= 0) throw new Error(`Filter line "${line}" is not header=value[,value…].`);
    filter[line.slice(0, at).trim()] = line.slice(at + 1).split(",").map((v) => v.trim());
  }
  return filter;
}
