/**
 * The Node server's compressor (src/http/compression.ts): brotli quality 5 and gzip level 6 from
 * node:zlib. Small bodies are compressed on the spot (tens of microseconds); from 64 KiB on, on
 * libuv's thread pool, so that a multi-megabyte catalog page compressed on a miss does not stall
 * every other request.
 */
import { promisify } from "node:util";
import { brotliCompress, brotliCompressSync, constants, gzip, gzipSync, type BrotliOptions, type ZlibOptions } from "node:zlib";
import type { Compressor, ContentCoding } from "../http/compression.js";

const BROTLI_QUALITY = 5;
const GZIP_LEVEL = 6;
const ON_THREAD_POOL_FROM = 64 * 1024;

const brotliAsync = promisify(brotliCompress) as (input: Uint8Array, options: BrotliOptions) => Promise<Buffer>;
const gzipAsync = promisify(gzip) as (input: Uint8Array, options: ZlibOptions) => Promise<Buffer>;

export const nodeCompressor: Compressor = {
  codings: ["br", "gzip"] satisfies ContentCoding[],
  async compress(body, coding) {
    const input = typeof body === "string" ? Buffer.from(body) : body;
    const inline = input.byteLength < ON_THREAD_POOL_FROM;
    if (coding === "br") {
      const options = { params: { [constants.BROTLI_PARAM_QUALITY]: BROTLI_QUALITY, [constants.BROTLI_PARAM_SIZE_HINT]: input.byteLength } };
      return inline ? brotliCompressSync(input, options) : brotliAsync(input, options);
    }
    const options = { level: GZIP_LEVEL };
    return inline ? gzipSync(input, options) : gzipAsync(input, options);
  },
};
