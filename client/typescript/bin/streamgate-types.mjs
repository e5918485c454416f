#!/usr/bin/env node
// streamgate-types <gateway-url> <topic> [--version N] [--name Type] [-o file.ts]: TypeScript
// types from a topic's JSON Schema. Credentials as the client takes them, from the environment:
// STREAMGATE_TOKEN (a JWT) or STREAMGATE_API_KEY.
import { writeFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { Client, ProblemError, typeName, typesFromSchema } from "../dist/index.js";

const USAGE = "usage: streamgate-types <gateway-url> <topic> [--version N|latest] "
  + "[--name TypeName] [-o file.ts]";

function options() {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      version: { type: "string", default: "latest" },
      name: { type: "string" },
      output: { type: "string", short: "o" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  if (positionals.length !== 2) throw new Error(USAGE);
  const version = values.version === "latest" ? "latest" : Number(values.version);
  if (version !== "latest" && !(Number.isInteger(version) && version >= 1)) {
    throw new Error(`--version takes a number or latest, not ${values.version}`);
  }
  return { url: positionals[0], topic: positionals[1], version, name: values.name,
           output: values.output };
}

async function main() {
  const args = options();
  const env = process.env;
  const client = new Client({ url: args.url, token: env.STREAMGATE_TOKEN || undefined,
                              apiKey: env.STREAMGATE_API_KEY || undefined });
  const found = await client.admin().schema(args.topic, args.version);
  const header = `Types of topic ${found.topic}, schema version ${found.version} `
    + `(${found.fingerprint.slice(0, 12)}), written by streamgate-types: do not edit.`;
  const text = typesFromSchema(found.schema, args.name ?? typeName(found.topic), header);
  if (args.output === undefined) process.stdout.write(text);
  else await writeFile(args.output, text);
}

main().catch((error) => {
  const text = error instanceof ProblemError ? `${error.status} ${error.title}: ${error.detail}`
    : error instanceof Error ? error.message : String(error);
  process.stderr.write(`streamgate-types: ${text}\n`);
  process.exitCode = 1;
});
