/**
 * Writes src/client/wire.ts: the wire types of the published client (@aip-registry/client, and the
 * CLI), generated from the zod schemas that validate the server's requests and answers
 * (src/schemas.ts) by way of the OpenAPI components they render to. The client then depends on
 * nothing (no zod, no server module) and still cannot drift from the server:
 * test/unit/client-types.test.ts fails when this file is stale (run `npm run client:types`) and
 * checks, at compile time, that each generated type is the zod schema's (`z.infer`, or `z.input`
 * for what the client sends).
 *
 * Each named schema becomes one exported type, and a schema the OpenAPI document names itself
 * (`.openapi("Manifest")`) becomes a type of that name referenced where it is used. Descriptions
 * become doc comments. The printer knows the JSON Schema keywords the document uses and refuses
 * any other that would change a type, rather than print a wrong one.
 */
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { OpenAPIHono } from "@hono/zod-openapi";
import { packageRoot } from "../src/db/sql-files.js";
import { PROBLEM_STATUS } from "../src/registry/errors.js";
import * as S from "../src/schemas.js";

export const CLIENT_TYPES_FILE = join(packageRoot, "src", "client", "wire.ts");

/**
 * The types the client names, with what they are on the wire. `input`: what the client sends (the
 * compile-time check compares it with z.input); otherwise what the server answers (z.infer).
 */
export const CLIENT_TYPES = {
  Problem: { schema: S.Problem, doc: "An RFC 9457 problem+json answer: `code` is stable, the extension members depend on it." },
  Topology: { schema: S.Topology, doc: "Where a replica runs." },
  RouteAssignment: { schema: S.RouteAssignment, doc: "A route: present it unchanged to settle it." },
  SettlementOutcome: { schema: S.SettlementOutcome, doc: "How an action ended." },
  SettlementResult: { schema: S.SettlementResult, doc: "A settlement's answer." },
  ResolveOutcome: { schema: S.ResolveOutcome, doc: "`AIP-Route-Outcome`: a new route, the existing one, or the existing one re-reserved." },
  CapabilityDefinition: { schema: S.CapabilityDefinition, doc: "A capability as the catalog serves it." },
  CatalogPage: { schema: S.CatalogPage, doc: "A page of the tenant's catalog, at one revision." },
  CatalogEntry: { schema: S.CatalogEntry, doc: "One capability definition and the revision it was read at." },
  CatalogChange: { schema: S.CatalogChange, doc: "One capability's change after `since`." },
  CatalogChanges: { schema: S.CatalogChanges, doc: "A page of the tenant's catalog changes after `since`." },
  LifecycleOperation: { schema: S.LifecycleOperation, doc: "A replica lifecycle transition." },
  LifecycleResponse: { schema: S.LifecycleResponse, doc: "A lifecycle transition's answer: `sequence` is the next `previous_sequence`." },
  PublicationResult: { schema: S.PublicationResult, doc: "A publication's report." },
  VersionIdentity: { schema: S.VersionIdentity, doc: "A connector version as the registry reader shows it." },
  InstanceIdentity: { schema: S.InstanceIdentity, doc: "A connector instance as the registry reader shows it (never its secret_provider_ref)." },
  ReplicaIdentity: { schema: S.ReplicaIdentity, doc: "A connector replica as the registry reader shows it." },
  FleetStatus: { schema: S.FleetStatus, doc: "Counts over the whole fleet." },
  FleetRegion: { schema: S.FleetRegion, doc: "Counts over one region." },
  FleetRegions: { schema: S.FleetRegions, doc: "The fleet by region." },
  LeaseExpiryResult: { schema: S.LeaseExpiryResult, doc: "One lease-expiry batch's answer." },
  RouteRetentionResult: { schema: S.RouteRetentionResult, doc: "One route-retention batch's answer." },
  RouteEvidence: { schema: S.RouteEvidence, doc: "A released route, as exported." },
  RoutesPage: { schema: S.RoutesPage, doc: "A page of released routes." },
  RouteExportWatermarks: { schema: S.RouteExportWatermarks, doc: "The export watermarks after a recorded export." },
  InvariantReport: { schema: S.InvariantReport, doc: "What the invariant checker found." },
  AdminRecordKind: { schema: S.AdminRecordKind, doc: "A kind of administrative record, as its path names it." },
  BindingsPage: { schema: S.BindingsPage, doc: "A page of a tenant's bindings." },
  Readiness: { schema: S.Readiness, doc: "`/readyz`: ready, or not and why." },
  TopologyPreference: { schema: S.TopologyPreference, input: true, doc: "Where a route should go, if it can." },
  ResolveRequest: { schema: S.ResolveRequest, input: true, doc: "A route request." },
  LifecycleRequest: {
    schema: S.LifecycleRequest,
    input: true,
    doc: "Any lifecycle request, as the server's schema reads it. Prefer the per-operation types (RegisterRequest, HeartbeatRequest, ...).",
  },
  Change: { schema: S.Change, input: true, doc: "One change of a publication batch." },
  CatalogQuery: { schema: S.CatalogQuery, input: true, doc: "A catalog page request's query." },
  CatalogChangesQuery: { schema: S.CatalogChangesQuery, input: true, doc: "A change feed request's query." },
} as const;

type JsonSchema = { [key: string]: unknown };

/** Keywords that only constrain values (or document them): they do not change a TypeScript type. */
const VALUE_ONLY = new Set([
  "description",
  "example",
  "examples",
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
  "minLength",
  "maxLength",
  "pattern",
  "format",
  "minItems",
  "maxItems",
  "uniqueItems",
  "default",
  "title",
  "minProperties",
  "maxProperties",
  "multipleOf",
  "propertyNames",
  "readOnly",
  "writeOnly",
  "deprecated",
  "discriminator",
]);
const TYPE_KEYWORDS = new Set([
  "type",
  "properties",
  "required",
  "additionalProperties",
  "items",
  "prefixItems",
  "enum",
  "const",
  "anyOf",
  "oneOf",
  "allOf",
  "$ref",
]);

const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;
const quoteKey = (key: string) => (IDENTIFIER.test(key) ? key : JSON.stringify(key));
const literal = (value: unknown) => JSON.stringify(value);

function comment(text: string | undefined, indent: string): string {
  if (!text) return "";
  const lines = text.replace(/\*\//g, "*\\/").split("\n");
  return lines.length === 1 ? `${indent}/** ${lines[0]} */\n` : `${indent}/**\n${lines.map((line) => `${indent} * ${line}`).join("\n")}\n${indent} */\n`;
}

/** A printed type, and whether it is a union or an intersection (parenthesized before `[]` or `&`). */
interface Printed {
  text: string;
  compound: boolean;
}

const atom = (text: string): Printed => ({ text, compound: false });
const wrap = (type: Printed) => (type.compound ? `(${type.text})` : type.text);

function union(members: Printed[]): Printed {
  const texts = [...new Set(members.map((member) => member.text))];
  return texts.length === 1 ? (members.find((member) => member.text === texts[0]) as Printed) : { text: texts.join(" | "), compound: true };
}

/** The TypeScript type of a JSON Schema, at an indentation (for nested object literals). */
function print(schema: JsonSchema, indent: string, where: string): Printed {
  for (const key of Object.keys(schema)) {
    if (!VALUE_ONLY.has(key) && !TYPE_KEYWORDS.has(key)) throw new Error(`${where}: the keyword ${key} is not supported by the client type printer`);
  }
  if (typeof schema.$ref === "string") {
    const name = /^#\/components\/schemas\/(\w+)$/.exec(schema.$ref)?.[1];
    if (!name) throw new Error(`${where}: unsupported $ref ${schema.$ref}`);
    return atom(name);
  }
  if (schema.const !== undefined) return atom(literal(schema.const));
  const alternatives = (schema.anyOf ?? schema.oneOf) as JsonSchema[] | undefined;
  if (alternatives) return union(alternatives.map((alternative, n) => print(alternative, indent, `${where}|${n}`)));
  if (schema.allOf) {
    const parts = (schema.allOf as JsonSchema[]).map((part, n) => wrap(print(part, indent, `${where}&${n}`)));
    return parts.length === 1 ? atom(parts[0] as string) : { text: parts.join(" & "), compound: true };
  }
  if (Array.isArray(schema.enum)) return union(schema.enum.map((value) => atom(literal(value))));
  const types = Array.isArray(schema.type) ? (schema.type as string[]) : schema.type === undefined ? [] : [schema.type as string];
  if (types.length === 0) return atom("unknown");
  return union(types.map((type) => printType(type, schema, indent, where)));
}

function printType(type: string, schema: JsonSchema, indent: string, where: string): Printed {
  switch (type) {
    case "string":
      return atom("string");
    case "integer":
    case "number":
      return atom("number");
    case "boolean":
      return atom("boolean");
    case "null":
      return atom("null");
    case "array": {
      if (Array.isArray(schema.prefixItems)) {
        return atom(`[${(schema.prefixItems as JsonSchema[]).map((item, n) => print(item, indent, `${where}[${n}]`).text).join(", ")}]`);
      }
      const items = schema.items as JsonSchema | undefined;
      return atom(`${items ? wrap(print(items, indent, `${where}[]`)) : "unknown"}[]`);
    }
    case "object":
      return atom(printObject(schema, indent, where));
    default:
      throw new Error(`${where}: unsupported type ${type}`);
  }
}

function printObject(schema: JsonSchema, indent: string, where: string): string {
  const properties = (schema.properties ?? {}) as Record<string, JsonSchema>;
  const required = new Set((schema.required ?? []) as string[]);
  const inner = `${indent}  `;
  const members = Object.entries(properties).map(
    ([key, property]) =>
      `${comment(property.description as string | undefined, inner)}${inner}${quoteKey(key)}${required.has(key) ? "" : "?"}: ${print(property, inner, `${where}.${key}`).text};\n`,
  );
  const extra = schema.additionalProperties;
  if (extra !== undefined && extra !== false) {
    const value = extra === true || Object.keys(extra as JsonSchema).length === 0 ? "unknown" : print(extra as JsonSchema, inner, `${where}.*`).text;
    // Named members must fit the index signature: widen it to unknown when there are any.
    members.push(`${inner}[key: string]: ${members.length > 0 ? "unknown" : value};\n`);
  }
  return members.length === 0 ? "Record<string, never>" : `{\n${members.join("")}${indent}}`;
}

/** The OpenAPI components of the named schemas (and of the schemas they reference by name). */
function components(): Record<string, JsonSchema> {
  const app = new OpenAPIHono();
  for (const [name, { schema }] of Object.entries(CLIENT_TYPES)) app.openAPIRegistry.register(name, schema);
  const document = app.getOpenAPI31Document({ openapi: "3.1.0", info: { title: "client types", version: "0" } });
  return (document.components?.schemas ?? {}) as Record<string, JsonSchema>;
}

export function renderClientTypes(): string {
  const schemas = components();
  const docs: Record<string, string> = Object.fromEntries(Object.entries(CLIENT_TYPES).map(([name, { doc }]) => [name, doc]));
  const blocks = Object.keys(schemas)
    .sort()
    .map((name) => {
      const schema = schemas[name] as JsonSchema;
      const text = [docs[name], schema.description as string | undefined].filter(Boolean).join("\n\n");
      const type = print(schema, "", name);
      // An object is an interface (its name shows in editors and errors); anything else an alias.
      const declaration = schema.type === "object" && !type.compound ? `export interface ${name} ${type.text}` : `export type ${name} = ${type.text};`;
      return `${comment(text, "")}${declaration}\n`;
    });
  const codes = Object.keys(PROBLEM_STATUS)
    .map((code) => `  | ${literal(code)}`)
    .join("\n");
  return [
    "// Generated by scripts/generate-client-types.ts from src/schemas.ts: do not edit. `npm run client:types`",
    "// writes it again; test/unit/client-types.test.ts fails when it is stale.",
    "",
    "/** The problem codes of the registry (src/registry/errors.ts): `RegistryProblem.code`. */",
    `export type ProblemCode =\n${codes};`,
    "",
    ...blocks,
  ].join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  await writeFile(CLIENT_TYPES_FILE, renderClientTypes());
  console.log(`wrote ${CLIENT_TYPES_FILE}`);
}
