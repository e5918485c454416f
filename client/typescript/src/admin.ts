/** Topic, group and dead-letter administration and replay over HTTP: what a console needs. */

import { Omittable, Transport } from "./http.js";
import type * as api from "./openapi.gen.js";
import { ProducerMessage, encodeMessage } from "./producer.js";

export interface Topic {
  name: string;
  partitions: number;
  retentionMs: number;
  maxLength: number | null;
  createdAtMs: number;
  owner: string;
  /** Each key's history is kept (`keyHistory`, expected offsets). */
  keyIndex: boolean;
  /** Each key's newest message is kept (`snapshot`); `retentionMs` is the compaction lag. */
  compact: boolean;
  /** The count a growth under way asked for (publishes pause until it is reached), else null. */
  growingTo: number | null;
}

/** The offsets one tier of a partition holds (null when it holds none). */
export interface TierRange {
  firstOffset: string | null;
  lastOffset: string | null;
  entries: number;
}

/** What a partition's archive tier holds. */
export interface ArchivedRange extends TierRange {
  segments: number;
  /** Bytes of its segment files. */
  bytes: number;
}

export interface PartitionDetails {
  partition: number;
  /** Entries in the whole log, archived and hot. */
  length: number;
  /** The archive's first offset when it holds one, else the first in Redis. */
  firstOffset: string | null;
  lastOffset: string | null;
  /** The range in Redis, and the archived one (null when the gateway has no archive tier). */
  tiers: { hot: TierRange; archive: ArchivedRange | null };
  /** Messages per second recently published through the gateway that answered. */
  publishRatePerS: number;
  /** The partition takes far more than its share of the topic's messages. */
  hot: boolean;
  /** The heaviest keys of late (empty for principals that may not see them). */
  topKeys: Array<{ key: string; messages: number }>;
}

export interface TopicDetails extends Topic {
  partitionDetails: PartitionDetails[];
}

export interface GroupPartition {
  partition: number;
  pending: number;
  /** Entries not yet delivered to the group; null when Redis cannot tell. */
  lag: number | null;
  lastDeliveredOffset: string | null;
  oldestPendingOffset: string | null;
  /** Age of the oldest delivered but un-acked message; null with none. */
  oldestPendingAgeMs: number | null;
  /** key_shared groups: the keys waiting for the redelivery of a failed message (empty for
   * other groups). */
  parkedKeys: ParkedKey[];
  /** The partition owner's judgement of the group here; null while it has posted none lately. */
  verdict: GroupVerdict | null;
}

/** ok, idle, behind, stalled or paused, with the reason of a stall or of data at risk. */
export interface GroupVerdict {
  state: api.GroupVerdict["state"];
  reason: string | null;
  /** When the state began (epoch ms); for a stall, the group's last progress. */
  sinceMs: number;
  detail: string;
  /** Other reasons that hold too. */
  warnings: string[];
}

/** A key of a key_shared group that waits, alone, for the redelivery of its failed message. */
export interface ParkedKey {
  /** null for a principal that may not see message keys. */
  key: string | null;
  /** The failed message's offset. */
  offset: string;
  /** When the key parked (epoch ms). */
  sinceMs: number;
}

/** What lets a parked key go on: `release` redelivers its message now, `dead_letter` sends it to
 * the dead letters and the key's next message follows. */
export type ParkedKeyAction = api.ParkedKeyAction["action"];

/** A parked key that went on, and its message's offset. */
export interface SettledParkedKey {
  topic: string;
  partition: number;
  key: string;
  offset: string;
  action: ParkedKeyAction;
}

export interface GroupMember {
  memberId: string;
  node: string;
  joinedAtMs: number;
}

export interface GroupTopic {
  topic: string;
  generation: number | null;
  members: GroupMember[];
  /** Member id -> the partitions it is served (exclusive groups). */
  assignment: Record<string, number[]>;
  partitions: GroupPartition[];
  /** The group is paused on the topic (until `untilMs`, or until resumed when that is null). */
  paused: boolean;
  untilMs: number | null;
}

/** Where a seek moves a group: a cursor string is `"<partition>:<offset>,..."`. */
export type SeekTarget = "earliest" | "latest" | string | { timestampMs: number };

/** One stored message as replay returns it. */
export interface StoredMessage {
  partition: number;
  offset: string;
  key: string | null;
  /** The JSON value (undefined for a binary value). */
  value?: unknown;
  /** A binary value, base64. */
  valueB64?: string;
  headers: Record<string, string>;
  timestampMs: number;
}

export interface HistoryPage {
  partition: number;
  messages: StoredMessage[];
  /** Pass as `from` for the next page; null once a newest-first read is exhausted. */
  nextOffset: string | null;
}

export interface ReplayPage {
  messages: StoredMessage[];
  /** Pass as `from` to read on. */
  nextOffset: string;
}

/** The caller's quota subject and, per quota, its cap and use (`Admin.quotas`). */
export type Quotas = api.Quotas;
/** One quota's cap and use (both null: no cap of that kind). */
export type QuotaUsage = api.QuotaUsage;

/** A topic's schema version with its JSON Schema (`Admin.schema`, `Admin.registerSchema`). */
export type SchemaVersion = api.SchemaVersion;
/** A schema version as `Admin.schemas` lists it (without its schema). */
export type SchemaVersionRef = api.SchemaVersions["versions"][number];
/** How a new schema version must relate to the earlier ones (Confluent's meanings). */
export type Compatibility = api.SchemaVersion["compatibility"];
/** A publish checked and not written (`Admin.validatePublish`): the schema version its messages
 * match (null: the topic has none) and the partition each would go to. */
export type PublishDryRun = api.PublishDryRun;

/** A push subscription as the gateway shows it: header values and secrets' values hidden. */
export type PushSubscription = api.PushSubscription;
/** What `Admin.putPush` sends: the endpoint and, optionally, how it is called. */
export type PushSubscriptionRequest = api.PushSubscriptionRequest;
/** A push subscription with its endpoint's health per partition (`Admin.pushSubscription`). */
export type PushSubscriptionDescribed = api.PushSubscriptionDescribed;
/** A created push subscription carries its new signing `secret`, the only time it is shown. */
export type PushSubscriptionCreated = api.PushSubscriptionCreated;
/** A rotation's new signing secret (shown once) and the live secrets' ids and expiries. */
export type PushRotation = api.PushRotation;

export class Admin {
  private readonly transport: Transport;

  constructor(transport: Transport) {
    this.transport = transport;
  }

  /** Create a topic (409 `ProblemError` when it exists). */
  async createTopic(options: { name: string; partitions: number; retentionMs?: number;
                               maxLength?: number; keyIndex?: boolean;
                               compact?: boolean }): Promise<Topic> {
    const body: Omittable<api.TopicCreate> = {
      name: options.name, partitions: options.partitions, retention_ms: options.retentionMs,
      max_length: options.maxLength, key_index: options.keyIndex || undefined,
      compact: options.compact || undefined,
    };
    const answer = await this.transport.request<api.Topic>("POST", "/v1/topics",
                                                           { body: JSON.stringify(body) });
    return topicOf(answer.body);
  }

  /** The topics the caller may see, by name. */
  async listTopics(): Promise<Topic[]> {
    const answer = await this.transport.request<api.TopicList>("GET", "/v1/topics");
    return answer.body.topics.map(topicOf);
  }

  /** A topic with each partition's length, first and last offsets, tiers and recent publish
   * rate. */
  async describeTopic(name: string): Promise<TopicDetails> {
    const answer = await this.transport.request<api.TopicDetails>("GET", topicPath(name));
    return {
      ...topicOf(answer.body),
      partitionDetails: answer.body.partition_details.map((d) => ({
        partition: d.partition, length: d.length, firstOffset: d.first_offset,
        lastOffset: d.last_offset, tiers: tiersOf(d.tiers),
        publishRatePerS: d.publish_rate_per_s ?? 0,
        hot: d.hot ?? false, topKeys: d.top_keys ?? [],
      })),
    };
  }

  /** Grow partitions (every key keeps its order for consumers) or change retention (`maxLength:
   * null` clears the cap). */
  async updateTopic(name: string, change: TopicChange): Promise<Topic> {
    return topicOf(await this.patchTopic<api.Topic>(name, change, ""));
  }

  /** What `updateTopic` would do now (per group, the backlog a growth holds back or a retention
   * change drops), changing nothing. */
  async updateTopicDryRun(name: string, change: TopicChange): Promise<api.TopicDryRun> {
    return this.patchTopic<api.TopicDryRun>(name, change, "?dry_run=true");
  }

  private async patchTopic<T>(name: string, change: TopicChange, query: string): Promise<T> {
    const body: Omittable<api.TopicPatch> = {
      partitions: change.partitions, retention_ms: change.retentionMs, max_length: change.maxLength,
    };
    const answer = await this.transport.request<T>("PATCH", `${topicPath(name)}${query}`,
                                                   { body: JSON.stringify(body) });
    return answer.body;
  }

  /** Delete a topic's metadata and every partition's data. */
  async deleteTopic(name: string): Promise<void> {
    await this.transport.request("DELETE", topicPath(name));
  }

  /** One page of a partition's messages, from an offset (inclusive) or a time. */
  async readPartition(topic: string, partition: number,
                      options: { from?: string; fromTimeMs?: number; limit?: number } = {},
  ): Promise<ReplayPage> {
    const query = new URLSearchParams();
    if (options.from !== undefined) query.set("from", options.from);
    if (options.fromTimeMs !== undefined) query.set("from_time_ms", String(options.fromTimeMs));
    if (options.limit !== undefined) query.set("limit", String(options.limit));
    const path = `${topicPath(topic)}/partitions/${partition}/messages?${query}`;
    const answer = await this.transport.request<api.ReplayPage>("GET", path);
    return { messages: answer.body.messages.map(storedMessage),
             nextOffset: answer.body.next_offset };
  }

  /** One page of a key's messages (a topic with a key index), oldest or newest first. */
  async keyHistory(topic: string, key: string,
                   options: { newestFirst?: boolean; from?: string; fromTimeMs?: number;
                              limit?: number; partition?: number } = {}): Promise<HistoryPage> {
    const query = new URLSearchParams({ key, order: options.newestFirst ? "desc" : "asc" });
    if (options.from !== undefined) query.set("from", options.from);
    if (options.fromTimeMs !== undefined) query.set("from_time_ms", String(options.fromTimeMs));
    if (options.limit !== undefined) query.set("limit", String(options.limit));
    if (options.partition !== undefined) query.set("partition", String(options.partition));
    const answer = await this.transport.request<api.HistoryPage>(
      "GET", `${topicPath(topic)}/history?${query}`);
    return { partition: answer.body.partition, messages: answer.body.messages.map(storedMessage),
             nextOffset: answer.body.next_offset };
  }

  /** The offset of a key's newest message, or `"none"`: what a conditional append expects. */
  async keyPosition(topic: string, key: string): Promise<string> {
    const page = await this.keyHistory(topic, key, { newestFirst: true, limit: 1 });
    return page.messages[0]?.offset ?? "none";
  }

  /** Every key's newest value in a compacted partition as of one offset, and that offset: follow
   * the partition strictly after it (`from: "<partition>:<asOf>"`) for no gap and no duplicate. */
  async snapshot(topic: string, partition: number,
                 pageSize = 1000): Promise<{ asOf: string; messages: StoredMessage[] }> {
    const messages: StoredMessage[] = [];
    let page: SnapshotPage | undefined;
    do {
      page = await this.snapshotPage(topic, partition, { limit: pageSize, asOf: page?.asOf,
                                                        after: page?.after ?? undefined });
      messages.push(...page.messages);
    } while (page.after);
    return { asOf: page.asOf, messages };
  }

  /** One page of a compacted partition's snapshot, in key order: the first page fixes `asOf`;
   * pass it and the page's `after` for the next (null at the end). */
  async snapshotPage(topic: string, partition: number,
                     options: { asOf?: string | undefined; after?: string | undefined;
                                limit?: number } = {}): Promise<SnapshotPage> {
    const query = new URLSearchParams({ limit: String(options.limit ?? 100) });
    if (options.asOf !== undefined) query.set("as_of", options.asOf);
    if (options.after !== undefined) query.set("after", options.after);
    const answer = await this.transport.request<api.SnapshotPage>(
      "GET", `${topicPath(topic)}/partitions/${partition}/snapshot?${query}`);
    return { asOf: answer.body.as_of, after: answer.body.after,
             messages: answer.body.messages.map(storedMessage) };
  }

  /** Every (topic, group) the caller may see. */
  async listGroups(): Promise<Array<{ topic: string; group: string }>> {
    const answer = await this.transport.request<api.GroupList>("GET", "/v1/groups");
    return answer.body.groups;
  }

  /** A group's state on one topic (404 `ProblemError` when it has none). */
  async describeGroup(group: string, topic: string): Promise<GroupTopic | undefined> {
    const path = `${groupPath(group)}?topic=${encodeURIComponent(topic)}`;
    const answer = await this.transport.request<api.GroupDetails>("GET", path);
    const found = answer.body.topics.find((t) => t.topic === topic);
    return found && groupTopicOf(found);
  }

  /** Move a group's position on a topic; pending messages stay pending (admin only). */
  async seek(group: string, topic: string, to: SeekTarget): Promise<void> {
    const body: api.SeekRequest = {
      topic, to: typeof to === "object" ? { timestamp_ms: to.timestampMs } : to,
    };
    await this.transport.request("POST", `${groupPath(group)}/seek`,
                                 { body: JSON.stringify(body) });
  }

  /** What `seek` would do now, per partition (entries skipped or delivered again), changing
   * nothing. */
  async seekDryRun(group: string, topic: string, to: SeekTarget): Promise<api.SeekDryRun> {
    const body: api.SeekRequest = {
      topic, to: typeof to === "object" ? { timestamp_ms: to.timestampMs } : to,
    };
    const answer = await this.transport.request<api.SeekDryRun>(
      "POST", `${groupPath(group)}/seek?dry_run=true`, { body: JSON.stringify(body) });
    return answer.body;
  }

  /** Stop every delivery of the group on the topic until `resumeGroup` or `untilMs` (admin
   * only); members stay connected and positions stay. */
  async pauseGroup(group: string, topic: string,
                   untilMs?: number): Promise<api.GroupPauseState> {
    const body: api.PauseRequest = untilMs === undefined ? {} : { until_ms: untilMs };
    const answer = await this.transport.request<api.GroupPauseState>(
      "POST", `${groupPath(group)}/pause?topic=${encodeURIComponent(topic)}`,
      { body: JSON.stringify(body) });
    return answer.body;
  }

  /** Deliveries of a paused group go on where they stopped (admin only). */
  async resumeGroup(group: string, topic: string): Promise<api.GroupPauseState> {
    const answer = await this.transport.request<api.GroupPauseState>(
      "POST", `${groupPath(group)}/resume?topic=${encodeURIComponent(topic)}`);
    return answer.body;
  }

  /** The gateway nodes and, per topic the caller administers, each partition's owner. */
  async cluster(): Promise<api.Cluster> {
    return (await this.transport.request<api.Cluster>("GET", "/v1/cluster")).body;
  }

  /** The caller's own quotas: its `subject` (`principal:<name>` or `tenant:<name>`, whom its use
   * counts against) and, per quota, its `limit` and `used` across gateways (null: no cap of that
   * kind, nothing counted). Any authenticated principal. */
  async quotas(): Promise<Quotas> {
    return (await this.transport.request<Quotas>("GET", "/v1/quotas")).body;
  }

  /** Register a JSON Schema (draft 2020-12) as the topic's next version (admin only); the same
   * schema as the latest registers nothing and answers the latest. `compatibility` defaults to
   * the latest version's mode, else `backward`; `migrations` are the version's declared
   * conversions (docs/api.md, "Schemas"); `eventTypes` map CloudEvents types to pointers at
   * their subschemas under `$defs` (docs/schemas.md, "Event types"). A `SchemaIncompatibleError`
   * (409) names each incompatible change; a refused schema is a 422 `ProblemError` pointing
   * into it. */
  async registerSchema(topic: string, schema: Record<string, unknown>,
                       options: { compatibility?: Compatibility;
                                  migrations?: api.Migrations;
                                  eventTypes?: Record<string, string> } = {},
  ): Promise<SchemaVersion> {
    const body: Omittable<api.SchemaRegistration> = {
      schema, compatibility: options.compatibility, migrations: options.migrations,
      event_types: options.eventTypes,
    };
    return (await this.transport.request<SchemaVersion>(
      "POST", `${topicPath(topic)}/schemas`, { body: JSON.stringify(body) })).body;
  }

  /** The topic's schema versions, oldest first, without their schemas. */
  async schemas(topic: string): Promise<SchemaVersionRef[]> {
    return (await this.transport.request<api.SchemaVersions>(
      "GET", `${topicPath(topic)}/schemas`)).body.versions;
  }

  /** One schema version (a number, or `latest`) with its schema; a 404 `ProblemError`
   * (`schema-not-found`) when there is none. */
  async schema(topic: string, version: number | "latest" = "latest"): Promise<SchemaVersion> {
    return (await this.transport.request<SchemaVersion>(
      "GET", `${topicPath(topic)}/schemas/${version}`)).body;
  }

  /** Check `messages` as a publish to `topic` would, writing nothing: the schema version they
   * match and where each would go. A refusal is the publish's own: `SchemaMismatchError` (422,
   * `pointer` at the failing path), a `ProblemError` otherwise. Charged one read, never the
   * publish rate limits; a `TypeError` for a message without exactly one value, as `send`. */
  async validatePublish(topic: string, messages: ProducerMessage[]): Promise<PublishDryRun> {
    const body = `{"messages":[${messages.map(encodeMessage).join(",")}]}`;
    return (await this.transport.request<PublishDryRun>(
      "POST", `${topicPath(topic)}/messages?dry_run=true`, { body })).body;
  }

  /** Let a key_shared group's parked key go on now (admin only): `release` redelivers its failed
   * message at once, skipping the rest of its retry backoff; `dead_letter` sends it to
   * `<topic>.dlq` (`reason` in its `sg-dlq-reason` header) and the key's next message follows.
   * A 404 `ProblemError` (`parked-key-not-found`) when the key is not parked. */
  async settleParkedKey(options: { group: string; topic: string; partition: number; key: string;
                                   action: ParkedKeyAction;
                                   reason?: string }): Promise<SettledParkedKey> {
    const body: Omittable<api.ParkedKeyAction> = {
      topic: options.topic, partition: options.partition, key: options.key,
      action: options.action, reason: options.reason,
    };
    const answer = await this.transport.request<api.ParkedKeyResult>(
      "POST", `${groupPath(options.group)}/parked`, { body: JSON.stringify(body) });
    const { topic, partition, key, offset, action } = answer.body;
    return { topic, partition, key, offset, action };
  }

  /** The topic's push subscriptions the caller may see, without their health. */
  async pushSubscriptions(topic: string): Promise<PushSubscription[]> {
    return (await this.transport.request<api.PushSubscriptionList>(
      "GET", `${topicPath(topic)}/push`)).body.subscriptions;
  }

  /** A group's push subscription with its endpoint's health per partition; a 404
   * `ProblemError` (`push-subscription-not-found`) when it has none. */
  async pushSubscription(topic: string, group: string): Promise<PushSubscriptionDescribed> {
    return (await this.transport.request<PushSubscriptionDescribed>(
      "GET", pushPath(topic, group))).body;
  }

  /** Create or replace the group's push subscription (admin only): the gateway POSTs the topic's
   * messages to `request.endpoint`, signed. A created one's answer carries its `secret`, shown
   * only then; a replacement keeps the secrets unless it brings one. An endpoint the gateway may
   * not call is a 422 `ProblemError` (`push-endpoint-refused`, pointer `/endpoint`). */
  async putPush(topic: string, group: string,
                request: PushSubscriptionRequest): Promise<PushSubscriptionCreated> {
    return (await this.transport.request<PushSubscriptionCreated>(
      "PUT", pushPath(topic, group), { body: JSON.stringify(request) })).body;
  }

  /** Stop pushing the group's messages to its endpoint; the group's position and pending stay. */
  async deletePush(topic: string, group: string): Promise<void> {
    await this.transport.request("DELETE", pushPath(topic, group));
  }

  /** A new signing secret (`secret` brings your own); the previous one signs too until
   * `previousExpiresInS` (default a day; 0 retires it now). */
  async rotatePushSecret(topic: string, group: string,
                         options: { secret?: string; previousExpiresInS?: number } = {},
  ): Promise<PushRotation> {
    const body: Omittable<api.PushRotateRequest> = {
      secret: options.secret, previous_expires_in_s: options.previousExpiresInS,
    };
    return (await this.transport.request<PushRotation>(
      "POST", `${pushPath(topic, group)}/rotate-secret`, { body: JSON.stringify(body) })).body;
  }

  /** Move dead letters of `<topic>.dlq` back to the topic: all of them (paced), or the one named
   * by `partition` and `offset`. Returns how many went back. */
  async redrive(topic: string, which: RedriveWhich = {}): Promise<number> {
    return (await this.redriveCall<api.RedriveResult>(topic, which, "")).redriven;
  }

  /** What `redrive` would move back now (per DLQ partition: letters waiting and those it would
   * take), changing nothing; for one letter, a 404 `ProblemError` when the real call would. */
  async redriveDryRun(topic: string, which: RedriveWhich = {}): Promise<api.RedriveDryRun> {
    return this.redriveCall<api.RedriveDryRun>(topic, which, "?dry_run=true");
  }

  private async redriveCall<T>(topic: string, which: RedriveWhich, query: string): Promise<T> {
    const body: Omittable<api.RedriveRequest> = "offset" in which
      ? { partition: which.partition, offset: which.offset }
      : { max_messages: which.maxMessages, rate_per_s: which.ratePerS };
    const answer = await this.transport.request<T>(
      "POST", `${topicPath(topic)}/dlq/redrive${query}`, { body: JSON.stringify(body) });
    return answer.body;
  }

  /** Remove every message of a topic (or of one partition; `deadLetters`: of `<topic>.dlq`) at
   * one cut; consumer groups move to the cut (admin only, audited by the gateway). */
  async purge(topic: string,
              options: PurgeOptions = {}): Promise<PurgeResult> {
    return this.purgeCall<PurgeResult>(topic, options, "");
  }

  /** What `purge` would remove now and what each group would lose, changing nothing. */
  async purgeDryRun(topic: string, options: PurgeOptions = {}): Promise<api.PurgeDryRun> {
    return this.purgeCall<api.PurgeDryRun>(topic, options, "?dry_run=true");
  }

  private async purgeCall<T>(topic: string, options: PurgeOptions, query: string): Promise<T> {
    const path = `${topicPath(topic)}/${options.deadLetters === true ? "dlq/purge" : "purge"}`;
    const body: Omittable<api.PurgeRequest> = { partition: options.partition };
    const answer = await this.transport.request<T>("POST", `${path}${query}`,
                                                   { body: JSON.stringify(body) });
    return answer.body;
  }
}

/** A change to a topic: more partitions, another retention or length cap (null clears it). */
export interface TopicChange {
  partitions?: number;
  retentionMs?: number;
  maxLength?: number | null;
}

/** Which dead letters a redrive moves back: all of them (up to `maxMessages`, at `ratePerS`),
 * or the one at `partition` and `offset` of `<topic>.dlq`. */
export type RedriveWhich = { maxMessages?: number; ratePerS?: number }
  | { partition: number; offset: string };

/** Which messages a purge removes: one partition's or all; the topic's or its dead letters. */
export interface PurgeOptions {
  partition?: number;
  deadLetters?: boolean;
}

/** One page of a snapshot. */
export interface SnapshotPage {
  asOf: string;
  /** The next page's cursor; null at the end. */
  after: string | null;
  messages: StoredMessage[];
}

/** What a purge removed, per partition up to its `cut` (its last offset; null when empty). */
export interface PurgeResult {
  topic: string;
  purged: number;
  scheduled: number;
  partitions: Array<{ partition: number; purged: number; scheduled: number; cut: string | null }>;
}

function topicPath(name: string): string {
  return `/v1/topics/${encodeURIComponent(name)}`;
}

function pushPath(topic: string, group: string): string {
  return `${topicPath(topic)}/push/${encodeURIComponent(group)}`;
}

function groupPath(group: string): string {
  return `/v1/groups/${encodeURIComponent(group)}`;
}

function tiersOf(raw: api.PartitionTiers): PartitionDetails["tiers"] {
  const { hot, archive } = raw;
  return {
    hot: { firstOffset: hot.first_offset, lastOffset: hot.last_offset, entries: hot.entries },
    archive: archive === null ? null : {
      firstOffset: archive.first_offset, lastOffset: archive.last_offset,
      entries: archive.entries, segments: archive.segments, bytes: archive.bytes,
    },
  };
}

function topicOf(raw: api.Topic): Topic {
  return {
    name: raw.name, partitions: raw.partitions, retentionMs: raw.retention_ms,
    maxLength: raw.max_length, createdAtMs: raw.created_at_ms, owner: raw.owner,
    keyIndex: raw.key_index ?? false, compact: raw.compact ?? false,
    growingTo: raw.growing_to ?? null,
  };
}

function groupTopicOf(raw: api.GroupDetails["topics"][number]): GroupTopic {
  return {
    topic: raw.topic, generation: raw.generation ?? null,
    members: raw.members.map((m) => ({ memberId: m.member_id, node: m.node,
                                               joinedAtMs: m.joined_at_ms })),
    assignment: raw.assignment ?? {},
    partitions: raw.partitions.map((p) => ({
      partition: p.partition, pending: p.pending, lag: p.lag,
      lastDeliveredOffset: p.last_delivered_offset ?? null,
      oldestPendingOffset: p.oldest_pending_offset ?? null,
      oldestPendingAgeMs: p.oldest_pending_age_ms ?? null,
      parkedKeys: (p.parked_keys ?? []).map((k) => ({ key: k.key, offset: k.offset,
                                                      sinceMs: k.since_ms })),
      verdict: p.verdict ? { state: p.verdict.state, reason: p.verdict.reason,
                             sinceMs: p.verdict.since_ms, detail: p.verdict.detail,
                             warnings: p.verdict.warnings } : null,
    })),
    paused: raw.paused ?? false, untilMs: raw.until_ms ?? null,
  };
}

function storedMessage(raw: api.MessageOut): StoredMessage {
  const message: StoredMessage = {
    partition: raw.partition, offset: raw.offset, key: raw.key, headers: raw.headers,
    timestampMs: raw.timestamp_ms,
  };
  if (raw.value_b64 !== undefined) message.valueB64 = raw.value_b64;
  else message.value = raw.value;
  return message;
}
