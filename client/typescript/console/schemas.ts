/** A topic's schema versions on its page (mode, fingerprint, when, by whom, the schema itself),
 * a publish form checked against them as the user types, and a publish refused by the schema
 * told plainly (which message, where in it, why). */

import {
  AuthError, ProblemError, ProducerMessage, SchemaMismatchError, SchemaVersion, SchemaVersionRef,
} from "../src/index.js";
import { Context } from "./context.js";
import { changed, formatTime, h, replace, statusLine, table } from "./dom.js";

const POLL_MS = 5000;
// long enough that a check is not sent per keystroke, short enough to answer before Publish
const CHECK_DELAY_MS = 400;

export function renderSchemas(context: Context, area: HTMLElement, topic: string): void {
  const body = h("div", {}, h("p", {}, "Loading…"));
  const status = statusLine();
  replace(area, h("section", { "aria-labelledby": "schemas" },
                  h("h2", { id: "schemas" }, "Schema"), status, body));
  context.every(POLL_MS, async () => {
    try {
      const versions = await context.admin.schemas(topic);
      if (!changed(body, versions)) return;
      const schemas = await Promise.all(versions.map((v) => context.admin.schema(topic,
                                                                                  v.version)));
      replace(body, ...schemaView(topic, versions, schemas));
    } catch (error) {
      context.fail(error, status);
    }
  });
}

function schemaView(topic: string, versions: SchemaVersionRef[],
                    schemas: SchemaVersion[]): Node[] {
  if (versions.length === 0) {
    return [h("p", {}, "No schema: the topic accepts any JSON value.")];
  }
  const latest = versions[versions.length - 1]!;
  return [
    h("p", {}, `Publishes must match version ${latest.version}, the latest; a message that `
      + "does not is refused and nothing of its batch is written."),
    table(`Schema versions of ${topic}`,
          ["Version", "Compatibility", "Fingerprint", "Registered", "By"],
          versions.map((v) => [v.version, v.compatibility.replace("_", " "),
                               h("code", { title: v.fingerprint }, v.fingerprint.slice(0, 12)),
                               formatTime(v.created_at_ms), v.created_by])),
    ...schemas.slice().reverse().map((s) => h(
      "details", { open: s.version === latest.version },
      h("summary", {}, `Schema version ${s.version}`),
      h("pre", { class: "schema", tabindex: 0, "aria-label": `Schema version ${s.version}` },
        JSON.stringify(s.schema, null, 2)))),
  ];
}

/** A publish refused by the topic's schema, said plainly; undefined for any other error. */
export function schemaRefusal(error: unknown): string | undefined {
  if (!(error instanceof SchemaMismatchError)) return undefined;
  return `${mismatch(error, "Refused by")} Nothing was written.`;
}

/** Which message does not match, where in its value and why. */
function mismatch(error: SchemaMismatchError, verdict: string): string {
  const place = /^\/messages\/(\d+)\/(value(?:_b64)?)(.*)$/.exec(error.pointer ?? "");
  const version = error.schemaVersion === null ? "" : ` version ${error.schemaVersion}`;
  const why = error.schemaError || error.detail;
  if (place === null) return `${verdict} the topic's schema${version}: ${why}.`;
  const message = `Message ${Number(place[1]) + 1}`;
  const where = place[2] === "value_b64" ? "its value is binary, not JSON"
    : place[3] === "" ? `its value as a whole: ${why}` : `at ${place[3]}: ${why}`;
  return `${message} does not match the topic's schema${version}, ${where}.`;
}

/** Check the publish form's message through the gateway's dry run a moment after each edit (the
 * schema stays on the server: no JSON Schema engine here) and show the verdict in `line`. Returns
 * the listener to call on each edit; Publish stays enabled, the gateway decides then anyway. */
export function checkAsTyped(context: Context, topic: string, line: HTMLElement,
                             message: () => ProducerMessage): () => void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let asked = 0;
  context.onLeave(() => clearTimeout(timer));
  const check = async (): Promise<void> => {
    const mine = ++asked;
    let verdict: string;
    let tone: "ok" | "error" = "error";
    try {
      const answer = await context.admin.validatePublish(topic, [message()]);
      verdict = answer.schema_version === null ? "Valid: the topic has no schema."
        : `Valid against schema version ${answer.schema_version}.`;
      tone = "ok";
    } catch (error) {
      if (error instanceof AuthError) return context.fail(error, { show: () => undefined });
      verdict = checkFailure(error);
    }
    // an answer to an older edit says nothing of the text shown now
    if (mine !== asked || !context.active) return;
    line.textContent = verdict;
    line.className = `status ${tone}`;
  };
  return () => {
    clearTimeout(timer);
    timer = setTimeout(() => void check(), CHECK_DELAY_MS);
  };
}

/** Why the form's message would be refused: the schema's path and reason, or the problem's. */
function checkFailure(error: unknown): string {
  if (error instanceof SchemaMismatchError) return mismatch(error, "Not valid against");
  if (error instanceof ProblemError) {
    const where = error.pointer === undefined ? "" : ` (at ${error.pointer})`;
    return `A publish would be refused${where}: ${error.detail}`;
  }
  return `Not checked: ${error instanceof Error ? error.message : String(error)}`;
}
