/**
 * The environment a result was measured in: the machine, the Node runtime, and each PostgreSQL
 * server's version and the settings that bound routing throughput.
 */
import os from "node:os";
import pg from "pg";

export interface MachineInfo {
  cpuModel: string;
  cores: number;
  memoryGiB: number;
  platform: string;
  node: string;
  loadAverage: number[];
}

export function machineInfo(): MachineInfo {
  return {
    cpuModel: os.cpus()[0]?.model.trim() ?? "unknown",
    cores: os.cpus().length,
    memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    platform: `${os.type()} ${os.release()} ${os.arch()}`,
    node: process.version,
    loadAverage: os.loadavg().map((n) => Math.round(n * 100) / 100),
  };
}

const SETTINGS = [
  "max_connections",
  "shared_buffers",
  "synchronous_commit",
  "fsync",
  "wal_sync_method",
  "full_page_writes",
  "work_mem",
  "effective_cache_size",
  "jit",
] as const;

export interface ServerInfo {
  label: string;
  version: string;
  settings: Record<string, string>;
  /** Other client sessions on the server when the run started (a noise indicator). */
  otherSessions: number;
}

export async function serverInfo(label: string, adminUrl: string): Promise<ServerInfo> {
  const client = new pg.Client({ connectionString: adminUrl, application_name: "aip-bench-admin" });
  client.on("error", () => {});
  await client.connect();
  try {
    const { rows: version } = await client.query<{ v: string }>("SELECT version() AS v");
    const { rows: settings } = await client.query<{ name: string; setting: string }>(
      "SELECT name, current_setting(name) AS setting FROM pg_settings WHERE name = ANY($1) ORDER BY name",
      [SETTINGS],
    );
    const { rows: sessions } = await client.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
    );
    return {
      label,
      version: version[0]?.v ?? "unknown",
      settings: Object.fromEntries(settings.map((s) => [s.name, s.setting])),
      otherSessions: sessions[0]?.n ?? 0,
    };
  } finally {
    await client.end().catch(() => {});
  }
}
