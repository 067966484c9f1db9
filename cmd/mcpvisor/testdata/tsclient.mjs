// The TypeScript SDK v2 client, driven by the e2e tests: node tsclient.mjs
// MODE TARGET..., MODE "auto", "legacy" or "pin" (2026-07-28); TARGET an
// http(s) URL, or "stdio" followed by a command and its arguments. It
// connects, lists tools, calls the fixture's log tool at log level info,
// echo (named with the prefix in $TS_TOOL_PREFIX) and progress with progress, and
// sample (sampling, answered by its handler), and prints one JSON line
// with what it saw. With $TS_SERVER "conformance" (the go-sdk conformance
// server, dual-era) it calls the tools that ask for sampling and
// elicitation in the client's era instead: test_sampling and
// test_elicitation (legacy: the server's own requests), or
// test_input_required_result_sampling and
// test_input_required_result_elicitation (2026-07-28: input_required).
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const [mode, target, ...rest] = process.argv.slice(2);
const negotiation = mode === 'pin' ? { pin: '2026-07-28' } : mode;
const transport = target === 'stdio'
  ? new StdioClientTransport({ command: rest[0], args: rest.slice(1), stderr: 'ignore' })
  : new StreamableHTTPClientTransport(new URL(target));
const client = new Client({ name: 'ts-e2e', version: '1.0.0' }, { versionNegotiation: { mode: negotiation }, capabilities: { sampling: {}, elicitation: {} } });
// Elicitation is accepted with the one field the schema asks for.
client.setRequestHandler('elicitation/create', async (request) => {
  const field = Object.keys(request.params.requestedSchema?.properties ?? {})[0] ?? 'name';
  return { action: 'accept', content: { [field]: 'ts' } };
});
// The fixture's sample tool asks with a request, as a legacy server does:
// at 2026-07-28 it comes as an input_required round, which the client
// answers with this handler.
client.setRequestHandler('sampling/createMessage', async (request) => ({
  model: 'ts-e2e', role: 'assistant',
  content: { type: 'text', text: 'ts answer to ' + request.params.messages.at(-1).content.text },
}));
const logs = [];
client.setNotificationHandler('notifications/message', (n) => { logs.push(n.params.data); });
const out = {};
try {
  await client.connect(transport);
  out.version = client.getNegotiatedProtocolVersion();
  out.era = client.getProtocolEra();
  if (process.env.TS_SERVER === 'conformance') {
    const p = process.env.TS_TOOL_PREFIX ?? '';
    const modern = out.version === '2026-07-28';
    const call = async (name, args) => (await client.callTool({ name: p + name, arguments: args })).content.map((c) => c.text).join('');
    out.sampled = await call(modern ? 'test_input_required_result_sampling' : 'test_sampling', { prompt: 'capital?' });
    out.elicited = await call(modern ? 'test_input_required_result_elicitation' : 'test_elicitation', { message: 'who?' });
    console.log(JSON.stringify(out));
    process.exit(0);
  }
  if (process.env.TS_SERVER === 'everything') {
    // npm server-everything behind mcpvisor's /mcp (prefix everything__):
    // its echo, and its sampling tool, which asks the 2025 way.
    const tools = await client.listTools();
    out.tools = tools.tools.map((t) => t.name);
    const echo = await client.callTool({ name: 'everything__echo', arguments: { message: 'from typescript' } });
    out.text = echo.content.map((c) => c.text).join('');
    const sampled = await client.callTool({ name: 'everything__trigger-sampling-request', arguments: { prompt: 'capital?', maxTokens: 20 } });
    out.sampled = sampled.content.map((c) => c.text).join('');
    console.log(JSON.stringify(out));
    process.exit(0);
  }
  const name = (process.env.TS_TOOL_PREFIX ?? '') + 'echo';
  // Logging first: a legacy server's lines are a request's only while no
  // other request there ended lately (each 2026-07-28 request is its own
  // requester).
  // At 2026-07-28 a request asks for its log lines in its _meta; earlier,
  // the session sets a level.
  const modern = out.version === '2026-07-28';
  if (!modern) await client.setLoggingLevel('info');
  await client.callTool({
    name: name.replace('echo', 'log'), arguments: { text: 'ts log line', level: 'warning' },
    ...(modern && { _meta: { 'io.modelcontextprotocol/logLevel': 'info' } }),
  });
  out.logs = logs.slice();
  const tools = await client.listTools();
  out.tools = tools.tools.map((t) => t.name);
  let progress = 0;
  const res = await client.callTool({ name, arguments: { text: 'from typescript' } }, { onprogress: () => { progress++; } });
  out.text = res.content.map((c) => c.text).join('');
  const prog = await client.callTool({ name: name.replace('echo', 'progress'), arguments: { steps: 3, intervalMs: 1 } }, { onprogress: () => { progress++; } });
  out.progressResult = prog.content.map((c) => c.text).join('');
  out.progress = progress;
  const sampled = await client.callTool({ name: name.replace('echo', 'sample'), arguments: { prompt: 'capital?' } });
  out.sampled = sampled.content.map((c) => c.text).join('');
  // $TS_REPEAT more calls of echo, each checked (the replica tests: a
  // session's calls spread over replicas by a balancer).
  out.repeated = 0;
  for (let i = 0; i < Number(process.env.TS_REPEAT ?? 0); i++) {
    const r = await client.callTool({ name, arguments: { text: 'r' + i } });
    if (!r.content.map((c) => c.text).join('').includes('r' + i)) throw new Error('call ' + i + ': ' + JSON.stringify(r));
    out.repeated++;
  }
} catch (e) {
  out.error = String(e && e.stack || e);
}
try { await client.close(); } catch {}
console.log(JSON.stringify(out));
process.exit(0);
