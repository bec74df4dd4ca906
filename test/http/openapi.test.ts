/**
 * The OpenAPI document is generated from the same zod schemas that validate requests. These
 * checks hold it to OpenAPI 3.1's structure (a focused validator: no schema package needed) and
 * to the app: every registered route is documented, every $ref resolves, every operation
 * documents its problems.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { createApp } from "../../src/app.js";
import { DOCS_ASSET_PATHS } from "../../src/docs/route.js";
import { createAuthenticator } from "../../src/http/auth.js";
import { PROBLEM_CONTENT_TYPE } from "../../src/http/problem.js";
import { Registry } from "../../src/registry/registry.js";
import * as schemas from "../../src/schemas.js";
import { OpenApiSchemas } from "../conformance/openapi-schema.js";
import { TEST_SECRET } from "../support/http.js";

type Json = Record<string, unknown>;
const HTTP_METHODS = ["get", "put", "post", "delete", "patch", "head", "options", "trace"] as const;

// No database: the document and the route table do not touch it.
const unusedRegistry = new Registry({ data: { query: () => Promise.reject(new Error("no database in this test")) } });
const app = createApp({ registry: unusedRegistry, authenticator: createAuthenticator({ hs256Secret: TEST_SECRET }), metrics: {} });

/** The documentation endpoints themselves: the document does not describe itself. */
const SELF_DOCUMENTING = new Set(["GET /openapi.json", "GET /docs", ...DOCS_ASSET_PATHS.map((path) => `GET ${path}`)]);

let doc: Json;
let operations: { key: string; path: string; method: string; op: Json }[];

beforeAll(async () => {
  const response = await app.request("/openapi.json");
  expect(response.status).toBe(200);
  expect(response.headers.get("content-type")).toMatch(/^application\/json/);
  doc = (await response.json()) as Json;
  operations = Object.entries(doc.paths as Record<string, Json>).flatMap(([path, item]) =>
    HTTP_METHODS.filter((m) => item[m]).map((method) => ({ key: `${method.toUpperCase()} ${path}`, path, method, op: item[method] as Json })),
  );
});

function resolvePointer(root: Json, ref: string): unknown {
  if (!ref.startsWith("#/")) return undefined;
  return ref
    .slice(2)
    .split("/")
    .map((part) => part.replace(/~1/g, "/").replace(/~0/g, "~"))
    .reduce<unknown>((node, part) => (node && typeof node === "object" ? (node as Json)[part] : undefined), root);
}

function collectRefs(node: unknown, at: string, out: { at: string; ref: string }[] = []) {
  if (Array.isArray(node)) for (const [i, child] of node.entries()) collectRefs(child, `${at}/${i}`, out);
  else if (node && typeof node === "object") {
    for (const [key, value] of Object.entries(node)) {
      if (key === "$ref" && typeof value === "string") out.push({ at, ref: value });
      else collectRefs(value, `${at}/${key}`, out);
    }
  }
  return out;
}

describe("the OpenAPI 3.1 document", () => {
  it("has the 3.1 top-level structure", () => {
    expect(doc.openapi).toBe("3.1.0");
    const info = doc.info as Json;
    expect(typeof info.title).toBe("string");
    expect(typeof info.version).toBe("string");
    expect(Object.keys(doc.paths as Json).length).toBeGreaterThan(10);
    expect(((doc.components as Json).securitySchemes as Json).bearer).toEqual({ type: "http", scheme: "bearer", bearerFormat: "JWT" });
    for (const path of Object.keys(doc.paths as Json)) expect(path, "paths start with /").toMatch(/^\//);
  });

  it("resolves every $ref", () => {
    const refs = collectRefs(doc, "#");
    expect(refs.length).toBeGreaterThan(20);
    const dangling = refs.filter(({ ref }) => resolvePointer(doc, ref) === undefined);
    expect(dangling).toEqual([]);
  });

  it("gives every operation a summary, declared tags, documented path parameters and described responses", () => {
    const declaredTags = new Set(((doc.tags as Json[]) ?? []).map((t) => t.name));
    for (const { key, path, op } of operations) {
      expect(typeof op.summary, `${key} summary`).toBe("string");
      const tags = op.tags as string[];
      expect(tags?.length, `${key} tags`).toBeGreaterThan(0);
      for (const tag of tags) expect(declaredTags.has(tag), `${key} tag ${tag} is declared`).toBe(true);

      const templated = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]);
      const pathParams = ((op.parameters as Json[]) ?? []).filter((p) => p.in === "path");
      expect(pathParams.map((p) => p.name).sort(), `${key} path parameters`).toEqual([...templated].sort());
      for (const p of pathParams) expect(p.required, `${key} ${String(p.name)} is required`).toBe(true);

      const responses = op.responses as Record<string, Json>;
      expect(Object.keys(responses ?? {}).length, `${key} responses`).toBeGreaterThan(0);
      expect(
        Object.keys(responses).some((s) => s.startsWith("2")),
        `${key} has a success response`,
      ).toBe(true);
      for (const [status, response] of Object.entries(responses)) {
        expect(status, `${key} status code`).toMatch(/^[1-5]\d\d$/);
        expect(typeof response.description, `${key} ${status} description`).toBe("string");
      }
      if (op.requestBody) {
        const content = (op.requestBody as Json).content as Json;
        expect(Object.keys(content), `${key} request body media type`).toEqual(["application/json"]);
      }
    }
  });

  it("documents every error response as problem+json with the Problem schema", () => {
    const problem = resolvePointer(doc, "#/components/schemas/Problem") as Json;
    expect(problem.required).toEqual(expect.arrayContaining(["type", "title", "status", "detail", "code"]));
    for (const { key, op } of operations) {
      for (const [status, response] of Object.entries(op.responses as Record<string, Json>)) {
        if (Number(status) < 400 || key === "GET /readyz") continue; // readiness answers 503 with its own JSON body
        const content = response.content as Json;
        expect(Object.keys(content ?? {}), `${key} ${status}`).toEqual([PROBLEM_CONTENT_TYPE]);
        expect((content[PROBLEM_CONTENT_TYPE] as Json).schema, `${key} ${status}`).toEqual({ $ref: "#/components/schemas/Problem" });
        expect(response.description, `${key} ${status} names its problem codes`).toMatch(/`[a-z-]+`/);
      }
    }
  });

  it("documents 401 and 403 on every bearer-protected operation, and 400 where input is validated", () => {
    const protectedOps = operations.filter(({ op }) => Array.isArray(op.security) && (op.security as Json[]).some((s) => "bearer" in s));
    expect(protectedOps.length).toBeGreaterThan(10);
    for (const { key, op } of protectedOps) {
      const statuses = Object.keys(op.responses as Json);
      expect(statuses, key).toEqual(expect.arrayContaining(["401", "403"]));
    }
    for (const { key, op } of operations.filter(({ op }) => op.requestBody || (op.parameters as Json[] | undefined)?.length)) {
      expect(Object.keys(op.responses as Json), `${key} documents invalid input`).toContain("400");
    }
  });

  it("names every operation with a unique operationId", () => {
    const ids = operations.map(({ key, op }) => {
      expect(typeof op.operationId, `${key} operationId`).toBe("string");
      return op.operationId;
    });
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("gives every problem response one example per problem code, each a valid Problem with the response's status", () => {
    for (const { key, op } of operations) {
      for (const [status, response] of Object.entries(op.responses as Record<string, Json>)) {
        if (Number(status) < 400 || key === "GET /readyz") continue;
        const codes = [...String(response.description).matchAll(/`([a-z-]+)`/g)].map((m) => m[1]);
        const examples = ((response.content as Json)[PROBLEM_CONTENT_TYPE] as Json).examples as Record<string, { value: Json }>;
        expect(Object.keys(examples ?? {}).sort(), `${key} ${status}`).toEqual([...codes].sort());
        for (const [code, example] of Object.entries(examples)) {
          expect(schemas.Problem.safeParse(example.value).success, `${key} ${status} ${code}`).toBe(true);
          expect(example.value).toMatchObject({ code, status: Number(status) });
        }
      }
    }
  });

  it("shows a valid example of every JSON request body and every named success response", () => {
    const zodOf: Record<string, { safeParse(value: unknown): { success: boolean } }> = {
      ResolveRequest: schemas.ResolveRequest,
      SettlementRequest: schemas.SettlementRequest,
      LifecycleRequest: schemas.LifecycleRequest,
      PublicationRequest: schemas.PublicationRequest,
      RouteAssignment: schemas.RouteAssignment,
      SettlementResult: schemas.SettlementResult,
      LifecycleResponse: schemas.LifecycleResponse,
      PublicationResult: schemas.PublicationResult,
      FleetStatusSummary: schemas.FleetStatus,
    };
    const named = new Set<string>();
    for (const { key, op } of operations) {
      const bodies = [
        ...(op.requestBody ? [((op.requestBody as Json).content as Json)["application/json"] as Json] : []),
        ...Object.entries(op.responses as Record<string, Json>)
          .filter(([status]) => status.startsWith("2"))
          .map(([, response]) => (response.content as Json | undefined)?.["application/json"] as Json | undefined)
          .filter((media): media is Json => media !== undefined),
      ];
      for (const media of bodies) {
        const ref = ((media.schema as Json).$ref as string | undefined)?.replace("#/components/schemas/", "");
        if (!ref || !(ref in zodOf)) continue;
        named.add(ref);
        const example = (resolvePointer(doc, `#/components/schemas/${ref}`) as Json).example;
        expect(example, `${key}: ${ref} example`).toBeDefined();
        expect(zodOf[ref]?.safeParse(example).success, `${key}: ${ref} example is valid`).toBe(true);
      }
    }
    expect([...named].sort()).toEqual(Object.keys(zodOf).sort());
  });

  it("documents the resolve operation's problem codes", () => {
    const resolve = operations.find((o) => o.key === "PUT /v1/routes/{action_id}")?.op as Json;
    const responses = resolve.responses as Record<string, Json>;
    expect(Object.keys(responses)).toEqual(expect.arrayContaining(["200", "201", "400", "401", "403", "404", "409", "429", "503"]));
    expect(responses["404"]?.description).toContain("`binding-unavailable`");
    expect(responses["429"]?.description).toContain("`capacity-exceeded`");
    expect(responses["503"]?.description).toContain("`replica-unavailable`");
  });
});

describe("the document and the app agree", () => {
  it("documents every registered route (method and path)", () => {
    const documented = new Set(operations.map((o) => o.key));
    const registered = new Set(
      app.routes
        .filter((r) => r.method !== "ALL") // middleware
        .map((r) => `${r.method} ${r.path.replace(/:([A-Za-z0-9_]+)/g, "{$1}")}`),
    );
    expect(registered.size).toBeGreaterThan(15);
    const undocumented = [...registered].filter((key) => !documented.has(key) && !SELF_DOCUMENTING.has(key));
    expect(undocumented).toEqual([]);
    // And nothing documented is missing from the app.
    expect([...documented].filter((key) => !registered.has(key))).toEqual([]);
  });
});

describe("schemas and examples under a JSON Schema 2020-12 validator (Ajv)", () => {
  let validators: OpenApiSchemas;
  beforeAll(() => {
    validators = new OpenApiSchemas(doc);
  });

  /** Every `example` in the document with the schema it sits in, found by walking it. */
  function examples(node: unknown, at: string, out: { at: string; schema: Json; example: unknown }[] = []) {
    if (Array.isArray(node)) for (const [i, child] of node.entries()) examples(child, `${at}/${i}`, out);
    else if (node && typeof node === "object") {
      const record = node as Json;
      if ("example" in record && (record.type !== undefined || record.$ref !== undefined || record.properties !== undefined || record.anyOf !== undefined)) {
        out.push({ at, schema: record, example: record.example });
      }
      for (const [key, value] of Object.entries(record)) examples(value, `${at}/${key}`, out);
    }
    return out;
  }

  it("accepts every schema example the document gives", () => {
    const found = examples(doc, "#");
    expect(found.map((f) => f.at)).toEqual(expect.arrayContaining(["#/components/schemas/RouteAssignment", "#/components/schemas/SettlementRequest"]));
    const refused = found.filter(({ at, schema, example }) => !validators.validator(`example ${at}`, schema)(example)).map(({ at }) => at);
    expect(refused).toEqual([]);
  });

  it("accepts every problem example as the problem schema of its response", () => {
    let count = 0;
    for (const { key, op } of operations) {
      for (const [status, response] of Object.entries(op.responses as Record<string, Json>)) {
        const media = (response.content as Record<string, Json> | undefined)?.[PROBLEM_CONTENT_TYPE];
        if (!media) continue;
        const validate = validators.validator(`${key} ${status}`, media.schema);
        for (const [name, example] of Object.entries((media.examples ?? {}) as Record<string, { value: unknown }>)) {
          count++;
          expect(validate(example.value), `${key} ${status} ${name}: ${JSON.stringify(validate.errors)}`).toBe(true);
        }
      }
    }
    expect(count).toBeGreaterThan(50);
  });

  it("takes retry_scope as null or an admission scope, nothing else", () => {
    const route = (doc.components as Json).schemas as Json;
    const validate = validators.validator("RouteAssignment", { $ref: "#/components/schemas/RouteAssignment" });
    const example = (route.RouteAssignment as Json).example as Json;
    const withRetryScope = (retry_scope: unknown) => ({ ...example, admission: { ...(example.admission as Json), retry_scope } });
    expect(validate(withRetryScope(null))).toBe(true);
    expect(validate(withRetryScope({ kind: "tenant_retry", key: "tenant-a", limit: 10 }))).toBe(true);
    expect(validate(withRetryScope({ kind: "tenant_retry" }))).toBe(false);
    expect(validate(withRetryScope("tenant-a"))).toBe(false);
  });

  it("reports a body or a status the document does not describe", () => {
    const problem = { type: "https://aip.dev/problems/not-found", title: "Not found", status: 404, detail: "x", code: "not-found", request_id: "r" };
    const check = (status: number, body: unknown, path = "/v1/routes/act_1", method = "GET", contentType = "application/json") =>
      validators.check({ method, path, status, contentType, body });
    expect(check(200, { action_id: "act_1" })[0]).toMatch(/^GET \/v1\/routes\/act_1 -> 200 application\/json: \(body\) must have required property/);
    expect(check(404, problem, "/v1/routes/act_1", "GET", "application/problem+json")).toEqual([]);
    expect(check(404, { ...problem, status: "404" }, "/v1/routes/act_1", "GET", "application/problem+json")[0]).toMatch(/\/status must be integer/);
    expect(check(418, problem, "/v1/routes/act_1", "GET", "application/problem+json")).toEqual([
      "GET /v1/routes/act_1 -> 418 application/problem+json: GET /v1/routes/{action_id} documents no 418 response",
    ]);
    // No route: the body must still be a Problem.
    expect(check(405, problem, "/v1/routes/act_1", "DELETE", "application/problem+json")).toEqual([]);
    expect(check(405, { detail: "x" }, "/v1/routes/act_1", "DELETE", "application/problem+json").length).toBeGreaterThan(0);
    // The more specific template wins over /v1/admin/{kind}/{id}.
    expect(validators.operation("GET", "/v1/admin/catalog/capabilities?tenant_id=t")?.template).toBe("/v1/admin/catalog/capabilities");
  });
});
