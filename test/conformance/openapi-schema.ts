/**
 * Response bodies checked against the OpenAPI document the API under test publishes, with a real
 * JSON Schema 2020-12 validator (Ajv's 2020 build, formats from ajv-formats). The conformance
 * suite runs every answer through it: a 2xx or problem body the document does not describe, or a
 * status the operation does not document, fails the test that received it. Web-standard code
 * only: it runs in workerd too.
 */
import Ajv2020, { type ValidateFunction } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

type Json = Record<string, unknown>;

const COMPONENTS_ID = "aip:components";
const METHODS = ["get", "put", "post", "delete", "patch", "head", "options", "trace"];

/** `#/components/schemas/X` as a reference into the one schema holding every component. */
function rewriteRefs<T>(node: T): T {
  return JSON.parse(JSON.stringify(node).replaceAll('"#/components/schemas/', `"${COMPONENTS_ID}#/$defs/`)) as T;
}

interface Operation {
  method: string;
  template: string;
  pattern: RegExp;
  /** Path parameters: fewer means a more specific template (`/v1/admin/catalog/...` over `/v1/admin/{kind}/...`). */
  parameters: number;
  responses: Record<string, { content?: Record<string, { schema?: unknown }> }>;
}

export interface ResponseToCheck {
  method: string;
  path: string;
  status: number;
  contentType: string;
  body: unknown;
}

export class OpenApiSchemas {
  private readonly ajv: Ajv2020;
  private readonly operations: Operation[];
  private readonly compiled = new Map<string, ValidateFunction>();

  constructor(readonly document: Json) {
    // Strict: a schema keyword Ajv does not know is an error, except OpenAPI's own `example`.
    this.ajv = new Ajv2020({ allErrors: true, strict: true, strictTypes: false, strictRequired: false });
    this.ajv.addKeyword("example");
    addFormats(this.ajv);
    const components = ((document.components as Json | undefined)?.schemas ?? {}) as Json;
    this.ajv.addSchema({ $id: COMPONENTS_ID, $defs: rewriteRefs(components) });
    this.operations = Object.entries(document.paths as Record<string, Json>).flatMap(([template, item]) =>
      METHODS.filter((method) => item[method]).map((method) => ({
        method,
        template,
        pattern: new RegExp(`^${template.replace(/[.+?^$()|[\]\\]/g, "\\$&").replace(/\{[^}]+\}/g, "[^/]+")}$`),
        parameters: (template.match(/\{/g) ?? []).length,
        responses: ((item[method] as Json).responses ?? {}) as Operation["responses"],
      })),
    );
  }

  /** The documented operation serving `method path` (query string ignored), if any. */
  operation(method: string, path: string): Operation | undefined {
    const bare = path.split("?")[0] as string;
    return this.operations
      .filter((operation) => operation.method === method.toLowerCase() && operation.pattern.test(bare))
      .sort((a, b) => a.parameters - b.parameters)[0];
  }

  /** A validator of the schema at `pointer` (for components: `#/components/schemas/X`). */
  validator(key: string, schema: unknown): ValidateFunction {
    let validate = this.compiled.get(key);
    if (!validate) {
      validate = this.ajv.compile(rewriteRefs(schema as Json));
      this.compiled.set(key, validate);
    }
    return validate;
  }

  /**
   * Problems with one response: empty when the document describes it. Only JSON bodies (2xx,
   * problems, and any other documented status) are checked; a problem from a route the document
   * does not have (404 for an unknown path, 405) must still be a `Problem`.
   */
  check(response: ResponseToCheck): string[] {
    const mediaType = response.contentType.split(";")[0]?.trim().toLowerCase() ?? "";
    const json = mediaType === "application/json" || mediaType === "application/problem+json";
    const isProblem = mediaType === "application/problem+json";
    const label = `${response.method} ${response.path} -> ${response.status} ${mediaType || "(no body)"}`;
    if (!json) return [];
    const operation = this.operation(response.method, response.path);
    if (!operation) {
      if (!isProblem) return [`${label}: no documented operation serves this path and method`];
      return this.errors(label, "#/components/schemas/Problem", { $ref: "#/components/schemas/Problem" }, response.body);
    }
    const documented = operation.responses[String(response.status)];
    if (!documented) {
      return response.status < 300 || isProblem
        ? [`${label}: ${operation.method.toUpperCase()} ${operation.template} documents no ${response.status} response`]
        : [];
    }
    const schema = documented.content?.[mediaType]?.schema;
    if (schema === undefined) return [`${label}: ${operation.template} documents its ${response.status} without ${mediaType}`];
    return this.errors(label, `${operation.method} ${operation.template} ${response.status} ${mediaType}`, schema, response.body);
  }

  private errors(label: string, key: string, schema: unknown, body: unknown): string[] {
    const validate = this.validator(key, schema);
    if (validate(body)) return [];
    return (validate.errors ?? []).map(
      (error) => `${label}: ${error.instancePath || "(body)"} ${error.message}${error.params ? ` ${JSON.stringify(error.params)}` : ""}`,
    );
  }
}
