"""``streamgate status``: what an operator asks first — the gateway's version and readiness (its
Redis, etcd and metadata checks), the Redis nodes it sees, the gateways and who owns what."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import aiohttp
import orjson

from streamgate_client.credentials import auth_headers, tls_hint
from streamgate_client.errors import ConnectionFailed

TIMEOUT_S = 5.0
# what an older gateway (no /v1/cluster) does not expose, said rather than left out
NOT_EXPOSED = "not exposed by the gateway (its /metrics counts this gateway's own partitions)"
_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Sample = tuple[str, dict[str, str], float]


async def status(args: argparse.Namespace) -> int:
    """Print the gateway's status (``-o table`` or ``json``); 0 when it is ready, else 1."""
    async with aiohttp.ClientSession(headers=auth_headers(args.api_key, args.token),
                                     timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as session:
        readiness = await _get(session, args, "/readyz")
        metrics = await _get(session, args, "/metrics")
        cluster = await _get(session, args, "/v1/cluster")
    document = status_document(args.url, readiness, metrics)
    document.update(cluster_part(cluster))
    if args.output == "json":
        sys.stdout.write(orjson.dumps(document).decode() + "\n")
    else:
        sys.stdout.write("".join(f"{line}\n" for line in status_lines(document)))
    return 0 if document["ready"] else 1


async def _get(session: aiohttp.ClientSession, args: argparse.Namespace,
               path: str) -> tuple[int, str]:
    """A GET's status and body; ConnectionFailed when the gateway does not answer."""
    url = args.url.rstrip("/") + path
    try:
        async with session.get(url, ssl=True if args.ssl is None else args.ssl) as response:
            return response.status, await response.text()
    except (aiohttp.ClientError, TimeoutError) as exc:
        detail = str(exc) or type(exc).__name__
        raise ConnectionFailed(f"{url}: {detail}{tls_hint(url, exc)}") from exc


def status_document(url: str, readiness: tuple[int, str], metrics: tuple[int, str]
                    ) -> dict[str, Any]:
    """The status from /readyz's answer and /metrics' (either may be refused: said, not fatal)."""
    ready_code, ready_body = readiness
    try:
        answer = orjson.loads(ready_body)
    except orjson.JSONDecodeError:
        answer = {}
    document: dict[str, Any] = {
        "url": url, "ready": ready_code == 200, "checks": answer.get("checks", {}),
        "version": None, "redis_nodes": [], "partitions_owned": None, "topics": [],
        "gateways": NOT_EXPOSED, "owners": []}
    metrics_code, metrics_body = metrics
    if metrics_code != 200:
        document["metrics"] = f"/metrics answered {metrics_code}"
        return document
    samples = list(parse_metrics(metrics_body))
    document.update(_from_metrics(samples))
    return document


def parse_metrics(text: str) -> Iterator[Sample]:
    """The samples of a Prometheus text exposition: name, labels, value."""
    for line in text.splitlines():
        found = None if line.startswith("#") else _SAMPLE.match(line)
        if found is None:
            continue
        labels = {k: v.replace('\\"', '"').replace("\\\\", "\\")
                  for k, v in _LABEL.findall(found.group(2) or "")}
        yield found.group(1), labels, float(found.group(3))


def _from_metrics(samples: list[Sample]) -> dict[str, Any]:
    by_name: dict[str, list[tuple[dict[str, str], float]]] = {}
    for name, labels, value in samples:
        by_name.setdefault(name, []).append((labels, value))
    build = by_name.get("streamgate_build_info", [({}, 0.0)])[0][0]
    owned = {labels["topic"]: int(value)
             for labels, value in by_name.get("streamgate_topic_owned_partitions", [])}
    topics = [{"topic": labels["topic"], "partitions": int(value),
               "owned_here": owned.get(labels["topic"], 0)}
              for labels, value in by_name.get("streamgate_topic_partitions", [])]
    used = {labels.get("node", ""): (labels.get("role", ""), value)
            for labels, value in by_name.get("streamgate_redis_memory_used_bytes", [])}
    headroom = {labels.get("node", ""): value
                for labels, value in by_name.get("streamgate_redis_memory_headroom_ratio", [])}
    nodes = [{"node": node, "role": role, "used_bytes": int(value),
              "headroom": headroom.get(node)} for node, (role, value) in sorted(used.items())]
    total = by_name.get("streamgate_partitions_owned", [({}, 0.0)])[0][1]
    return {"version": build.get("version"), "redis_nodes": nodes,
            "partitions_owned": int(total), "topics": sorted(topics, key=lambda t: t["topic"])}


def status_lines(document: Mapping[str, Any]) -> list[str]:
    """The status for a person: a few aligned lines per part."""
    lines = [f"gateway   {document['url']}  version {document['version'] or 'unknown'}",
             f"ready     {'yes' if document['ready'] else 'NO'}"]
    lines += [f"  {name:<9}{state}" for name, state in document["checks"].items()]
    if "metrics" in document:
        return [*lines, f"metrics   {document['metrics']}"]
    lines.append(f"redis     {len(document['redis_nodes'])} nodes")
    for node in document["redis_nodes"]:
        headroom = "?" if node["headroom"] is None else f"{node['headroom']:.0%} free"
        lines.append(f"  {node['node']:<22}{node['role']:<8}{node['used_bytes']:>12} B  {headroom}")
    lines.append(f"owned     {document['partitions_owned']} partitions by this gateway")
    width = max([len(t["topic"]) for t in document["topics"]] + [5])
    lines += [f"  {t['topic']:<{width}}  {t['owned_here']}/{t['partitions']}"
              for t in document["topics"]]
    return lines + cluster_lines(document)


def cluster_part(cluster: tuple[int, str]) -> dict[str, Any]:
    """The gateways and the owner of each partition from /v1/cluster's answer (said when
    refused)."""
    code, body = cluster
    if code == 404:
        return {"gateways": NOT_EXPOSED, "owners": []}
    if code != 200:
        return {"gateways": f"/v1/cluster answered {code}", "owners": []}
    answer = orjson.loads(body)
    owners = [{"topic": topic["name"],
               "owners": {str(p["partition"]): p["owner"] for p in topic["partitions"]},
               "unowned": topic["unowned"]} for topic in answer["topics"]]
    gateways = [{**node, "this": node["node_id"] == answer["node_id"],
                 "partitions_owned": sum(owner == node["node_id"] for topic in owners
                                         for owner in topic["owners"].values())}
                for node in answer["nodes"]]
    return {"gateways": gateways, "owners": owners}


def cluster_lines(document: Mapping[str, Any]) -> list[str]:
    """The gateways, one line each (id, the URL it announces, its partitions), then per topic the
    partitions each gateway owns."""
    gateways = document["gateways"]
    if isinstance(gateways, str):
        return [f"gateways  {gateways}"]
    lines = [f"gateways  {len(gateways)} live"]
    width = max([len(g["node_id"]) for g in gateways] + [4])
    reach = max([len(g["address"] or "-") for g in gateways] + [1])
    lines += [f"  {g['node_id']:<{width}}  {g['address'] or '-':<{reach}}  "
              f"{g['partitions_owned']:>5} partitions{'  (this gateway)' if g['this'] else ''}"
              for g in gateways]
    lines.append(f"owners    {len(document['owners'])} topics")
    for topic in document["owners"]:
        held: dict[str, list[str]] = {}
        for partition, owner in topic["owners"].items():
            held.setdefault(owner or "unowned", []).append(partition)
        lines.append(f"  {topic['topic']}  " + "  ".join(
            f"{owner}: {','.join(partitions)}" for owner, partitions in sorted(held.items())))
    return lines
