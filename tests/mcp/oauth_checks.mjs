// toolhost as an OAuth 2.1 resource server, against a real OpenID provider: the certified
// `oidc-provider` package, started here on loopback with a client_credentials client and
// resource indicators (RFC 8707) that mint JWT access tokens (RFC 9068). It starts
// `toolhost serve --mcp http` with `[mcp.oauth]` naming that issuer, then checks: the 401
// challenge and the protected-resource metadata (RFC 9728); a good token; tokens for
// another audience, from another issuer, expired, `alg: none`, HMAC-signed with the public
// key, without the required scope (403), signed with a key the issuer publishes only later
// (rotation); a token whose scope chooses a profile; and the TypeScript SDK's own OAuth
// client (client credentials) connecting end to end and calling a tool, which the audit
// log records under the token's subject.
//
//     node oauth_checks.mjs TOOLHOST PLUGINS WORK PORT
//
// Run from target/mcp-tools, where tests/mcp/setup.sh installs the packages.
import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import http from "node:http";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const [toolhost, plugins, work, port] = process.argv.slice(2);
const require = createRequire(`${process.cwd()}/package.json`);
const load = (name) => import(pathToFileURL(require.resolve(name)).href);
const { default: Provider } = await load("oidc-provider");
const jose = await load("jose");
const { Client, StreamableHTTPClientTransport, ClientCredentialsProvider } = await load("@modelcontextprotocol/client");

let server;
let host;
function finish(code) {
  host?.kill("SIGTERM");
  server?.close();
  process.exit(code);
}
function fail(message) {
  console.log(`FAILED: ${message}`);
  finish(1);
}
const ok = (what) => console.log(`ok: ${what}`);

const RESOURCE = `http://127.0.0.1:${port}/mcp`;
const CLIENT = { id: "toolhost-test", secret: "a-client-secret-for-the-oauth-checks" };

// The issuer's signing key, and a second one it publishes only when the test rotates.
const keyA = await jose.generateKeyPair("RS256", { extractable: true });
const keyB = await jose.generateKeyPair("RS256", { extractable: true });
const jwk = async (pair, kid) => ({ ...(await jose.exportJWK(pair.privateKey)), kid, alg: "RS256", use: "sig" });
const publicJwk = async (pair, kid) => ({ ...(await jose.exportJWK(pair.publicKey)), kid, alg: "RS256", use: "sig" });
const published = [await publicJwk(keyA, "key-a")];

server = http.createServer();
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;
const provider = new Provider(issuer, {
  clients: [
    {
      client_id: CLIENT.id,
      client_secret: CLIENT.secret,
      grant_types: ["client_credentials"],
      redirect_uris: [],
      response_types: [],
      token_endpoint_auth_method: "client_secret_basic",
    },
  ],
  jwks: { keys: [await jwk(keyA, "key-a")] },
  ttl: { ClientCredentials: 300 },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => RESOURCE,
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, resourceIndicator) => ({
        scope: "mcp:tools tools:coder other:scope",
        audience: resourceIndicator,
        accessTokenFormat: "jwt",
        accessTokenTTL: 300,
        jwt: { sign: { alg: "RS256" } },
      }),
    },
  },
});
const callback = provider.callback();
// The provider's key set, served here so the test can rotate it, or hang it.
let jwksHangs = false;
let jwksAsked = 0;
const hung = [];
const answerJwks = (res) => {
  res.writeHead(200, { "content-type": "application/jwk-set+json" });
  res.end(JSON.stringify({ keys: published }));
};
server.on("request", (req, res) => {
  if (req.url === "/jwks") {
    jwksAsked++;
    if (jwksHangs) hung.push(res);
    else answerJwks(res);
  } else {
    callback(req, res);
  }
});

// A token from the provider's token endpoint (the real grant).
async function granted(scope, resource = RESOURCE) {
  const basic = Buffer.from(`${CLIENT.id}:${CLIENT.secret}`).toString("base64");
  const r = await fetch(`${issuer}/token`, {
    method: "POST",
    headers: { authorization: `Basic ${basic}`, "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ grant_type: "client_credentials", scope, resource }),
  });
  const body = await r.json();
  if (!body.access_token) fail(`the provider issued no token for ${scope} ${resource}: ${JSON.stringify(body)}`);
  return body.access_token;
}
// A token signed here, with the claims a test needs.
const now = () => Math.floor(Date.now() / 1000);
const claims = (over = {}) => ({ iss: issuer, aud: RESOURCE, sub: "forged", scope: "mcp:tools", iat: now(), exp: now() + 300, ...over });
const signed = (pair, kid, over) => new jose.SignJWT(claims(over)).setProtectedHeader({ alg: "RS256", kid, typ: "at+jwt" }).sign(pair.privateKey);
const b64 = (value) => Buffer.from(JSON.stringify(value)).toString("base64url");

// toolhost with [mcp.oauth] naming the provider; a profile a scope chooses.
mkdirSync(`${work}/toolhost/profiles/coder`, { recursive: true });
writeFileSync(
  `${work}/toolhost/config.toml`,
  `[mcp.oauth]\nissuer = "${issuer}"\nresource = "${RESOURCE}"\nscopes = ["mcp:tools"]\n\n[mcp.oauth.profiles]\n"tools:coder" = "coder"\n`,
);
writeFileSync(`${work}/toolhost/profiles/coder/config.toml`, `tools = ["echo"]\n`);
let log = "";
host = spawn(toolhost, ["serve", "--mcp", "http", "--listen", `127.0.0.1:${port}`, "--no-watch", "--plugins", plugins, "--control", `${work}/c.sock`], {
  env: { ...process.env, XDG_CONFIG_HOME: work, XDG_STATE_HOME: `${work}/state`, TOOLHOST_LOG: "info,rmcp=warn" },
  stdio: ["ignore", "ignore", "pipe"],
});
host.stderr.on("data", (d) => (log += d));
host.on("exit", (code) => code !== null && code !== 0 && fail(`toolhost exited with ${code}:\n${log}`));
for (let i = 0; !log.includes("toolhost is serving"); i++) {
  if (i > 600) fail(`toolhost did not come up:\n${log}`);
  await new Promise((r) => setTimeout(r, 100));
}

const initialize = { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "oauth-checks", version: "1" } } };
async function post(token) {
  const headers = { "content-type": "application/json", accept: "application/json, text/event-stream" };
  if (token) headers.authorization = `Bearer ${token}`;
  const r = await fetch(RESOURCE, { method: "POST", headers, body: JSON.stringify(initialize) });
  return { status: r.status, challenge: r.headers.get("www-authenticate") ?? "", text: await r.text() };
}
async function refused(what, token, status, error, says) {
  const r = await post(token);
  if (r.status !== status || !r.challenge.includes(`error="${error}"`) || !r.challenge.includes(says)) {
    fail(`${what}: expected ${status} ${error} saying "${says}", got ${r.status} ${r.challenge} ${r.text}`);
  }
  ok(`${what}: ${status} ${error} (${says})`);
}

// No token: the challenge names the metadata, which names the provider.
const bare = await post(null);
const metadataUrl = `http://127.0.0.1:${port}/.well-known/oauth-protected-resource/mcp`;
if (bare.status !== 401 || !bare.challenge.includes(`resource_metadata="${metadataUrl}"`) || !bare.challenge.includes('scope="mcp:tools"')) {
  fail(`no token: ${bare.status} ${bare.challenge}`);
}
const metadata = await (await fetch(metadataUrl)).json();
if (metadata.resource !== RESOURCE || metadata.authorization_servers?.[0] !== issuer) fail(`metadata: ${JSON.stringify(metadata)}`);
ok("no token: 401 naming the protected-resource metadata, which names the issuer");

const good = await post(await granted("mcp:tools"));
if (good.status !== 200) fail(`a good token: ${good.status} ${good.text}`);
ok("a token the provider issued for this resource is accepted");

await refused("another audience", await granted("mcp:tools", "https://other.example/mcp"), 401, "invalid_token", "not for this resource");
await refused("another issuer", await signed(keyA, "key-a", { iss: "https://evil.example" }), 401, "invalid_token", "another issuer");
await refused("expired", await signed(keyA, "key-a", { iat: now() - 3600, exp: now() - 600 }), 401, "invalid_token", "expired");
await refused("alg none", `${b64({ alg: "none", typ: "at+jwt" })}.${b64(claims())}.`, 401, "invalid_token", "not a signed JWT");
const publicPem = await jose.exportSPKI(keyA.publicKey);
const hmac = await new jose.SignJWT(claims()).setProtectedHeader({ alg: "HS256", kid: "key-a" }).sign(new TextEncoder().encode(publicPem));
await refused("HMAC with the public key", hmac, 401, "invalid_token", "HS256");
await refused("without the required scope", await granted("other:scope"), 403, "insufficient_scope", "mcp:tools");
// RFC 9068: an access token says typ at+jwt (an ID token of the issuer must not pass);
// RFC 7515: a critical header extension the host does not understand fails the token.
const typed = (typ) => new jose.SignJWT(claims()).setProtectedHeader({ alg: "RS256", kid: "key-a", ...(typ ? { typ } : {}) }).sign(keyA.privateKey);
await refused("typ JWT", await typed("JWT"), 401, "invalid_token", "not at+jwt");
await refused("no typ", await typed(null), 401, "invalid_token", "not at+jwt");
const critical = await new jose.SignJWT(claims())
  .setProtectedHeader({ alg: "RS256", kid: "key-a", typ: "at+jwt", crit: ["x-unknown"], "x-unknown": 1 })
  .sign(keyA.privateKey, { crit: { "x-unknown": true } });
await refused("an unknown critical extension", critical, 401, "invalid_token", "critical");

// Rotation: a token signed with a key the issuer does not publish yet is refused; once it
// does, the host fetches the key set again (at most every 10 s) and accepts it.
const rotated = await signed(keyB, "key-b", { sub: "rotated" });
await refused("a key not yet published", rotated, 401, "invalid_token", "does not publish");
published.push(await publicJwk(keyB, "key-b"));
for (let i = 0; ; i++) {
  const r = await post(rotated);
  if (r.status === 200) break;
  if (i > 120) fail(`the rotated key was never accepted: ${r.status} ${r.challenge}`);
  await new Promise((res) => setTimeout(res, 250));
}
ok("a rotated key is fetched and accepted");

// A key set that hangs: a token naming a key id never seen makes the host fetch the set
// again (at most every 10 s, so it is sent until the fetch starts); while that fetch
// hangs, a token signed with a known key is checked at once, not behind the fetch.
const keyC = await jose.generateKeyPair("RS256");
const unknownKid = await signed(keyC, "key-c", { sub: "unknown" });
const goodToken = await granted("mcp:tools");
jwksHangs = true;
const askedBefore = jwksAsked;
const waiting = [];
for (let i = 0; jwksAsked === askedBefore; i++) {
  if (i > 300) fail("the host never fetched the key set again for a key id it had not seen");
  waiting.push(post(unknownKid));
  await new Promise((r) => setTimeout(r, 100));
}
const started = performance.now();
const beside = await post(goodToken);
const took = Math.round(performance.now() - started);
if (beside.status !== 200) fail(`a good token while the key set hangs: ${beside.status} ${beside.text}`);
if (hung.length === 0) fail("the hanging key-set request ended before the good token was checked");
if (took > 3000) fail(`a good token waited ${took} ms behind a hanging key-set fetch`);
ok(`a good token is answered in ${took} ms while a fetch of the key set hangs`);
jwksHangs = false;
hung.splice(0).forEach(answerJwks);
for (const r of await Promise.all(waiting)) {
  if (r.status !== 401) fail(`a token with an unknown key id: ${r.status} ${r.challenge}`);
}
ok("the tokens with a key id the issuer never published are refused once the fetch ends");

// A scope that chooses a profile: that profile's tools only.
const connect = async (options) => {
  const client = new Client({ name: "oauth-checks", version: "1" });
  await client.connect(new StreamableHTTPClientTransport(new URL(RESOURCE), options));
  return client;
};
const coder = await connect({ requestInit: { headers: { authorization: `Bearer ${await granted("mcp:tools tools:coder")}` } } });
const coderTools = (await coder.listTools()).tools.map((t) => t.name).sort();
if (coderTools.join() !== "echo,read_output") fail(`the coder scope's tools: ${coderTools}`);
await coder.close();
ok("a scope mapped to a profile serves that profile's tools");

// The SDK's own OAuth client: 401 -> metadata -> token endpoint (client credentials,
// resource indicator) -> the call.
const auth = new ClientCredentialsProvider({ clientId: CLIENT.id, clientSecret: CLIENT.secret, scope: "mcp:tools", expectedIssuer: issuer });
const sdk = await connect({ authProvider: auth });
const echoed = await sdk.callTool({ name: "echo", arguments: { text: "over OAuth" } });
const text = (echoed.content ?? []).map((c) => c.text ?? "").join("");
if (echoed.isError || text !== "over OAuth") fail(`the SDK client's call: ${JSON.stringify(echoed)}`);
await sdk.close();
ok("the TypeScript SDK's OAuth client gets a token from the provider and calls a tool");

// The audit writer appends in the background: read whole lines only (the last may be
// half-written), and wait, bounded, for the call's line.
const auditLines = () =>
  readFileSync(`${work}/state/toolhost/audit.jsonl`, "utf8").split("\n").slice(0, -1).map((l) => JSON.parse(l));
const named = (lines) => lines.some((e) => e.tool === "echo" && e.caller?.token === `oauth:${CLIENT.id}`);
let audit = auditLines();
for (const end = Date.now() + 30_000; !named(audit) && Date.now() < end; audit = auditLines()) {
  await new Promise((r) => setTimeout(r, 50));
}
if (!named(audit)) fail(`the audit log does not name the subject: ${JSON.stringify(audit.slice(-3))}`);
ok("the audit log names the token's subject");
finish(0);
