/**
 * Replica endpoints, as the reference accepts them: any http(s) URL that parses and has a host
 * (WHATWG URL parser in the HTTP schema, the structural rule aip_check_endpoint in SQL), including
 * Docker and Compose service names with `_`; never credentials, a query or a fragment, nor
 * whitespace, control characters or backslashes (which a parser would silently rewrite while the
 * route pins the string as given). Both layers give the same verdict on every case here.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { replicaEndpointProblem } from "../../src/schemas.js";
import { useTestDatabase } from "../support/database.js";
import { createTestApi } from "../support/http.js";
import { connectorType, instance, replica, version } from "../../fixtures/records.js";
import { registryState } from "../support/registry-state.js";
import { refusal } from "../support/assertions.js";

const db = useTestDatabase();
beforeAll(async () => {
  await db.registry.publish([
    connectorType("ctype_ep"),
    await version("cver_ep_1", "ctype_ep", ["cap:ep.run"]),
    instance("cinst_ep", "ctype_ep", "cver_ep_1", "tenant-ep"),
  ]);
});

let counter = 0;
/** The database's verdict, past the HTTP schemas: null when it provisions the replica. */
async function sqlVerdict(endpoint: string): Promise<string | null> {
  const change = replica(`crepl_ep_${++counter}`, "cinst_ep", "cver_ep_1", { endpoint });
  try {
    await db.registry.publish([change]);
    return null;
  } catch (error) {
    const refused = await refusal(Promise.reject(error));
    expect(refused.code).toBe("invalid");
    expect(refused.extensions.errors).toEqual([expect.objectContaining({ field: "endpoint" })]);
    return refused.message;
  }
}

const ACCEPTED = [
  "https://crm-euw1a.tenant-a.hosts.example/aip/v1/messages",
  "http://crm_connector:8080/aip/v1/messages",
  "http://my_service/",
  "http://connector-host_1.internal_net/aip/v1/messages",
  "https://host.example",
  "HTTPS://HOST.EXAMPLE/X",
  "http://127.0.0.1:8080/x",
  "http://[::1]:8080/x",
  "http://[2001:db8::7]/x",
  "http://localhost:/x",
  "https://bücher.example/x",
  "https://host.example/a%20b/c;v=1",
];

const REFUSED = [
  "ftp://host.example/x",
  "mailto:ops@host.example",
  "/aip/v1/messages",
  "https//host.example/x",
  "https://user:pw@host.example/x",
  "https://user@host.example/x",
  "https://@host.example/x",
  "https://host.example/x?q=1",
  "https://host.example/x?",
  "https://host.example/x#frag",
  "https:///x",
  "http://:80/x",
  "https://host.example:99999/x",
  "https://ho st.example/x",
  "https://host.example/x\n",
  "https://host.example/\tx",
  "https://host.example\\x",
  "https://[zz]/x",
  "https://host|name/x",
];

describe("replica endpoints", () => {
  it.each(ACCEPTED)("accepts %s over HTTP and in SQL", async (endpoint) => {
    expect(replicaEndpointProblem(endpoint)).toBeNull();
    expect(await sqlVerdict(endpoint)).toBeNull();
  });

  it.each(REFUSED)("refuses %j over HTTP and in SQL, changing nothing", async (endpoint) => {
    expect(replicaEndpointProblem(endpoint)).toEqual(expect.any(String));
    const before = await registryState(db.owner);
    expect(await sqlVerdict(endpoint)).toEqual(expect.stringMatching(/endpoint/));
    expect(await registryState(db.owner)).toEqual(before);
  });

  // What a URL parser refuses but the structural rule cannot tell: the HTTP schema refuses it
  // before the database is asked.
  it.each(["http://999.1.1.1/x", "http://a%zz.example/x", "http://[1:2:3]/x"])("refuses %s over HTTP (the WHATWG parser)", (endpoint) => {
    expect(replicaEndpointProblem(endpoint)).toBe("must be a URL the WHATWG URL parser accepts");
  });

  it("is what the publication route applies", async () => {
    const api = createTestApi(db.registry);
    const token = await api.adminToken();
    const publish = (endpoint: string) =>
      api.app.request("/v1/admin/publications", {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ changes: [replica(`crepl_ep_http_${++counter}`, "cinst_ep", "cver_ep_1", { endpoint })] }),
      });
    expect((await publish("http://crm_connector:8080/aip/v1/messages")).status).toBe(200);
    const refused = await publish("http://999.1.1.1/x");
    expect(refused.status).toBe(400);
    expect(await refused.json()).toMatchObject({ code: "invalid", errors: [{ field: "changes.0.endpoint" }] });
  });
});
