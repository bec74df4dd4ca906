/**
 * The one thing the registry needs from a database driver: run one statement with parameters.
 * Every registry operation is a single call of one SQL function, so no driver needs to expose
 * transactions here; the adapters for pg (Node), PGlite (embedded) and Neon (Workers) are tiny.
 */
export interface SqlExecutor {
  query<R extends Record<string, unknown> = Record<string, unknown>>(text: string, params?: readonly unknown[]): Promise<R[]>;
}
