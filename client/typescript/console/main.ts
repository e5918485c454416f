/** The console's entry: sign-in, the hash router, and focus moved to each page's heading. */

import { AuthError, Client } from "../src/index.js";
import { Context } from "./context.js";
import { renderDeadLetters } from "./dead_letters.js";
import { field, h, replace, statusLine } from "./dom.js";
import { renderGroup } from "./group.js";
import { renderGroups } from "./groups.js";
import { renderNodes } from "./nodes.js";
import { renderPush } from "./push.js";
import { renderQuotas } from "./quotas.js";
import { renderTopic } from "./topic.js";
import { renderTopics } from "./topics.js";

const STORAGE_KEY = "streamgate.console.credentials";

interface Credentials {
  kind: "apiKey" | "token";
  secret: string;
}

type Page = (context: Context, main: HTMLElement, ...names: string[]) => void;

const ROUTES: Array<[RegExp, Page]> = [
  [/^#\/topics\/([^/]+)\/(?:dead-letters|dlq)$/, renderDeadLetters],
  [/^#\/topics\/([^/]+)\/push$/, renderPush],
  [/^#\/topics\/([^/]+)$/, renderTopic],
  [/^#\/groups\/([^/]+)\/([^/]+)$/, renderGroup],
  [/^#\/groups$/, renderGroups],
  [/^#\/nodes$/, renderNodes],
  [/^#\/quotas$/, renderQuotas],
  [/^#\/topics$/, renderTopics],
];

let current: Context | undefined;
// the first page keeps the browser's own starting focus (the skip link comes first)
let navigated = false;

function main(): HTMLElement {
  const found = document.getElementById("main");
  if (found === null) throw new Error("the console page has no <main id=main>");
  return found;
}

function storedCredentials(): Credentials | undefined {
  const raw = sessionStorage.getItem(STORAGE_KEY);
  if (raw === null) return undefined;
  try {
    return JSON.parse(raw) as Credentials;
  } catch {
    return undefined;
  }
}

function clientFor(credentials: Credentials | undefined): Client {
  const url = window.location.origin;
  if (credentials?.kind === "apiKey") return new Client({ url, apiKey: credentials.secret });
  if (credentials?.kind === "token") return new Client({ url, token: credentials.secret });
  return new Client({ url });
}

/** Show the page the address names (the topics by default), focused on its heading. */
function route(): void {
  current?.leave();
  const hash = window.location.hash;
  if (!hash.startsWith("#/")) {
    window.location.replace("#/topics");
    return;
  }
  const context = new Context(clientFor(storedCredentials()), showSignIn);
  current = context;
  const target = main();
  replace(target);
  for (const [pattern, page] of ROUTES) {
    const match = pattern.exec(hash);
    if (match !== null) {
      page(context, target, ...match.slice(1).map(decodeURIComponent));
      break;
    }
  }
  if (target.firstChild === null) {
    replace(target, h("h1", { tabindex: -1 }, "Not found"),
            h("p", {}, "No such page. ", h("a", { href: "#/topics" }, "Go to the topics.")));
  }
  markCurrentLink(hash);
  renderSession();
  if (navigated) target.querySelector("h1")?.focus();
  navigated = true;
}

function markCurrentLink(hash: string): void {
  for (const link of document.querySelectorAll<HTMLAnchorElement>("nav a")) {
    const section = link.getAttribute("href") ?? "";
    if (hash.startsWith(section)) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function renderSession(): void {
  const area = document.getElementById("session");
  if (area === null) return;
  const credentials = storedCredentials();
  replace(area, credentials === undefined ? null : h("button", {
    type: "button", class: "secondary",
    onclick: () => {
      sessionStorage.removeItem(STORAGE_KEY);
      showSignIn("Signed out.");
    },
  }, "Sign out"));
}

/** The sign-in form in place of the page: an API key or a token, checked before it is kept. */
function showSignIn(reason: string): void {
  current?.leave();
  current = undefined;
  const target = main();
  const kind = h("select", {}, h("option", { value: "apiKey" }, "API key"),
                 h("option", { value: "token" }, "JWT"));
  const secret = h("input", { type: "password", autocomplete: "off", required: true });
  const status = statusLine("alert");
  const form = h("form", { class: "card", "aria-labelledby": "sign-in-title" },
                 field("Credential type", kind), field("Credential", secret),
                 h("button", { type: "submit" }, "Sign in"), status);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const credentials: Credentials = { kind: kind.value as Credentials["kind"],
                                       secret: secret.value.trim() };
    clientFor(credentials).admin().listTopics().then(() => {
      sessionStorage.setItem(STORAGE_KEY, JSON.stringify(credentials));
      route();
    }, (error: unknown) => {
      const detail = error instanceof AuthError ? error.detail
        : error instanceof Error ? error.message : String(error);
      status.show(`Sign-in failed: ${detail}`, "error");
      secret.focus();
    });
  });
  replace(target, h("h1", { id: "sign-in-title", tabindex: -1 }, "Sign in"),
          h("p", { class: "lead" }, reason), form,
          h("p", { class: "hint" }, "The console calls the gateway's API with these credentials: "
            + "it shows and does what they may. They stay in this tab only."));
  renderSession();
  secret.focus();
}

function skipToContent(event: Event): void {
  event.preventDefault();
  main().querySelector("h1")?.focus();
}

document.getElementById("skip")?.addEventListener("click", skipToContent);
window.addEventListener("hashchange", route);
route();
