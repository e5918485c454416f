/** The nodes: this gateway's Redis and etcd health (/readyz), the live gateways, and who owns
 * each partition of the topics the user administers (unowned ones stand out). */

import type { Cluster, ClusterTopic } from "../src/openapi.gen.js";
import { Context } from "./context.js";
import { changed, formatTime, h, replace, statusLine, table } from "./dom.js";

const POLL_MS = 5000;

/** GET /readyz's document: each backend check's "ok" or "failed: <why>". */
interface Readiness {
  status: string;
  checks: Record<string, string>;
}

export function renderNodes(context: Context, main: HTMLElement): void {
  const health = h("div", {}, h("p", {}, "Loading…"));
  const gateways = h("div", {}, h("p", {}, "Loading…"));
  const owners = h("div", {}, h("p", {}, "Loading…"));
  const status = statusLine();
  replace(main, h("h1", { tabindex: -1 }, "Nodes"), status,
          h("section", { "aria-labelledby": "health" },
            h("h2", { id: "health" }, "Health of this gateway's backends"), health),
          h("section", { "aria-labelledby": "gateways" },
            h("h2", { id: "gateways" }, "Gateways"), gateways),
          h("section", { "aria-labelledby": "owners" },
            h("h2", { id: "owners" }, "Partition owners"),
            h("p", { class: "hint" }, "The owner of a partition runs its duties (promotion, "
              + "retention, sweeps, verdicts). A partition is unowned for a moment after its "
              + "owner died, until the owner's lease expires and another node takes it."),
            owners));
  context.every(POLL_MS, async () => {
    const [ready, cluster] = await Promise.allSettled([readiness(), context.admin.cluster()]);
    if (ready.status === "fulfilled") {
      if (changed(health, ready.value)) replace(health, healthTable(ready.value));
    } else {
      replace(health, h("p", { class: "status error" }, `No answer: ${String(ready.reason)}`));
    }
    if (cluster.status === "rejected") {
      context.fail(cluster.reason, status);
      return;
    }
    if (changed(gateways, cluster.value.nodes)) replace(gateways, gatewayTable(cluster.value));
    if (changed(owners, cluster.value.topics)) replace(owners, ownerTable(cluster.value.topics));
  });
}

/** The gateway's readiness: answered 200 (ready) or 503 (not ready) with the same document. */
async function readiness(): Promise<Readiness> {
  const response = await fetch(new URL("/readyz", window.location.origin));
  return await response.json() as Readiness;
}

function healthTable(ready: Readiness): HTMLElement {
  const good = ready.status === "ready";
  return h("div", {},
           h("p", { class: `total ${good ? "healthy" : "unhealthy"}` },
             good ? "Ready: every backend answers." : "Not ready: see the failing checks."),
           table("Backend checks of the gateway that answered", ["Check", "State"],
                 Object.entries(ready.checks).map(([name, state]) => [
                   name, h("span", { class: state === "ok" ? "healthy" : "unhealthy" }, state)])));
}

function gatewayTable(cluster: Cluster): HTMLElement {
  return table("Live gateway nodes", ["Node", "Address", "Version", "Started"],
               cluster.nodes.map((node) => [
                 node.node_id === cluster.node_id ? `${node.node_id} (this gateway)` : node.node_id,
                 node.address ?? "not advertised",
                 node.node_id === cluster.node_id ? cluster.version : "-",
                 node.started_at_ms === null ? "-" : formatTime(node.started_at_ms)]));
}

function ownerTable(topics: ClusterTopic[]): HTMLElement {
  if (topics.length === 0) return h("p", {}, "No topic you administer.");
  return table("Owner of each partition, per topic", ["Topic", "Partitions", "Owners",
                                                      "Unowned"],
               topics.map((topic) => [
                 h("a", { href: `#/topics/${encodeURIComponent(topic.name)}` }, topic.name),
                 topic.partitions.length, ownersOf(topic),
                 topic.unowned.length === 0 ? "none"
                   : h("strong", { class: "unowned" }, topic.unowned.join(", "))]));
}

/** "gw-a: 0, 2; gw-b: 1" for a topic's owned partitions. */
function ownersOf(topic: ClusterTopic): string {
  const byNode = new Map<string, number[]>();
  for (const { partition, owner } of topic.partitions) {
    if (owner !== null) byNode.set(owner, [...byNode.get(owner) ?? [], partition]);
  }
  return [...byNode].map(([node, partitions]) => `${node}: ${partitions.join(", ")}`)
    .join("; ") || "-";
}
