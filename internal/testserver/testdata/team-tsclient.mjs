// The TypeScript SDK v2 client with OAuth, for mcpvisor's team identity
// end-to-end tests: node team-tsclient.mjs < CASES_JSON runs each case in
// turn, each with a client of its own, and prints one JSON line: an
// array of what each saw (the negotiated version, the tool names, the
// call's text, or the error and its code).
//
// A case is {grant, mode, url, tool, args, clientId, clientSecret,
// issuer, ...}. grant "client_credentials": the SDK's
// ClientCredentialsProvider, its token requests given Hydra's audience
// (the case's audience), since Hydra sets a token's aud from that
// parameter only. grant "authorization_code": a pre-registered client
// (redirect) whose browser step is the test's headless browser (browser:
// a URL that gets the authorization URL and answers the redirect's
// query). mode "legacy" (2025-11-25) or "pin" (2026-07-28). Each client
// discovers everything from the 401, lists tools and calls tool.
import { Client, StreamableHTTPClientTransport, ClientCredentialsProvider } from '@modelcontextprotocol/client';

class AudienceProvider extends ClientCredentialsProvider {
  constructor(opts, audience) { super(opts); this.audience = audience; }
  prepareTokenRequest(scope) {
    const p = super.prepareTokenRequest(scope);
    p.set('audience', this.audience);
    return p;
  }
}

// A pre-registered confidential client of the authorization code flow,
// its browser the test's.
class HeadlessProvider {
  constructor(c) { this.c = c; this.callback = undefined; }
  get redirectUrl() { return this.c.redirect; }
  get clientMetadata() {
    return { client_name: 'ts-team', redirect_uris: [this.c.redirect], grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'], token_endpoint_auth_method: 'client_secret_basic' };
  }
  clientInformation() { return { client_id: this.c.clientId, client_secret: this.c.clientSecret, issuer: this.c.issuer }; }
  // The SDK sends no state unless asked to (Hydra requires one).
  state() { return this._state ??= crypto.randomUUID(); }
  tokens() { return this._tokens; }
  saveTokens(t) { this._tokens = t; }
  async redirectToAuthorization(url) {
    const r = await fetch(this.c.browser, { method: 'POST', body: url.href });
    if (!r.ok) throw new Error('the browser: ' + r.status + ' ' + await r.text());
    this.callback = new URLSearchParams(await r.text());
  }
  saveCodeVerifier(v) { this._verifier = v; }
  codeVerifier() { return this._verifier; }
}

async function run(c) {
  const negotiation = c.mode === 'pin' ? { pin: '2026-07-28' } : c.mode;
  const provider = c.grant === 'client_credentials'
    ? new AudienceProvider({ clientId: c.clientId, clientSecret: c.clientSecret, expectedIssuer: c.issuer, scope: c.scope }, c.audience)
    : new HeadlessProvider(c);
  const connect = async () => {
    const transport = new StreamableHTTPClientTransport(new URL(c.url), { authProvider: provider });
    const client = new Client({ name: 'ts-team', version: '1.0.0' }, { versionNegotiation: { mode: negotiation } });
    await client.connect(transport);
    return client;
  };
  const out = {};
  let client;
  try {
    try {
      client = await connect();
    } catch (e) {
      // The authorization code flow ends the first connection at the
      // redirect; with the code from the browser, the client finishes
      // it and connects again.
      if (!(provider instanceof HeadlessProvider) || !provider.callback) throw e;
      const transport = new StreamableHTTPClientTransport(new URL(c.url), { authProvider: provider });
      await transport.finishAuth(provider.callback);
      client = await connect();
    }
    out.version = client.getNegotiatedProtocolVersion();
    out.tools = (await client.listTools()).tools.map((t) => t.name);
    const res = await client.callTool({ name: c.tool, arguments: c.args ?? {} });
    out.text = res.content.map((x) => x.text).join('');
    if (res.isError) out.error = 'tool error: ' + out.text;
  } catch (e) {
    out.error = String(e && e.stack || e);
    if (e && e.code !== undefined) out.code = e.code;
  }
  try { await client?.close(); } catch {}
  return out;
}

const results = [];
let input = '';
for await (const chunk of process.stdin) input += chunk;
for (const c of JSON.parse(input)) results.push(await run(c));
console.log(JSON.stringify(results));
process.exit(0);
