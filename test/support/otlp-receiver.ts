/**
 * A local OTLP/HTTP trace receiver, as a collector would be: it accepts `POST .../v1/traces` in
 * both encodings the registry can send, `application/json` (OTLP/JSON) and
 * `application/x-protobuf` (decoded here with a minimal reader of the wire format, enough for
 * ExportTraceServiceRequest), gzip-compressed or not, and keeps every span it received.
 *
 * Named collections (`/<name>/v1/traces`) keep test files apart; `GET /__spans/<name>` answers
 * what one received (the workerd suite reads it over HTTP: test/global-setup.ts starts one).
 */
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { gunzipSync } from "node:zlib";

type AttributeValue = string | number | boolean | null;

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  /** OTLP SpanKind: 2 server, 3 client. */
  kind: number;
  attributes: Record<string, AttributeValue>;
  /** OTLP status code: 0 unset, 1 ok, 2 error. */
  statusCode: number;
  resource: Record<string, AttributeValue>;
}

interface ReceivedExport {
  contentType: string;
  spans: ReceivedSpan[];
}

export interface OtlpReceiver {
  /** The base URL to give as OTEL_EXPORTER_OTLP_ENDPOINT (the collection `name`'s, or the default one). */
  endpoint(name?: string): string;
  exports(name?: string): ReceivedExport[];
  spans(name?: string): ReceivedSpan[];
  close(): Promise<void>;
}

// Protocol buffers, as far as ExportTraceServiceRequest needs -------------------------------------

type Field = { number: number; wire: number; value: bigint | Uint8Array };

function* fields(bytes: Uint8Array): Generator<Field> {
  let at = 0;
  const varint = (): bigint => {
    let result = 0n;
    let shift = 0n;
    for (;;) {
      const byte = bytes[at++] as number;
      result |= BigInt(byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) return result;
      shift += 7n;
    }
  };
  while (at < bytes.length) {
    const key = Number(varint());
    const number = key >>> 3;
    const wire = key & 7;
    if (wire === 0) yield { number, wire, value: varint() };
    else if (wire === 1 || wire === 5) {
      const size = wire === 1 ? 8 : 4;
      yield { number, wire, value: bytes.subarray(at, at + size) };
      at += size;
    } else if (wire === 2) {
      const length = Number(varint());
      yield { number, wire, value: bytes.subarray(at, at + length) };
      at += length;
    } else throw new Error(`unsupported protobuf wire type ${wire}`);
  }
}

const text = (value: bigint | Uint8Array) => new TextDecoder().decode(value as Uint8Array);
const hex = (value: bigint | Uint8Array) => Buffer.from(value as Uint8Array).toString("hex");

function anyValue(bytes: Uint8Array): AttributeValue {
  for (const f of fields(bytes)) {
    if (f.number === 1) return text(f.value);
    if (f.number === 2) return f.value !== 0n;
    if (f.number === 3) return Number(BigInt.asIntN(64, f.value as bigint));
    if (f.number === 4) return Buffer.from(f.value as Uint8Array).readDoubleLE(0);
  }
  return null;
}

function keyValue(bytes: Uint8Array): [string, AttributeValue] {
  let key = "";
  let value: AttributeValue = null;
  for (const f of fields(bytes)) {
    if (f.number === 1) key = text(f.value);
    if (f.number === 2) value = anyValue(f.value as Uint8Array);
  }
  return [key, value];
}

function protobufSpans(body: Uint8Array): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  for (const resourceSpans of fields(body)) {
    if (resourceSpans.number !== 1) continue;
    const resource: Record<string, AttributeValue> = {};
    const scopes: Uint8Array[] = [];
    for (const f of fields(resourceSpans.value as Uint8Array)) {
      if (f.number === 1)
        for (const a of fields(f.value as Uint8Array)) if (a.number === 1) Object.assign(resource, Object.fromEntries([keyValue(a.value as Uint8Array)]));
      if (f.number === 2) scopes.push(f.value as Uint8Array);
    }
    for (const scope of scopes) {
      for (const s of fields(scope)) {
        if (s.number !== 2) continue;
        const span: ReceivedSpan = { traceId: "", spanId: "", parentSpanId: "", name: "", kind: 0, attributes: {}, statusCode: 0, resource };
        for (const f of fields(s.value as Uint8Array)) {
          if (f.number === 1) span.traceId = hex(f.value);
          else if (f.number === 2) span.spanId = hex(f.value);
          else if (f.number === 4) span.parentSpanId = hex(f.value);
          else if (f.number === 5) span.name = text(f.value);
          else if (f.number === 6) span.kind = Number(f.value);
          else if (f.number === 9) {
            const [key, value] = keyValue(f.value as Uint8Array);
            span.attributes[key] = value;
          } else if (f.number === 15) for (const st of fields(f.value as Uint8Array)) if (st.number === 3) span.statusCode = Number(st.value);
        }
        spans.push(span);
      }
    }
  }
  return spans;
}

// OTLP/JSON ----------------------------------------------------------------------------------------

interface JsonKeyValue {
  key: string;
  value: { stringValue?: string; boolValue?: boolean; intValue?: string | number; doubleValue?: number };
}

const jsonValue = (v: JsonKeyValue["value"]): AttributeValue =>
  v.stringValue ?? v.boolValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.doubleValue ?? null));
const jsonAttributes = (list: JsonKeyValue[] | undefined) => Object.fromEntries((list ?? []).map((kv) => [kv.key, jsonValue(kv.value)]));
/** OTLP/JSON ids are hex; accept base64 too (the protobuf JSON mapping's default). */
const jsonId = (id: string | undefined) => (!id ? "" : /^[0-9a-f]+$/i.test(id) ? id.toLowerCase() : Buffer.from(id, "base64").toString("hex"));

function jsonSpans(body: Uint8Array): ReceivedSpan[] {
  type JsonRequest = {
    resourceSpans?: {
      resource?: { attributes?: JsonKeyValue[] };
      scopeSpans?: {
        spans?: {
          traceId?: string;
          spanId?: string;
          parentSpanId?: string;
          name?: string;
          kind?: number;
          attributes?: JsonKeyValue[];
          status?: { code?: number };
        }[];
      }[];
    }[];
  };
  const request = JSON.parse(new TextDecoder().decode(body)) as JsonRequest;
  return (request.resourceSpans ?? []).flatMap((rs) => {
    const resource = jsonAttributes(rs.resource?.attributes);
    return (rs.scopeSpans ?? []).flatMap((ss) =>
      (ss.spans ?? []).map((s) => ({
        traceId: jsonId(s.traceId),
        spanId: jsonId(s.spanId),
        parentSpanId: jsonId(s.parentSpanId),
        name: s.name ?? "",
        kind: s.kind ?? 0,
        attributes: jsonAttributes(s.attributes),
        statusCode: s.status?.code ?? 0,
        resource,
      })),
    );
  });
}

// The server ---------------------------------------------------------------------------------------

async function bodyOf(req: IncomingMessage): Promise<Uint8Array> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const raw = Buffer.concat(chunks);
  return req.headers["content-encoding"] === "gzip" ? gunzipSync(raw) : raw;
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const collections = new Map<string, ReceivedExport[]>();
  const collection = (name: string) => {
    const list = collections.get(name) ?? [];
    collections.set(name, list);
    return list;
  };
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://receiver");
    const spansPath = /^\/__spans\/([\w-]+)$/.exec(url.pathname);
    if (req.method === "GET" && spansPath) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(collection(spansPath[1] as string)));
      return;
    }
    const tracesPath = /^(?:\/([\w-]+))?\/v1\/traces$/.exec(url.pathname);
    if (req.method !== "POST" || !tracesPath) {
      res.writeHead(404).end();
      return;
    }
    bodyOf(req).then(
      (body) => {
        const contentType = String(req.headers["content-type"] ?? "");
        try {
          const spans = contentType.startsWith("application/json") ? jsonSpans(body) : protobufSpans(body);
          collection(tracesPath[1] ?? "default").push({ contentType, spans });
        } catch (error) {
          res.writeHead(400, { "content-type": "text/plain" }).end(String(error));
          return;
        }
        // An empty ExportTraceServiceResponse: full success, in the request's encoding.
        if (contentType.startsWith("application/json")) res.writeHead(200, { "content-type": "application/json" }).end("{}");
        else res.writeHead(200, { "content-type": "application/x-protobuf" }).end();
      },
      () => res.writeHead(400).end(),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    endpoint: (name) => (name ? `${origin}/${name}` : origin),
    exports: (name = "default") => collection(name),
    spans: (name = "default") => collection(name).flatMap((e) => e.spans),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
