/** A topic's page: its partitions with a publish-rate chart, its schema versions, publishing a
 * test message, the message browser, search, key history and snapshots, the live tail, and its
 * management. */

import {
  Acks, ArchivedRange, ProducerMessage, TierRange, TopicDetails,
} from "../src/index.js";
import { TimeChart } from "./chart.js";
import { Context } from "./context.js";
import {
  changed, field, formatBytes, formatCount, formatDuration, h, keepFocus, replace, statusLine,
  table,
} from "./dom.js";
import { renderBrowser } from "./browser.js";
import { keyHistorySection, snapshotSection } from "./history.js";
import { quotaRefusal } from "./quotas.js";
import { checkAsTyped, renderSchemas, schemaRefusal } from "./schemas.js";
import { renderSearch } from "./search.js";
import { renderTail } from "./tail.js";
import { renderTopicOps } from "./topic_ops.js";

const POLL_MS = 2000;

export function renderTopic(context: Context, main: HTMLElement, name: string): void {
  const summary = h("p", { class: "lead" }, "Loading…");
  const status = statusLine();
  const partitions = h("div", {});
  const chart = new TimeChart(`Publish rate per partition of ${name}, messages per second`,
                              "msg/s");
  const browserArea = h("div", {});
  const tailArea = h("div", {});
  const schemaArea = h("div", {});
  const publishArea = h("div", {});
  const searchArea = h("div", {});
  const historyArea = h("div", {});
  const opsArea = h("div", {});
  const opsStatus = statusLine();
  replace(main,
          h("h1", { tabindex: -1 }, `Topic ${name}`), summary,
          h("p", {}, h("a", { href: `#/topics/${encodeURIComponent(name)}/dead-letters` },
                       "Dead letters of this topic"), " · ",
            h("a", { href: `#/topics/${encodeURIComponent(name)}/push` },
              "Push subscriptions of this topic"), " · ",
            h("a", { href: "#/topics" }, "All topics")),
          status,
          h("section", { "aria-labelledby": "partitions" },
            h("h2", { id: "partitions" }, "Partitions"), partitions,
            h("h3", {}, "Publish rate through this gateway (mean of the last minute)"),
            chart.element),
          schemaArea, publishArea, browserArea, searchArea, historyArea, tailArea, opsArea);
  let shownPartitions = 0;
  renderSchemas(context, schemaArea, name);
  context.every(POLL_MS, async () => {
    try {
      const topic = await context.admin.describeTopic(name);
      const kind = topic.compact ? " · compacted" : topic.keyIndex ? " · key index" : "";
      replace(summary, `${topic.partitions} partitions · retention `
        + `${formatDuration(topic.retentionMs)} · owner ${topic.owner}${kind}`);
      if (changed(partitions, topic.partitionDetails)) replace(partitions, partitionTable(topic));
      chart.add(new Map(topic.partitionDetails.map((p) => [`p${p.partition}`,
                                                            p.publishRatePerS])));
      if (shownPartitions === 0) renderTail(context, tailArea, topic.name);
      if (shownPartitions !== topic.partitions) {
        // the forms that name partitions follow a growth
        const grown = shownPartitions !== 0;
        shownPartitions = topic.partitions;
        replace(publishArea, publishForm(context, topic));
        renderBrowser(context, browserArea, topic);
        renderSearch(context, searchArea, topic);
        replace(historyArea, keyHistorySection(context, topic), snapshotSection(context, topic));
        renderTopicOps(context, opsArea, topic, opsStatus);
        // a growth replaced the button that had the focus: its result takes it
        if (grown) keepFocus(opsStatus);
      }
    } catch (error) {
      context.fail(error, status);
    }
  });
}

function partitionTable(topic: TopicDetails): HTMLTableElement {
  return table(`Partitions of ${topic.name}`,
               ["Partition", "Messages", "First offset", "Last offset", "In Redis", "Archived",
                "Publish rate (msg/s)", "Hot", "Top keys"],
               topic.partitionDetails.map((p) => [
                 p.partition, formatCount(p.length), p.firstOffset ?? "-", p.lastOffset ?? "-",
                 tierCell(p.tiers.hot), archivedCell(p.tiers.archive),
                 p.publishRatePerS.toFixed(p.publishRatePerS < 10 ? 2 : 0),
                 p.hot ? h("strong", { class: "hot" }, "hot") : "no",
                 p.topKeys.map((k) => `${k.key} (${k.messages})`).join(", ") || "-",
               ]));
}

/** A tier's entries and, when it holds some, its offset range. */
function tierCell(range: TierRange): string {
  return range.entries === 0 ? "0"
    : `${formatCount(range.entries)} (${range.firstOffset ?? "?"} to ${range.lastOffset ?? "?"})`;
}

function archivedCell(range: ArchivedRange | null): string {
  if (range === null) return "no archive tier";
  if (range.segments === 0) return "0";
  const segments = range.segments === 1 ? "1 segment" : `${formatCount(range.segments)} segments`;
  return `${tierCell(range)} in ${segments}, ${formatBytes(range.bytes)}`;
}

function publishForm(context: Context, topic: TopicDetails): HTMLElement {
  const key = h("input", { type: "text", autocomplete: "off" });
  const value = h("textarea", { rows: 4, required: true });
  value.value = '{"hello": "world"}';
  const headers = h("textarea", { rows: 2 });
  const partition = h("select", {}, h("option", { value: "" }, "by key"),
                      ...Array.from({ length: topic.partitions },
                                    (_, p) => h("option", { value: String(p) }, String(p))));
  const acks = h("select", {}, h("option", { value: "all" }, "all (replicated)"),
                 h("option", { value: "1" }, "1 (primary)"),
                 h("option", { value: "0" }, "0 (fire and forget)"));
  const status = statusLine();
  // an <output>, not a second role=status: the publish's own result keeps that line
  const check = h("output", { class: "status", "aria-live": "polite",
                              "aria-label": "Schema check" });
  const form = h("form", { class: "card" },
                 field("Key", key, "Optional: messages with one key keep their order."),
                 field("Value", value, "JSON; text that is not JSON is sent as a JSON string."),
                 field("Headers", headers, "One name=value per line."),
                 h("div", { class: "row" }, field("Partition", partition), field("Acks", acks)),
                 check, h("button", { type: "submit" }, "Publish"), status);
  const edited = checkAsTyped(context, topic.name, check, () => testMessage(
    key.value, value.value, headers.value, partition.value));
  form.addEventListener("input", edited);
  form.addEventListener("change", edited);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    let message: ProducerMessage;
    try {
      message = testMessage(key.value, value.value, headers.value, partition.value);
    } catch (error) {
      status.show(String(error instanceof Error ? error.message : error), "error");
      return;
    }
    const producer = context.client.producer({ acks: acks.value as Acks });
    producer.send(topic.name, message).then((result) => {
      status.show(result.offset === null
        ? "Accepted (acks=0: no offset is returned)."
        : `Published to partition ${result.partition} at offset ${result.offset}.`, "ok");
    }, (error: unknown) => {
      const refusal = schemaRefusal(error) ?? quotaRefusal(error);
      if (refusal === undefined) context.fail(error, status);
      else status.show(refusal, "error");
    }).finally(() => void producer.close());
  });
  return h("section", { "aria-labelledby": "publish" },
           h("h2", { id: "publish" }, "Publish a test message"), form);
}

/** The message the form describes; throws on a header line without `=`. */
export function testMessage(key: string, value: string, headerLines: string,
                            partition: string): ProducerMessage {
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    parsed = value;
  }
  const headers: Record<string, string> = {};
  for (const line of headerLines.split("\n").map((l) => l.trim()).filter(Boolean)) {
    const at = line.indexOf("=");
    if (at <= 0) throw new Error(`Header line "${line}" is not name=value.`);
    headers[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  const message: ProducerMessage = { value: parsed };
  if (key !== "") message.key = key;
  if (Object.keys(headers).length > 0) message.headers = headers;
  if (partition !== "") message.partition = Number(partition);
  return message;
}
