/**
 * May the Node server listen on this address? Only on loopback, unless the operator says
 * otherwise (ALLOW_NETWORK_BIND=true), as the reference's control plane refuses a non-loopback
 * bind without --allow-proxy-network-bind.
 *
 * Why refuse rather than warn: the server speaks plain HTTP and carries bearer tokens, and with no
 * configured secret it mints a development secret and prints tokens for it. On a network address
 * that is an open registry the moment a warning scrolls by unread; behind a TLS-terminating proxy
 * (or in a container whose port only a proxy reaches) the operator sets the flag once.
 */
import { isIP } from "node:net";

/** True for addresses that only this machine can reach: 127.0.0.0/8, ::1 (also IPv4-mapped), localhost. */
export function isLoopbackHost(host: string): boolean {
  const address = host
    .trim()
    .replace(/^\[(.*)\]$/, "$1")
    .toLowerCase();
  if (address === "localhost" || address.endsWith(".localhost")) return true;
  const v4 = address.replace(/^::ffff:/, "");
  if (isIP(v4) === 4) return v4.startsWith("127.");
  if (isIP(address) === 6) return /^(0{0,4}:){7}0{0,3}1$|^::1$/.test(address);
  return false;
}

/** Null when the server may listen on `host`; otherwise the reason start-up must refuse to. */
export function bindRefusal(host: string, allowNetworkBind: boolean): string | null {
  if (allowNetworkBind || isLoopbackHost(host)) return null;
  return (
    `refusing to listen on ${host === "" ? "every interface" : `non-loopback address ${host}`}: this server speaks plain HTTP and ` +
    "carries bearer tokens. Put a TLS-terminating proxy in front and set ALLOW_NETWORK_BIND=true, or keep HOST on loopback (127.0.0.1)."
  );
}
