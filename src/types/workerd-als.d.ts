// The Worker's type check has no Node types: this is the one Node module it imports,
// AsyncLocalStorage, which workerd provides under the `nodejs_als` compatibility flag
// (src/telemetry/request-context.ts). Only tsconfig.worker.json includes this file; the Node
// type check uses @types/node's declaration.
declare module "node:async_hooks" {
  export class AsyncLocalStorage<T> {
    run<R>(store: T, callback: () => R): R;
    getStore(): T | undefined;
  }
}
