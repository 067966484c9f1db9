// The TypeScript SDK v2 client with OAuth, for mcpvisor's team identity
// end-to-end tests: node team-tsclient.mjs GRANT MODE URL TOOL [ARGS_JSON].
// GRANT "client_credentials" (the SDK's ClientCredentialsProvider, its
// token requests given Hydra's audience $TS_AUDIENCE, since Hydra sets a
// token's aud from that parameter only) or "authorization_code" (a
// pre-registered client whose browser step is the test's headless
// browser at $TS_BROWSER: it gets the authorization URL and answers the
// redirect's query). MODE "legacy" (2025-11-25) or "pin" (2026-07-28).
// The client credentials are $TS_CLIENT_ID and $TS_CLIENT_SECRET, the
// issuer $TS_ISSUER. It connects (discovering everything from the 401),
// lists tools, calls TOOL, and prints one JSON line: the negotiated
// version, the tool names, the call's text, or the error.
import { Client, StreamableHTTPClientTransport, ClientCredentialsProvider } from '@modelcontextprotocol/client';

const [grant, mode, target, tool, argsJSON] = process.argv.slice(2);
const env = process.env;
const negotiation = mode === 'pin' ? { pin: '2026-07-28' } : mode;

class AudienceProvider extends ClientCredentialsProvider {
  prepareTokenRequest(scope) {
    const p = super.prepareTokenRequest(scope);
    p.set('audience', env.TS_AUDIENCE);
    return p;
  }
}

// A pre-registered confidential client of the authorization code flow,
// its browser the test's.
class HeadlessProvider {
  constructor() { this.callback = undefined; }
  get redirectUrl() { return env.TS_REDIRECT; }
  get clientMetadata() {
    return { client_name: 'ts-team', redirect_uris: [env.TS_REDIRECT], grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'], token_endpoint_auth_method: 'client_secret_basic' };
  }
  clientInformation() { return { client_id: env.TS_CLIENT_ID, client_secret: env.TS_CLIENT_SECRET, issuer: env.TS_ISSUER }; }
  // The SDK sends no state unless asked to (Hydra requires one).
  state() { return this._state ??= crypto.randomUUID(); }
  tokens() { return this._tokens; }
  saveTokens(t) { this._tokens = t; }
  async redirectToAuthorization(url) {
    const r = await fetch(env.TS_BROWSER, { method: 'POST', body: url.href });
    if (!r.ok) throw new Error('the browser: ' + r.status + ' ' + await r.text());
    this.callback = new URLSearchParams(await r.text());
  }
  saveCodeVerifier(v) { this._verifier = v; }
  codeVerifier() { return this._verifier; }
}

const provider = grant === 'client_credentials'
  ? new AudienceProvider({ clientId: env.TS_CLIENT_ID, clientSecret: env.TS_CLIENT_SECRET, expectedIssuer: env.TS_ISSUER, scope: env.TS_SCOPE })
  : new HeadlessProvider();

async function connect() {
  const transport = new StreamableHTTPClientTransport(new URL(target), { authProvider: provider });
  const client = new Client({ name: 'ts-team', version: '1.0.0' }, { versionNegotiation: { mode: negotiation } });
  await client.connect(transport);
  return client;
}

const out = {};
let client;
try {
  try {
    client = await connect();
  } catch (e) {
    // The authorization code flow ends the first connection at the
    // redirect; with the code from the browser, the client finishes it
    // and connects again.
    if (!(provider instanceof HeadlessProvider) || !provider.callback) throw e;
    const transport = new StreamableHTTPClientTransport(new URL(target), { authProvider: provider });
    await transport.finishAuth(provider.callback);
    client = await connect();
  }
  out.version = client.getNegotiatedProtocolVersion();
  out.tools = (await client.listTools()).tools.map((t) => t.name);
  const res = await client.callTool({ name: tool, arguments: argsJSON ? JSON.parse(argsJSON) : {} });
  out.text = res.content.map((c) => c.text).join('');
  if (res.isError) out.error = 'tool error: ' + out.text;
} catch (e) {
  out.error = String(e && e.stack || e);
  if (e && e.code !== undefined) out.code = e.code;
}
try { await client?.close(); } catch {}
console.log(JSON.stringify(out));
process.exit(0);
