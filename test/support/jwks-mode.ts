/** How the local JWKS endpoint (test/support/jwks-server.ts) answers; no Node imports, so workerd tests can name it. */
export type JwksMode =
  | { kind: "ok" }
  | { kind: "status"; status: number }
  | { kind: "hold" }
  | { kind: "body"; body: string; contentType?: string }
  /** A body of `bytes` bytes (spaces), with or without a Content-Length. */
  | { kind: "oversized"; bytes: number; declared: boolean }
  /** The connection is dropped without an answer. */
  | { kind: "reset" };
