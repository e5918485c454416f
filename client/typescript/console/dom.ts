/** Building the page from elements and text only: message contents never become markup. */

type Child = Node | string | number | null | undefined | false;
type Attributes = Record<string, string | number | boolean | EventListener | undefined>;

/** An element with attributes (`on<event>` ones become listeners) and children (strings as
 * text). */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K, attributes: Attributes = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      element.addEventListener(name.slice(2), value);
    } else {
      element.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(element, ...children);
  return element;
}

/** Append children (strings as text nodes). */
export function append(parent: Node, ...children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    parent.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace every child of `parent`. */
export function replace(parent: Node, ...children: Child[]): void {
  while (parent.firstChild) parent.removeChild(parent.firstChild);
  append(parent, ...children);
}

const shown = new WeakMap<Node, string>();

/** Whether `data` differs from what `parent` last showed (and remember it): a poll leaves an
 * unchanged listing alone, so keyboard focus on a link in it is not lost every few seconds. */
export function changed(parent: Node, data: unknown): boolean {
  const signature = JSON.stringify(data);
  if (shown.get(parent) === signature) return false;
  shown.set(parent, signature);
  return true;
}

/** A labelled form control: `<label for>` pointing at it, so it has an accessible name. */
export function field(label: string, control: HTMLInputElement | HTMLSelectElement
                      | HTMLTextAreaElement, hint?: string): HTMLElement {
  const id = control.id || uniqueId(label);
  control.id = id;
  const hintId = hint === undefined ? undefined : `${id}-hint`;
  if (hintId !== undefined) control.setAttribute("aria-describedby", hintId);
  return h("div", { class: "field" }, h("label", { for: id }, label), control,
           hint === undefined ? null : h("small", { id: hintId, class: "hint" }, hint));
}

let counter = 0;

/** An id unique in the page, readable in the DOM. */
export function uniqueId(base: string): string {
  counter++;
  return `${base.toLowerCase().replace(/[^a-z0-9]+/g, "-")}-${counter}`;
}

/** A table with a caption, column headers and rows of cells; each row's first cell heads it. */
export function table(caption: string, headers: string[], rows: Child[][]): HTMLTableElement {
  const row = (cells: Child[]): HTMLTableRowElement => h("tr", {}, ...cells.map((cell, at) =>
    at === 0 ? h("th", { scope: "row" }, cell) : h("td", {}, cell)));
  return h("table", {},
           h("caption", {}, caption),
           h("thead", {}, h("tr", {}, ...headers.map((name) => h("th", { scope: "col" }, name)))),
           h("tbody", {}, ...rows.map(row)));
}

/** A status line that screen readers announce; `show` replaces its text. */
export type StatusLine = HTMLElement & { show(text: string, tone?: "ok" | "error"): void };

export function statusLine(kind: "status" | "alert" = "status"): StatusLine {
  const element = h("p", { role: kind, class: "status",
                           "aria-live": kind === "alert" ? "assertive" : "polite" });
  return Object.assign(element, {
    show(text: string, tone?: "ok" | "error"): void {
      element.textContent = text;
      element.className = `status ${tone ?? ""}`;
    },
  });
}

/** The button that had the focus left with the table it was in (or was disabled): the result
 * takes the focus, so keyboard users go on from there and not from the top of the page. */
export function keepFocus(result: HTMLElement): void {
  if (document.activeElement !== null && document.activeElement !== document.body) return;
  result.tabIndex = -1;
  result.focus();
}

/** Epoch milliseconds as a local date and time. */
export function formatTime(ms: number): string {
  return new Date(ms).toLocaleString(undefined, { hour12: false });
}

/** A duration in the largest sensible unit. */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 7_200_000) return `${Math.round(ms / 60_000)} min`;
  if (ms < 172_800_000) return `${Math.round(ms / 3_600_000)} h`;
  return `${Math.round(ms / 86_400_000)} d`;
}

/** A size in bytes, in binary units. */
export function formatBytes(n: number): string {
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let size = n;
  let unit = -1;
  while (size >= 1024 && unit < units.length - 1) {
    size /= 1024;
    unit += 1;
  }
  return unit < 0 ? `${n} B` : `${size.toFixed(size < 10 ? 1 : 0)} ${units[unit]}`;
}

/** A count with thousands separators. */
export function formatCount(n: number): string {
  return n.toLocaleString("en-US");
}
