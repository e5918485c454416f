/** @streamgate/client: publish and subscribe over WebSockets (HTTP where need be) for the
 * streamgate gateway. */

export { Client } from "./client.js";
export type { ClientOptions } from "./client.js";
export { Producer, encodeMessage } from "./producer.js";
export type {
  Acks, ProducerMessage, ProducerOptions, PublishTransport, RecordMetadata,
} from "./producer.js";
export { Subscription, closeError } from "./subscription.js";
export type {
  Assignment, Gap, Mode, SubscribeOptions, SubscriptionEvents, SubscriptionState,
  WebSocketConstructor, WebSocketLike,
} from "./subscription.js";
export { EventStream } from "./events.js";
export type {
  EventSourceConstructor, EventSourceLike, EventStreamEvents, EventStreamState, EventsOptions,
} from "./events.js";
export { Message } from "./message.js";
export { Admin } from "./admin.js";
export type {
  ArchivedRange, Compatibility, GroupMember, GroupPartition, GroupTopic, GroupVerdict, HistoryPage,
  ParkedKey, ParkedKeyAction, PartitionDetails, PublishDryRun, PurgeOptions, PurgeResult,
  PushRotation, PushSubscription, PushSubscriptionCreated, PushSubscriptionDescribed,
  PushSubscriptionRequest, QuotaUsage, Quotas, RedriveWhich, ReplayPage, SchemaVersion,
  SchemaVersionRef, SeekTarget, SettledParkedKey, SnapshotPage, StoredMessage, TierRange, Topic,
  TopicChange, TopicDetails,
} from "./admin.js";
export { formatCursor, parseCursor } from "./cursor.js";
export type { Cursor } from "./cursor.js";
export {
  AuthError, ConnectionError, ForbiddenError, FrameError, ProblemError, SchemaIncompatibleError,
  SchemaMismatchError, StreamgateError, SubscriptionClosedError, UnexpectedOffsetError,
} from "./errors.js";
export type { ProblemDocument, SchemaChange } from "./errors.js";
export { typeName, typesFromSchema } from "./schema_types.js";
export type { FetchLike, TokenProvider } from "./http.js";
/** The gateway's documents as its OpenAPI document (/openapi.json) types them. */
export type * as openapi from "./openapi.gen.js";
export type { BackoffOptions } from "./backoff.js";
