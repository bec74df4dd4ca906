/**
 * What can be wrong with an embedded data directory, said before anything uses it: every refusal
 * names DATA_DIR, says what is wrong and what to do. Without this check the server and `migrate`
 * fail later and obscurely (`PGlite failed to initialize properly` for a read-only directory,
 * `EACCES`, `EEXIST`, `flock exited with 66`).
 *
 * The checks are the operating system's own answers (stat, access(2), mkdir), so they hold for
 * root too: permission bits do not stop root, a read-only file system does.
 */
import { constants, type Stats } from "node:fs";
import { access, mkdir, readFile, stat } from "node:fs/promises";
import { userInfo } from "node:os";
import { dirname, join, resolve } from "node:path";

/** A data directory that cannot be used: the message names it and says what to do. */
export class DataDirError extends Error {
  override name = "DataDirError";
}

/** The entries of a data directory the registry writes (each must be writable if it exists). */
const ENTRIES = [
  { name: "pglite", kind: "directory", what: "the embedded database" },
  { name: "registry.lock", kind: "file", what: "the lock file" },
  { name: "auth-secret", kind: "file", what: "the development signing secret" },
] as const;

/**
 * Makes sure `dir` is a directory this process can write, creating it if missing; throws
 * DataDirError otherwise.
 */
export async function checkDataDir(dir: string): Promise<string> {
  const absolute = resolve(dir);
  const label = `DATA_DIR=${absolute}`;
  const found = await statOrNull(absolute);
  if (!found) {
    await create(absolute, label);
    return absolute;
  }
  if (!found.isDirectory()) {
    throw new DataDirError(`${label} is not a directory (a file is in the way): move the file, or set DATA_DIR to a directory`);
  }
  await writable(absolute, found, absolute, "it");
  for (const entry of ENTRIES) {
    const path = join(absolute, entry.name);
    const stats = await statOrNull(path);
    if (!stats) continue;
    if (entry.kind === "directory" ? !stats.isDirectory() : !stats.isFile()) {
      throw new DataDirError(`${label}: ${path} (${entry.what}) should be a ${entry.kind}: move it out of the way`);
    }
    await writable(path, stats, absolute, `${path} (${entry.what})`);
  }
  return absolute;
}

/** PGlite refused to open `DATA_DIR/pglite` even though the directory passed checkDataDir. */
export function pgliteOpenFailure(dataDir: string, error: unknown): DataDirError {
  const path = join(resolve(dataDir), "pglite");
  return new DataDirError(
    `DATA_DIR=${resolve(dataDir)}: the embedded database in ${path} could not be opened (${(error as Error)?.message ?? String(error)}). ` +
      "If another version of this registry (or of PGlite) wrote it, or it is damaged, move it away and start again (a new, empty one is created), " +
      "or point DATA_DIR elsewhere",
  );
}

async function statOrNull(path: string): Promise<Stats | null> {
  try {
    return await stat(path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return null;
    if (code === "ENOTDIR") throw new DataDirError(`DATA_DIR=${path}: a part of this path is a file, not a directory: set DATA_DIR to a directory`);
    if (code === "EACCES") throw new DataDirError(`DATA_DIR=${path} cannot be reached: ${me()} may not enter a directory on its path (${code})`);
    throw error;
  }
}

async function create(absolute: string, label: string): Promise<void> {
  try {
    await mkdir(absolute, { recursive: true });
  } catch (error) {
    // A recursive mkdir reports some failures as ENOENT (EROFS among them): ask the nearest
    // directory that exists instead.
    const parent = await nearestExisting(dirname(absolute));
    const parentStats = await stat(parent).catch(() => null);
    const code = parentStats?.isDirectory()
      ? await access(parent, constants.W_OK | constants.X_OK).then(
          () => (error as NodeJS.ErrnoException).code,
          (refusal: NodeJS.ErrnoException) => refusal.code,
        )
      : "ENOTDIR";
    const why =
      code === "EROFS"
        ? `${parent} is on a read-only file system`
        : code === "EACCES" || code === "EPERM"
          ? `${me()} may not create it in ${parent}${await ownerNote(parent)}`
          : code === "ENOTDIR"
            ? `${parent} is a file, not a directory`
            : `${(error as Error).message}`;
    throw new DataDirError(`${label} does not exist and cannot be created: ${why}. Create it for ${me()}, or set DATA_DIR to a directory it can write`);
  }
}

async function writable(path: string, stats: Stats, dataDir: string, subject: string): Promise<void> {
  const label = `DATA_DIR=${dataDir}`;
  try {
    await access(path, constants.R_OK | constants.W_OK | (stats.isDirectory() ? constants.X_OK : 0));
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EROFS") {
      throw new DataDirError(`${label}: ${subject} is on a read-only file system: mount it read-write, or set DATA_DIR to a writable directory`);
    }
    if (code !== "EACCES" && code !== "EPERM") throw error;
    const uid = process.getuid?.();
    if (uid !== undefined && stats.uid !== uid) {
      const owner = await userName(stats.uid);
      const runAs = stats.uid === 0 ? "" : `, or run the registry as ${owner}`;
      throw new DataDirError(
        `${label}: ${subject} belongs to ${owner} (uid ${stats.uid}), and ${me()} may not write it: ` +
          `give it to ${userInfo().username} (sudo chown -R ${userInfo().username} ${dataDir})${runAs}, or set DATA_DIR to a directory of ${userInfo().username}'s`,
      );
    }
    const mode = (stats.mode & 0o777).toString(8).padStart(4, "0");
    throw new DataDirError(
      `${label}: ${subject} is read-only (mode ${mode}): make it writable (chmod -R u+w ${dataDir}), or set DATA_DIR to a writable directory`,
    );
  }
}

async function nearestExisting(path: string): Promise<string> {
  for (let dir = path; ; dir = dirname(dir)) {
    if (
      await stat(dir).then(
        () => true,
        () => false,
      )
    )
      return dir;
    if (dirname(dir) === dir) return dir;
  }
}

async function ownerNote(path: string): Promise<string> {
  const stats = await stat(path).catch(() => null);
  const uid = process.getuid?.();
  if (!stats || uid === undefined || stats.uid === uid) return "";
  return ` (it belongs to ${await userName(stats.uid)})`;
}

function me(): string {
  const uid = process.getuid?.();
  return uid === undefined ? userInfo().username : `${userInfo().username} (uid ${uid})`;
}

/** A user's name from /etc/passwd, else `uid N`. */
async function userName(uid: number): Promise<string> {
  try {
    const line = (await readFile("/etc/passwd", "utf8")).split("\n").find((entry) => entry.split(":")[2] === String(uid));
    return line?.split(":")[0] || `uid ${uid}`;
  } catch {
    return `uid ${uid}`;
  }
}
