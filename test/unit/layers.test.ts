/**
 * The layer map inside src/ (docs/architecture.md, "Layers"): which part of src/ may import which,
 * and the one module that names SQLSTATEs. A part is a folder of src/ or a file at its top.
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, normalize, relative } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { expect, it } from "vitest";

const root = fileURLToPath(new URL("../../", import.meta.url));

/** The shared rules: leaves every layer may read (src/limits.ts, src/vocabulary.ts, ...). */
/**
 * What every part may use: the shared rules, and the request's trace and the log (src/telemetry/:
 * every layer logs, and every statement names its request's trace).
 */
const SHARED = ["limits.ts", "vocabulary.ts", "record-kinds.ts", "schemas.ts", "canonical-json.ts", "telemetry"];

/**
 * What each part of src/ may import besides itself and the shared rules. Top to bottom, the
 * request path: entry -> app -> routes (+ http) -> catalog (serving) -> registry (client) -> db
 * (executors). Nothing imports a layer above its own, with the exceptions named here.
 */
const MAY_IMPORT: Record<string, readonly string[]> = {
  // The edge: the entry points wire everything together.
  entry: ["*"],
  // The CLI's commands; `serve` runs the Node entry itself, exactly as `npm start` does.
  cli: ["entry", "node", "http", "registry", "db", "client"],
  // The Node server's own parts; `entry` only for the RunningServer type its signal handling stops.
  node: ["entry", "http", "observability", "registry"],
  "app.ts": ["routes", "http", "catalog", "observability", "maintenance", "dashboard", "docs", "registry", "config.ts"],
  routes: ["http", "catalog", "observability", "maintenance", "registry"],
  // The metrics route is a route: it uses the routes' common parts.
  observability: ["routes", "http", "maintenance", "registry", "db", "config.ts"],
  dashboard: ["http"],
  docs: ["http"],
  // Authentication and problem+json: RegistryError and the problem codes.
  http: ["registry"],
  "config.ts": ["http"],
  // Serving: the registry's catalog reads, and content-coding negotiation.
  catalog: ["http", "registry"],
  // Background cycles: the registry, and the change history's trimming schedule.
  maintenance: ["catalog", "registry"],
  // The registry client: one SQL statement per method, on the executors below it.
  registry: ["db"],
  db: [],
  // The published client (@aip-registry/client): self-contained, its wire types generated from the schemas.
  client: [],
  "limits.ts": [],
  "vocabulary.ts": [],
  "record-kinds.ts": [],
  "schemas.ts": [],
  "canonical-json.ts": [],
  telemetry: [],
  // Ambient declarations (the Worker's AsyncLocalStorage).
  types: [],
};

const partOf = (path: string) => path.split("/")[1] as string;

/** Every TypeScript file under src/, as repository paths. */
const sources = (readdirSync(join(root, "src"), { recursive: true }) as string[]).filter((name) => name.endsWith(".ts")).map((name) => join("src", name));

/** Every relative import (static, dynamic, type-only) of the TypeScript files under src/, inside src/. */
function imports(): { file: string; target: string }[] {
  return sources.flatMap((file) =>
    [...readFileSync(join(root, file), "utf8").matchAll(/(?:from|import)\s*\(?\s*"(\.{1,2}\/[^"]+)"/g)]
      .map((m) => ({ file, target: relative(root, normalize(join(root, dirname(file), m[1] as string))) }))
      .filter(({ target }) => target.startsWith("src/")),
  );
}

it("every part of src/ is on the layer map", () => {
  expect([...new Set(sources.map(partOf))].filter((part) => !(part in MAY_IMPORT))).toEqual([]);
});

it("each part of src/ imports only what the layer map allows", () => {
  const found = imports();
  expect(found.length).toBeGreaterThan(100); // the check sees imports at all
  const crossings = found
    .filter(({ file, target }) => {
      const [from, to] = [partOf(file), partOf(target.replace(/\.js$/, ".ts"))];
      const allowed = MAY_IMPORT[from] ?? [];
      return from !== to && !SHARED.includes(to) && !allowed.includes("*") && !allowed.includes(to);
    })
    .map(({ file, target }) => `${file} -> ${target}`);
  expect(crossings).toEqual([]);
});

it("the shared rules import only one another", () => {
  const crossings = imports()
    .filter(({ file, target }) => SHARED.includes(partOf(file)) && !SHARED.includes(partOf(target.replace(/\.js$/, ".ts"))))
    .map(({ file, target }) => `${file} -> ${target}`);
  expect(crossings).toEqual([]);
});

// SQLSTATEs -----------------------------------------------------------------------------------------
/** The one module that names SQLSTATEs and classifies database errors by them. */
const CLASSIFIER = "src/db/sqlstate.ts";
/** A SQLSTATE, or the class of one: two characters of a class (00-58, or AR: the registry's own), then three. */
const SQLSTATE = /^(?:[0-5][0-9]|AR)[0-9A-Z]{3}$/;
const CLASS_PREFIX = /^(?:[0-5][0-9]|AR)[0-9A-Z]{0,2}$/;
/** In a regular expression: a SQLSTATE, an anchored alternation of classes (`^(08|57P)`), or a class and any three (`08\w{3}`). */
const SQLSTATE_PATTERN = [
  /(?<![0-9A-Za-z\\])(?:[0-5][0-9]|AR)[0-9A-Z]{3}(?![0-9A-Za-z])/,
  /\^\((?:\?:)?(?:[0-5][0-9]|AR)[0-9A-Z]{0,3}[|)]/,
  /(?:[0-5][0-9]|AR)\\w\{3\}/,
];
const NAMED_SQLSTATES = new Set(["PROBLEM_SQLSTATE", "REPLICA_BEHIND_SQLSTATE"]);

/** Where a source file names or matches a SQLSTATE: literals, class prefixes, patterns and comparisons with the named ones. */
function sqlstateUses(file: string): string[] {
  const source = ts.createSourceFile(file, readFileSync(join(root, file), "utf8"), ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const at = (node: ts.Node) => `${file}:${source.getLineAndCharacterOfPosition(node.getStart()).line + 1} ${node.getText()}`;
  const visit = (node: ts.Node): void => {
    if ((ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) && SQLSTATE.test(node.text)) found.push(at(node));
    if (
      ts.isCallExpression(node) &&
      ts.isPropertyAccessExpression(node.expression) &&
      node.expression.name.text === "startsWith" &&
      node.arguments[0] &&
      ts.isStringLiteral(node.arguments[0]) &&
      CLASS_PREFIX.test(node.arguments[0].text)
    )
      found.push(at(node));
    if (node.kind === ts.SyntaxKind.RegularExpressionLiteral && SQLSTATE_PATTERN.some((pattern) => pattern.test(node.getText()))) found.push(at(node));
    if (ts.isBinaryExpression(node) && [node.left, node.right].some((side) => ts.isIdentifier(side) && NAMED_SQLSTATES.has(side.text))) found.push(at(node));
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

it(`SQLSTATEs are named and classified only in ${CLASSIFIER}`, () => {
  expect(sources.filter((file) => file !== CLASSIFIER).flatMap(sqlstateUses)).toEqual([]);
  // The check recognises what it looks for.
  expect(sqlstateUses(CLASSIFIER).length).toBeGreaterThan(5);
});
