/** How a message is shown: JSON pretty-printed, binary as base64 and a hex dump, all as text. */

import { StoredMessage } from "../src/index.js";
import { formatTime, h, replace, table } from "./dom.js";

const HEX_DUMP_BYTES = 512;
const PREVIEW_CHARS = 80;

/** One line of a value, for a table cell. */
export function preview(message: { value?: unknown; valueB64?: string | undefined }): string {
  const text = message.valueB64 !== undefined
    ? `base64 ${message.valueB64}` : JSON.stringify(message.value) ?? "";
  return text.length > PREVIEW_CHARS ? `${text.slice(0, PREVIEW_CHARS)}…` : text;
}

/** Headers as `name=value` lines. */
export function headerText(headers: Record<string, string>): string {
  return Object.entries(headers).map(([name, value]) => `${name}=${value}`).join("\n");
}

/** The whole of one message, for its details panel. */
export function details(message: StoredMessage): HTMLElement {
  const parts: HTMLElement[] = [
    h("dl", {},
      h("dt", {}, "Partition"), h("dd", {}, String(message.partition)),
      h("dt", {}, "Offset"), h("dd", {}, message.offset),
      h("dt", {}, "Time"), h("dd", {}, new Date(message.timestampMs).toISOString()),
      h("dt", {}, "Key"), h("dd", {}, message.key ?? "(none)"),
      h("dt", {}, "Headers"), h("dd", {}, headerText(message.headers) || "(none)")),
  ];
  if (message.valueB64 !== undefined) {
    parts.push(h("h3", {}, "Value (binary, base64)"),
               h("pre", { class: "value", "aria-label": "Value as base64" }, message.valueB64),
               h("h3", {}, "Value (hex)"),
               h("pre", { class: "value", "aria-label": "Value as hex" },
                 hexDump(decodeBase64(message.valueB64))));
  } else {
    parts.push(h("h3", {}, "Value (JSON)"),
               h("pre", { class: "value", "aria-label": "Value as JSON" },
                 JSON.stringify(message.value, null, 2) ?? ""));
  }
  return h("div", { class: "details" }, ...parts);
}

function decodeBase64(text: string): Uint8Array {
  const binary = atob(text);
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}

/** Offset, 16 bytes in hex, and their printable ASCII; the first bytes only. */
export function hexDump(bytes: Uint8Array): string {
  const lines: string[] = [];
  const shown = bytes.subarray(0, HEX_DUMP_BYTES);
  for (let start = 0; start < shown.length; start += 16) {
    const row = Array.from(shown.subarray(start, start + 16));
    const hex = row.map((b) => b.toString(16).padStart(2, "0")).join(" ");
    const ascii = row.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(`${start.toString(16).padStart(8, "0")}  ${hex.padEnd(47)}  ${ascii}`);
  }
  if (bytes.length > shown.length) lines.push(`… ${bytes.length - shown.length} more bytes`);
  return lines.join("\n");
}

/** Messages as a table, each with a button that shows it whole in `selected`. */
export function messageTable(caption: string, messages: StoredMessage[],
                             selected: HTMLElement): HTMLTableElement {
  return table(caption, ["Offset", "Time", "Key", "Headers", "Value", ""], messages.map((m) => [
    m.offset, formatTime(m.timestampMs), m.key ?? "-", headerText(m.headers) || "-",
    h("code", {}, preview(m)),
    h("button", {
      type: "button", class: "secondary", "aria-label": `Show message ${m.offset}`,
      onclick: () => {
        replace(selected, h("h3", { tabindex: -1 }, `Message ${m.partition}:${m.offset}`),
                details(m));
        selected.querySelector("h3")?.focus();
      },
    }, "Show"),
  ]));
}
