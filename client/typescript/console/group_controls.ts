/** What an admin does to a group: pause it (for a while or until resumed), resume it, and seek
 * it after seeing what the seek would skip or deliver again (its dry run). */

import { GroupTopic, SeekTarget } from "../src/index.js";
import type { SeekDryRun } from "../src/openapi.gen.js";
import { confirmPanel } from "./confirm.js";
import { Context } from "./context.js";
import { field, formatCount, formatTime, h, keepFocus, statusLine, table } from "./dom.js";

/** The pause section: the group's paused state, Pause (with an optional "for N minutes") and
 * Resume. */
export class PausePanel {
  readonly element: HTMLElement;
  private readonly state = h("p", { class: "total", "aria-live": "polite" }, "…");
  private readonly minutes = h("input", { type: "number", min: 1, step: 1, inputmode: "numeric" });
  private readonly status = statusLine();
  private readonly context: Context;
  private readonly group: string;
  private readonly topic: string;
  /** Describes the group again after a pause or a resume. */
  private readonly reload: () => Promise<void>;

  constructor(context: Context, group: string, topic: string, reload: () => Promise<void>) {
    this.context = context;
    this.group = group;
    this.topic = topic;
    this.reload = reload;
    const pause = h("button", { type: "button", onclick: () => this.pause() }, "Pause");
    const resume = h("button", { type: "button", class: "secondary",
                                 onclick: () => this.resume() }, "Resume");
    this.element = h("section", { "aria-labelledby": "pause" },
                     h("h2", { id: "pause" }, "Pause"), this.state,
                     h("p", { class: "hint" }, "While paused nothing is delivered to the group on "
                       + "this topic; members stay connected, positions and pending messages "
                       + "stay, and acks still work. Resuming goes on where it stopped."),
                     h("div", { class: "card" },
                       field("Pause for (minutes)", this.minutes,
                             "Empty: paused until resumed."),
                       h("div", { class: "actions" }, pause, " ", resume), this.status));
  }

  /** Show whether the group is paused now. */
  show(state: GroupTopic): void {
    const text = !state.paused ? "Delivering (not paused)."
      : state.untilMs === null ? "Paused until resumed."
        : `Paused until ${formatTime(state.untilMs)}.`;
    if (this.state.textContent !== text) this.state.textContent = text;
  }

  private pause(): void {
    const minutes = this.minutes.valueAsNumber;
    if (this.minutes.value !== "" && !(Number.isInteger(minutes) && minutes >= 1)) {
      this.status.show("Minutes must be a whole number from 1.", "error");
      this.minutes.focus();
      return;
    }
    const untilMs = this.minutes.value === "" ? undefined : Date.now() + minutes * 60_000;
    this.context.admin.pauseGroup(this.group, this.topic, untilMs).then((answer) => {
      this.status.show(answer.until_ms === null ? "Paused until resumed."
        : `Paused until ${formatTime(answer.until_ms)}.`, "ok");
      return this.reload();
    }, (error: unknown) => this.context.fail(error, this.status));
  }

  private resume(): void {
    this.context.admin.resumeGroup(this.group, this.topic).then(() => {
      this.status.show("Resumed: deliveries go on where they stopped.", "ok");
      return this.reload();
    }, (error: unknown) => this.context.fail(error, this.status));
  }
}

/** The seek section: choose a target, see its dry run, then confirm. */
export function seekSection(context: Context, group: string, topic: string,
                            reload: () => Promise<void>): HTMLElement {
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
                 h("button", { type: "submit" }, "Preview the seek"), status);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const target: SeekTarget = to.value === "time"
      ? { timestampMs: new Date(time.value).getTime() }
      : to.value === "cursor" ? cursor.value.trim() : to.value;
    context.admin.seekDryRun(group, topic, target).then((preview) => {
      const dialog = confirmPanel(context, {
        title: `Seek ${group} on ${topic}?`, impact: seekImpact(preview), action: "Seek",
        run: async () => {
          await context.admin.seek(group, topic, target);
          status.show("Moved. Pending messages stay pending.", "ok");
          await reload();
        },
      });
      dialog.addEventListener("close", () => keepFocus(status));
    }, (error: unknown) => context.fail(error, status));
  });
  return h("section", { "aria-labelledby": "seek" }, h("h2", { id: "seek" }, "Seek"),
           h("p", { class: "hint" }, "The seek is previewed first: per partition, what it would "
             + "skip or deliver again. Nothing moves until you confirm."), form);
}

function seekImpact(preview: SeekDryRun): Node[] {
  const skipped = preview.partitions.reduce((sum, p) => sum + p.skipped, 0);
  const again = preview.partitions.reduce((sum, p) => sum + p.redelivered, 0);
  const inexact = preview.partitions.some((p) => !p.exact) ? " (at least)" : "";
  const total = h("p", { class: "total" }, `Skipped${inexact}: ${formatCount(skipped)} · `
    + `delivered again${inexact}: ${formatCount(again)}`);
  return [total, table("What the seek would do per partition",
                       ["Partition", "From", "To", "Skipped", "Delivered again", "Pending kept"],
                       preview.partitions.map((p) => [
                         p.partition, p.created ? "(no position yet)" : p.from ?? "-", p.to,
                         formatCount(p.skipped), formatCount(p.redelivered),
                         formatCount(p.pending_kept)]))];
}
