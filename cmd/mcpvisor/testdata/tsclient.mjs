// The TypeScript SDK v2 client, driven by the e2e tests: node tsclient.mjs
// MODE TARGET..., MODE "auto", "legacy" or "pin" (2026-07-28); TARGET an
// http(s) URL, or "stdio" followed by a command and its arguments. It
// connects, lists tools, calls x__echo (or echo on a per-server URL) with
// progress, and prints one JSON line with what it saw.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const [mode, target, ...rest] = process.argv.slice(2);
const negotiation = mode === 'pin' ? { pin: '2026-07-28' } : mode;
const transport = target === 'stdio'
  ? new StdioClientTransport({ command: rest[0], args: rest.slice(1), stderr: 'ignore' })
  : new StreamableHTTPClientTransport(new URL(target));
const client = new Client({ name: 'ts-e2e', version: '1.0.0' }, { versionNegotiation: { mode: negotiation } });
const out = {};
try {
  await client.connect(transport);
  out.version = client.getNegotiatedProtocolVersion();
  out.era = client.getProtocolEra();
  const tools = await client.listTools();
  out.tools = tools.tools.map((t) => t.name);
  const name = out.tools.includes('x__echo') ? 'x__echo' : 'echo';
  let progress = 0;
  const res = await client.callTool({ name, arguments: { text: 'from typescript' } }, { onprogress: () => { progress++; } });
  out.text = res.content.map((c) => c.text).join('');
  const prog = await client.callTool({ name: name.replace('echo', 'progress'), arguments: { steps: 3, intervalMs: 1 } }, { onprogress: () => { progress++; } });
  out.progressResult = prog.content.map((c) => c.text).join('');
  out.progress = progress;
} catch (e) {
  out.error = String(e && e.stack || e);
}
try { await client.close(); } catch {}
console.log(JSON.stringify(out));
process.exit(0);
