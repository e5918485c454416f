/** A topic's push subscriptions: each endpoint's health per partition, creating one (its signing
 * secret shown once), rotating its secret, and deleting one after a confirm. */

import {
  ProblemError, type PushSubscriptionDescribed, type PushSubscriptionRequest, type openapi,
} from "../src/index.js";
import { confirmPanel } from "./confirm.js";
import { Context } from "./context.js";
import {
  changed, field, formatCount, formatTime, h, keepFocus, replace, statusLine, StatusLine, table,
} from "./dom.js";
import { groupHref, mapBounded } from "./groups.js";

const POLL_MS = 2000;
// subscriptions described at once: each is one request to the gateway
const DESCRIBING = 4;
// a health state in the colours of the groups' verdicts
const HEALTH_CLASSES: Record<openapi.PushHealth["state"], string> = {
  healthy: "verdict-ok", failing: "verdict-behind", open: "verdict-stalled", unknown: "",
};

type Subscription = PushSubscriptionDescribed;

interface Actions {
  rotate(subscription: Subscription): void;
  remove(subscription: Subscription): void;
}

export function renderPush(context: Context, main: HTMLElement, topic: string): void {
  const status = statusLine();
  const secretArea = h("div", {});
  const listing = h("div", {}, h("p", {}, "Loading…"));
  const health = h("div", {});
  const load = async (): Promise<void> => {
    try {
      const found = await describedSubscriptions(context, topic);
      if (changed(listing, found.map(summaryOf))) {
        replace(listing, subscriptionTable(topic, found, actions));
      }
      if (changed(health, found.map((s) => [s.group, s.health]))) {
        replace(health, ...found.map(healthTable));
      }
    } catch (error) {
      context.fail(error, status);
    }
  };
  const settled = async (text: string): Promise<void> => {
    status.show(text, "ok");
    await load();
    keepFocus(status);
  };
  const actions: Actions = {
    rotate: (subscription) => void rotate(context, subscription, secretArea, status),
    remove: (subscription) => confirmDelete(context, subscription, settled),
  };
  replace(main, h("h1", { tabindex: -1 }, `Push subscriptions of ${topic}`),
          h("p", { class: "lead" }, "Groups whose member is an HTTP endpoint: the gateway POSTs "
            + "each message to it, signed, and settles it by the answer (2xx acks, 408, 429 and "
            + "5xx retry, other answers send it to the dead letters)."),
          h("p", {}, h("a", { href: `#/topics/${encodeURIComponent(topic)}` }, `Topic ${topic}`),
            " · ", h("a", { href: `#/topics/${encodeURIComponent(topic)}/dead-letters` },
                     "Dead letters of this topic")),
          status, secretArea,
          h("section", { "aria-labelledby": "push-list" },
            h("h2", { id: "push-list" }, "Subscriptions"),
            h("p", { class: "hint" }, "Pause, resume or seek a subscription on its group's page."),
            listing, health),
          createForm(context, topic, secretArea, settled));
  context.every(POLL_MS, load);
}

/** Every push subscription of the topic with its health; one deleted meanwhile is left out. */
async function describedSubscriptions(context: Context, topic: string): Promise<Subscription[]> {
  const listed = await context.admin.pushSubscriptions(topic);
  const described = await mapBounded(listed, DESCRIBING, async (s) => {
    try {
      return await context.admin.pushSubscription(topic, s.group);
    } catch (error) {
      if (error instanceof ProblemError && error.status === 404) return undefined;
      throw error;
    }
  });
  return described.filter((s): s is Subscription => s !== undefined);
}

/** What the subscriptions' table shows: it is rebuilt (losing the focus) only when this moves. */
function summaryOf(s: Subscription): unknown[] {
  return [s.group, s.endpoint, s.format, s.batch_max_messages, s.key_ordered, s.max_in_flight,
          s.paused, s.until_ms, s.health.state];
}

function subscriptionTable(topic: string, found: Subscription[],
                           actions: Actions): HTMLElement {
  if (found.length === 0) return h("p", {}, "No push subscriptions yet.");
  return table(`Push subscriptions of ${topic}`,
               ["Group", "Endpoint", "Format", "Batch size", "Key order", "Max in flight",
                "Paused", "Health", "Actions"],
               found.map((s) => [
                 h("a", { href: groupHref(s.group, topic) }, s.group),
                 h("code", {}, s.endpoint), s.format, formatCount(s.batch_max_messages),
                 s.key_ordered ? "one in flight per key" : "none", formatCount(s.max_in_flight),
                 pausedText(s), healthBadge(s.health.state),
                 h("span", { class: "actions" },
                   h("button", { type: "button", class: "secondary",
                                 "aria-label": `Rotate the signing secret of group ${s.group}`,
                                 onclick: () => actions.rotate(s) }, "Rotate secret"), " ",
                   h("button", { type: "button", class: "danger",
                                 "aria-label": `Delete the push subscription of group ${s.group}`,
                                 onclick: () => actions.remove(s) }, "Delete")),
               ]));
}

function pausedText(s: Subscription): string {
  if (!s.paused) return "no";
  return s.until_ms === null ? "yes" : `until ${formatTime(s.until_ms)}`;
}

function healthBadge(state: openapi.PushHealth["state"]): HTMLElement {
  return h("span", { class: `verdict ${HEALTH_CLASSES[state]}` }, state);
}

/** Each partition's breaker and last requests, as its owner last posted them. */
function healthTable(s: Subscription): HTMLElement {
  const partitions = Object.entries(s.health.partitions)
    .sort(([a], [b]) => Number(a) - Number(b));
  return table(`Endpoint health of group ${s.group}`,
               ["Partition", "Pushed by", "Breaker", "Consecutive failures", "Last status",
                "Last error", "Last success", "Last failure", "In flight"],
               partitions.map(([partition, p]) => p === null
                 ? [partition, "no report from its owner lately", "-", "-", "-", "-", "-", "-", "-"]
                 : [partition, p.node, p.breaker.replace("_", "-"),
                    formatCount(p.consecutive_failures),
                    p.last_status === null ? "-" : String(p.last_status), p.last_error ?? "-",
                    timeOrDash(p.last_success_ms), timeOrDash(p.last_failure_ms),
                    formatCount(p.in_flight)]));
}

function timeOrDash(ms: number | null): string {
  return ms === null ? "-" : formatTime(ms);
}

/** A new signing secret, shown this once with its focus on the heading. */
function showSecret(area: HTMLElement, group: string, secret: string, note: string): void {
  const value = h("input", { type: "text", readonly: true, autocomplete: "off",
                             spellcheck: false, size: 60 });
  value.value = secret;
  const copied = statusLine();
  const copy = h("button", { type: "button", onclick: () => {
    value.select();
    navigator.clipboard.writeText(secret).then(
      () => copied.show("Copied to the clipboard.", "ok"),
      () => copied.show("The browser refused the clipboard: the secret is selected, copy it "
        + "with your keyboard.", "error"));
  } }, "Copy");
  const done = h("button", { type: "button", class: "secondary",
                             onclick: () => replace(area) }, "Done, hide it");
  const heading = h("h2", { id: "push-secret", tabindex: -1 }, `Signing secret of group ${group}`);
  replace(area, h("section", { class: "card", "aria-labelledby": "push-secret" }, heading,
                  h("p", {}, h("strong", {}, "Copy it now: it is shown only this once."),
                    note === "" ? null : ` ${note}`),
                  field("Signing secret", value, "Your endpoint checks each request's "
                    + "webhook-signature with it (Standard Webhooks)."),
                  h("div", { class: "actions" }, copy, " ", done), copied));
  heading.focus();
}

function createForm(context: Context, topic: string, secretArea: HTMLElement,
                    settled: (text: string) => Promise<void>): HTMLElement {
  const group = h("input", { type: "text", autocomplete: "off", required: true });
  const endpoint = h("input", { type: "url", autocomplete: "off", required: true,
                                placeholder: "https://hooks.example.com/streamgate" });
  const format = h("select", {}, h("option", { value: "json" }, "JSON batches"),
                   h("option", { value: "cloudevents" }, "CloudEvents (binary, one a request)"));
  const batch = h("input", { type: "number", min: 1, max: 1000, value: 1, required: true });
  const inFlight = h("input", { type: "number", min: 1, max: 1000, value: 16, required: true });
  const keyOrdered = h("input", { type: "checkbox", checked: true });
  const status = statusLine();
  const form = h("form", { class: "card" },
                 field("Group", group, "The consumer group the endpoint becomes the member of."),
                 field("Endpoint", endpoint, "An address this gateway may call (its "
                   + "administrators allow hosts and networks)."),
                 h("div", { class: "row" }, field("Format", format),
                   field("Batch size", batch, "Messages a request, JSON only."),
                   field("Max in flight", inFlight, "Requests at once.")),
                 field("One message of a key in flight at a time", keyOrdered),
                 h("button", { type: "submit" }, "Create push subscription"), status);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const name = group.value.trim();
    const request: PushSubscriptionRequest = {
      endpoint: endpoint.value.trim(), format: format.value as "json" | "cloudevents",
      batch_max_messages: Number(batch.value), max_in_flight: Number(inFlight.value),
      key_ordered: keyOrdered.checked,
    };
    create(context, topic, name, request).then(async (secret) => {
      status.show("");
      showSecret(secretArea, name, secret, "");
      await settled(`Created the push subscription of group ${name}.`);
    }, (error: unknown) => context.fail(error, status));
  });
  return h("section", { "aria-labelledby": "push-create" },
           h("h2", { id: "push-create" }, "Create a push subscription"), form);
}

/** Create the subscription and answer its secret; a group that has one already is refused, as
 * replacing it from this form would drop what the form does not show (its extra headers). */
async function create(context: Context, topic: string, group: string,
                      request: PushSubscriptionRequest): Promise<string> {
  try {
    await context.admin.pushSubscription(topic, group);
    throw new Error(`group ${group} has a push subscription already: delete it first, or `
      + "name another group.");
  } catch (error) {
    if (!(error instanceof ProblemError && error.status === 404)) throw error;
  }
  const created = await context.admin.putPush(topic, group, request);
  if (created.secret === undefined) throw new Error("the gateway answered no secret");
  return created.secret;
}

async function rotate(context: Context, s: Subscription, secretArea: HTMLElement,
                      status: StatusLine): Promise<void> {
  try {
    const rotation = await context.admin.rotatePushSecret(s.topic, s.group);
    const expiries = rotation.secrets.flatMap((k) => k.expires_at_ms === null ? []
      : [k.expires_at_ms]);
    const until = expiries.length === 0 ? ""
      : `The previous secret also signs until ${formatTime(Math.max(...expiries))}.`;
    status.show(`Rotated the signing secret of group ${s.group}.`, "ok");
    showSecret(secretArea, s.group, rotation.secret, until);
  } catch (error) {
    context.fail(error, status);
  }
}

function confirmDelete(context: Context, s: Subscription,
                       settled: (text: string) => Promise<void>): void {
  confirmPanel(context, {
    title: `Delete the push subscription of group ${s.group}?`,
    impact: [h("p", { class: "impact" }, `${s.endpoint} gets no more requests for ${s.topic}.`),
             h("p", {}, "The group keeps its position, its pending messages and its dead "
               + "letters.")],
    action: "Delete push subscription",
    run: async () => context.admin.deletePush(s.topic, s.group),
    after: () => void settled(`Deleted the push subscription of group ${s.group}.`),
  });
}
