/** TypeScript types from a topic's JSON Schema (the common keywords; anything else `unknown`):
 * what the `streamgate-types` command writes. */

type Schema = boolean | { [keyword: string]: unknown };
type SchemaObject = { [keyword: string]: unknown };

/** Keywords that change a value's shape which this generator does not map: a schema using one
 * becomes `unknown`, said so in a comment, rather than a type that would be wrong. */
const UNMAPPED = ["allOf", "not", "if", "then", "else", "dependentSchemas", "patternProperties",
                  "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "contains"];
const SCALARS: Record<string, string> = {
  string: "string", number: "number", integer: "number", boolean: "boolean", null: "null",
};
const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** The module text for `schema`: its `$defs` as exported named types, then the schema itself as
 * `rootName`. `header` (a line) heads the file as a comment. */
export function typesFromSchema(schema: Schema, rootName: string, header?: string): string {
  const defs = definitions(schema);
  const names = new Map(Object.keys(defs).map((name) => [name, typeName(name)]));
  const render = new Renderer(names, rootName);
  const blocks = Object.entries(defs).map(([name, def]) =>
    declaration(names.get(name) ?? typeName(name), def, render));
  blocks.push(declaration(rootName, schema, render));
  const head = header === undefined ? "" : `/** ${header} */\n\n`;
  return head + blocks.join("\n\n") + "\n";
}

/** `my-topic.v2` -> `MyTopicV2`: a name usable as a TypeScript type. */
export function typeName(text: string): string {
  const words = text.split(/[^A-Za-z0-9]+/).filter((word) => word !== "");
  const name = words.map((word) => word[0]!.toUpperCase() + word.slice(1)).join("");
  return /^[A-Za-z_]/.test(name) ? name : `T${name}`;
}

function definitions(schema: Schema): Record<string, Schema> {
  if (typeof schema !== "object") return {};
  const defs = schema["$defs"];
  return isObject(defs) ? (defs as Record<string, Schema>) : {};
}

function declaration(name: string, schema: Schema, render: Renderer): string {
  return `${doc(schema, "")}export type ${name} = ${render.type(schema, "")};`;
}

/** The JSDoc of a schema's `description` (or `title`), indented; "" without either. */
function doc(schema: Schema, indent: string): string {
  if (typeof schema !== "object") return "";
  const text = schema["description"] ?? schema["title"];
  if (typeof text !== "string" || text === "") return "";
  const lines = text.replaceAll("*/", "* /").split("\n");
  if (lines.length === 1) return `${indent}/** ${lines[0]} */\n`;
  return `${indent}/**\n${lines.map((line) => `${indent} * ${line}`.trimEnd()).join("\n")}\n`
    + `${indent} */\n`;
}

class Renderer {
  constructor(private readonly defs: Map<string, string>, private readonly root: string) {}

  /** A schema as a type expression; `indent` is the current line's, for nested objects. */
  type(schema: Schema, indent: string): string {
    if (schema === true) return "unknown";
    if (schema === false) return "never";
    const unmapped = UNMAPPED.find((keyword) => keyword in schema);
    if (unmapped !== undefined) return `unknown /* ${unmapped}: not mapped */`;
    if (typeof schema["$ref"] === "string") return this.reference(schema["$ref"]);
    if ("const" in schema) return literal(schema["const"]);
    if (Array.isArray(schema["enum"])) return union(schema["enum"].map(literal));
    for (const keyword of ["anyOf", "oneOf"]) {
      const options = schema[keyword];
      if (Array.isArray(options)) {
        return union(options.map((option: Schema) => this.type(option, indent)));
      }
    }
    return this.typed(schema, indent);
  }

  private typed(schema: SchemaObject, indent: string): string {
    const declared = schema["type"];
    const kinds = Array.isArray(declared) ? declared.map(String)
      : typeof declared === "string" ? [declared]
      : "properties" in schema || "additionalProperties" in schema ? ["object"]
      : "items" in schema || "prefixItems" in schema ? ["array"] : [];
    if (kinds.length === 0) return "unknown";
    return union(kinds.map((kind) => this.kind(kind, schema, indent)));
  }

  private kind(kind: string, schema: SchemaObject, indent: string): string {
    if (kind === "object") return this.object(schema, indent);
    if (kind === "array") return this.array(schema, indent);
    return SCALARS[kind] ?? `unknown /* type ${JSON.stringify(kind)}: not mapped */`;
  }

  private reference(ref: string): string {
    if (ref === "#") return this.root;
    const local = /^#\/\$defs\/([^/]+)$/.exec(ref);
    const name = local === null ? undefined : this.defs.get(decodePointer(local[1]!));
    return name ?? `unknown /* $ref ${JSON.stringify(ref).replaceAll("*/", "* /")}: not mapped */`;
  }

  private object(schema: SchemaObject, indent: string): string {
    const properties = isObject(schema["properties"])
      ? (schema["properties"] as Record<string, Schema>) : {};
    const required = new Set(Array.isArray(schema["required"]) ? schema["required"] : []);
    const extra = schema["additionalProperties"];
    const inner = `${indent}  `;
    const lines = Object.entries(properties).map(([key, property]) =>
      `${doc(property, inner)}${inner}${propertyKey(key)}${required.has(key) ? "" : "?"}: `
      + `${this.type(property, inner)};`);
    if (lines.length === 0 && isObject(extra)) {
      return `Record<string, ${this.type(extra as Schema, indent)}>`;
    }
    if (extra !== false) {
      // an index signature must admit every declared property's type too: beside properties,
      // other keys are only known to hold some JSON value
      lines.push(`${inner}[key: string]: unknown;`);
    }
    return lines.length === 0 ? "{}" : `{\n${lines.join("\n")}\n${indent}}`;
  }

  private array(schema: SchemaObject, indent: string): string {
    const items = schema["items"];
    const prefix = schema["prefixItems"];
    if (Array.isArray(prefix)) {
      const head = prefix.map((item: Schema) => this.type(item, indent));
      if (items === false) return `[${head.join(", ")}]`;
      const rest = items === undefined ? "unknown" : this.type(items as Schema, indent);
      return `[${[...head, `...${wrap(rest)}[]`].join(", ")}]`;
    }
    if (items === undefined) return "unknown[]";
    return `${wrap(this.type(items as Schema, indent))}[]`;
  }
}

function isObject(value: unknown): boolean {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function literal(value: unknown): string {
  if (value === null || ["string", "number", "boolean"].includes(typeof value)) {
    return JSON.stringify(value);
  }
  return "unknown /* a non-scalar const or enum value: not mapped */";
}

function union(types: string[]): string {
  const distinct = [...new Set(types)];
  return distinct.length === 0 ? "never" : distinct.join(" | ");
}

/** Parentheses around a union (or a commented type) before `[]`. */
function wrap(type: string): string {
  return /[ |]/.test(type) && !type.startsWith("{") ? `(${type})` : type;
}

function propertyKey(key: string): string {
  return IDENTIFIER.test(key) ? key : JSON.stringify(key);
}

function decodePointer(segment: string): string {
  return decodeURIComponent(segment).replaceAll("~1", "/").replaceAll("~0", "~");
}
