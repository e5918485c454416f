/** Topic and group administration over HTTP: what the tests and a first deployment need. */

import { Transport } from "./http.js";

export interface Topic {
  name: string;
  partitions: number;
  retentionMs: number;
  maxLength: number | null;
  createdAtMs: number;
  owner: string;
}

export interface PartitionDetails {
  partition: number;
  length: number;
  firstOffset: string | null;
  lastOffset: string | null;
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
}

export interface GroupTopic {
  topic: string;
  generation: number | null;
  partitions: GroupPartition[];
}

interface RawTopic {
  name: string; partitions: number; retention_ms: number; max_length: number | null;
  created_at_ms: number; owner: string;
  partition_details?: Array<{ partition: number; length: number; first_offset: string | null;
                              last_offset: string | null }>;
}

interface RawGroup {
  topics: Array<{ topic: string; generation?: number | null;
                  partitions: Array<{ partition: number; pending: number; lag: number | null;
                                      last_delivered_offset?: string | null }> }>;
}

export class Admin {
  private readonly transport: Transport;

  constructor(transport: Transport) {
    this.transport = transport;
  }

  /** Create a topic (409 `ProblemError` when it exists). */
  async createTopic(options: { name: string; partitions: number; retentionMs?: number;
                               maxLength?: number }): Promise<Topic> {
    const body: Record<string, unknown> = { name: options.name, partitions: options.partitions };
    if (options.retentionMs !== undefined) body["retention_ms"] = options.retentionMs;
    if (options.maxLength !== undefined) body["max_length"] = options.maxLength;
    const answer = await this.transport.request<RawTopic>("POST", "/v1/topics",
                                                          { body: JSON.stringify(body) });
    return topicOf(answer.body);
  }

  /** A topic with each partition's length and first and last offsets. */
  async describeTopic(name: string): Promise<TopicDetails> {
    const answer = await this.transport.request<RawTopic>("GET", topicPath(name));
    return {
      ...topicOf(answer.body),
      partitionDetails: (answer.body.partition_details ?? []).map((d) => ({
        partition: d.partition, length: d.length, firstOffset: d.first_offset,
        lastOffset: d.last_offset,
      })),
    };
  }

  /** Delete a topic's metadata and every partition's data. */
  async deleteTopic(name: string): Promise<void> {
    await this.transport.request("DELETE", topicPath(name));
  }

  /** A group's state on one topic (404 `ProblemError` when it has none). */
  async describeGroup(group: string, topic: string): Promise<GroupTopic | undefined> {
    const path = `/v1/groups/${encodeURIComponent(group)}?topic=${encodeURIComponent(topic)}`;
    const answer = await this.transport.request<RawGroup>("GET", path);
    const found = answer.body.topics.find((t) => t.topic === topic);
    return found && {
      topic: found.topic, generation: found.generation ?? null,
      partitions: found.partitions.map((p) => ({
        partition: p.partition, pending: p.pending, lag: p.lag,
        lastDeliveredOffset: p.last_delivered_offset ?? null,
      })),
    };
  }
}

function topicPath(name: string): string {
  return `/v1/topics/${encodeURIComponent(name)}`;
}

function topicOf(raw: RawTopic): Topic {
  return {
    name: raw.name, partitions: raw.partitions, retentionMs: raw.retention_ms,
    maxLength: raw.max_length, createdAtMs: raw.created_at_ms, owner: raw.owner,
  };
}
