// Writes src/openapi.gen.ts: a TypeScript type for every component schema of the gateway's
// OpenAPI document, which the client's requests and answers are typed with, so that a document
// and a client that drift apart fail to compile. No dependencies:
//
//   node scripts/openapi-types.mjs [openapi.json] [out.ts]
//
// (defaults: ../../gateway/openapi.json and src/openapi.gen.ts, from the package's folder).
// It covers the JSON Schema the document uses: $ref, type (also as a list, "null" included),
// nullable, enum, const, properties with required, additionalProperties, items, allOf, oneOf,
// anyOf; a schema that constrains nothing is `unknown`.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const PACKAGE = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const WIDTH = 100;
const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
const REF = "#/components/schemas/";

/** The TypeScript of one schema; `indent` is that of the line it starts on. */
function typeOf(schema, indent) {
  if (schema === false) return "never";
  if (schema === true || schema === undefined) return "unknown";
  if (schema.$ref !== undefined) return nullable(refName(schema.$ref), schema);
  if ("const" in schema) return nullable(literal(schema.const), schema);
  if (schema.enum !== undefined) return nullable(union(schema.enum.map(literal)), schema);
  const parts = [];
  if (schema.allOf !== undefined) parts.push(...schema.allOf.map((s) => typeOf(s, indent)));
  for (const choice of [schema.oneOf, schema.anyOf]) {
    if (choice !== undefined) parts.push(union(choice.map((s) => typeOf(s, indent))));
  }
  const own = ownType(schema, indent);
  if (own !== undefined || parts.length === 0) parts.push(own ?? "unknown");
  return nullable(intersection(parts), schema);
}

/** The type `type` (or the properties) says, undefined when the schema gives neither. */
function ownType(schema, indent) {
  const types = schema.type === undefined ? [] : [schema.type].flat();
  if (types.length === 0 && (schema.properties !== undefined
                             || schema.additionalProperties !== undefined)) {
    types.push("object");
  }
  if (types.length === 0) return undefined;
  return union(types.map((type) => {
    switch (type) {
      case "string": return "string";
      case "integer": case "number": return "number";
      case "boolean": return "boolean";
      case "null": return "null";
      case "array": return arrayOf(schema.items, indent);
      case "object": return objectOf(schema, indent);
      default: throw new Error(`unsupported schema type ${JSON.stringify(type)}`);
    }
  }));
}

function nullable(type, schema) {
  return schema.nullable === true ? union([type, "null"]) : type;
}

function arrayOf(items, indent) {
  const item = typeOf(items, indent);
  return IDENTIFIER.test(item) ? `${item}[]` : `Array<${item}>`;
}

/** An object type: its properties (optional unless required) and, for additionalProperties, an
 * index signature wide enough for the named properties too (TypeScript requires that). */
function objectOf(schema, indent) {
  const properties = Object.entries(schema.properties ?? {});
  const extra = schema.additionalProperties;
  if (properties.length === 0) {
    if (extra === false) return "Record<string, never>";
    return `Record<string, ${typeOf(extra === undefined ? true : extra, indent)}>`;
  }
  const inner = `${indent}  `;
  const required = new Set(schema.required ?? []);
  const lines = ["{"];
  const types = [];
  for (const [name, property] of properties) {
    const type = typeOf(property, inner);
    types.push(type);
    lines.push(...docLines(property, inner));
    const optional = required.has(name) ? "" : "?";
    lines.push(`${inner}${IDENTIFIER.test(name) ? name : JSON.stringify(name)}${optional}: ${type};`);
  }
  if (extra !== undefined && extra !== false) {
    const optional = properties.some(([name]) => !required.has(name));
    const all = [typeOf(extra, inner), ...types, ...(optional ? ["undefined"] : [])];
    lines.push(`${inner}[name: string]: ${union(all)};`);
  }
  lines.push(`${indent}}`);
  return lines.join("\n");
}

function union(types) {
  const unique = [...new Set(types)];
  if (unique.includes("unknown")) return "unknown";
  return unique.length === 1 ? unique[0] : unique.map(grouped).join(" | ");
}

function intersection(types) {
  const known = [...new Set(types)].filter((type) => type !== "unknown");
  if (known.length === 0) return "unknown";
  return known.length === 1 ? known[0] : known.map(grouped).join(" & ");
}

/** A union or an intersection (outside any brackets), in parentheses when combined with
 * another. */
function grouped(type) {
  let depth = 0;
  for (let at = 0; at < type.length; at++) {
    const char = type[at];
    if ("{[(<".includes(char)) depth++;
    else if ("}])>".includes(char)) depth--;
    else if (depth === 0 && (char === "|" || char === "&")) return `(${type})`;
  }
  return type;
}

function literal(value) {
  return JSON.stringify(value);
}

function refName(ref) {
  if (!ref.startsWith(REF)) throw new Error(`unsupported $ref ${ref}`);
  const name = ref.slice(REF.length);
  if (!IDENTIFIER.test(name)) throw new Error(`schema name ${name} is not an identifier`);
  return name;
}

/** A JSDoc comment of the schema's description and default, wrapped; none without either. */
function docLines(schema, indent) {
  if (typeof schema !== "object" || schema === null) return [];
  const parts = [];
  if (typeof schema.description === "string") parts.push(schema.description.trim());
  if ("default" in schema) parts.push(`(default: ${JSON.stringify(schema.default)})`);
  const text = parts.join(" ").replaceAll("*/", "*\\/");
  if (text === "") return [];
  const single = `${indent}/** ${text} */`;
  if (single.length <= WIDTH) return [single];
  const lines = [`${indent}/**`];
  let line = `${indent} *`;
  for (const word of text.split(/\s+/)) {
    if (line.length + 1 + word.length > WIDTH && line !== `${indent} *`) {
      lines.push(line);
      line = `${indent} *`;
    }
    line += ` ${word}`;
  }
  lines.push(line, `${indent} */`);
  return lines;
}

/** The whole module: one exported type per component schema, in the document's order. */
export function generate(document) {
  const schemas = document.components?.schemas ?? {};
  const out = [
    "// Generated by scripts/openapi-types.mjs from gateway/openapi.json: do not edit.",
    "// `npm run gen:types` writes it again; a test fails while it differs from what the",
    "// generator makes of the document.",
  ];
  for (const [name, schema] of Object.entries(schemas)) {
    if (!IDENTIFIER.test(name)) throw new Error(`schema name ${name} is not an identifier`);
    out.push("", ...docLines(schema, ""));
    const type = typeOf(schema, "");
    // an object type alone is an interface (named in tsc's messages), anything else an alias
    const alone = type.startsWith("{") && grouped(type) === type;
    out.push(alone ? `export interface ${name} ${type}` : `export type ${name} = ${type};`);
  }
  return `${out.join("\n")}\n`;
}

function main() {
  const [input = resolve(PACKAGE, "../../gateway/openapi.json"),
         output = resolve(PACKAGE, "src/openapi.gen.ts")] = process.argv.slice(2);
  writeFileSync(output, generate(JSON.parse(readFileSync(input, "utf8"))));
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main();
}
