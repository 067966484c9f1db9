// A tasks fixture: an MCP server on the TypeScript SDK v2
// (@modelcontextprotocol/server) that offers the 2026-07-28 tasks
// extension (SEP-2663) with the tools the official conformance suite's
// tasks-* scenarios call: greet, slow_compute, failing_job,
// protocol_error_job, confirm_delete, multi_input, test_tool_with_task.
// The SDK has the methods' plumbing but no task store, so the tasks are
// kept here, at module level (the HTTP handler builds a server per
// request).
//
//   node tasks-server.mjs stdio        serves stdin/stdout (both eras)
//   node tasks-server.mjs http [PORT]  serves http://127.0.0.1:PORT/mcp
//                                      (0: any free port), printing the URL
//
// It resolves its packages from the node_modules beside it (ESM), and
// exits when its stdin ends, or after FIXTURE_LIFETIME_MS (default 10
// minutes): a test that dies leaves nothing running.
import { McpServer, createMcpHandler, MissingRequiredClientCapabilityError, ProtocolError, ProtocolErrorCode, inputRequired } from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import { serve } from '@hono/node-server';
import * as z from 'zod';
import { randomUUID } from 'node:crypto';

const EXT = 'io.modelcontextprotocol/tasks';
const tasks = new Map(); // module-level: createMcpHandler builds a fresh McpServer per request
const now = () => new Date().toISOString();
const CAPS = 'io.modelcontextprotocol/clientCapabilities';
const declared = (ctx) => !!(ctx.mcpReq.envelope?.[CAPS] ?? ctx.mcpReq._meta?.[CAPS])?.extensions?.[EXT];
const missing = () => new MissingRequiredClientCapabilityError({ requiredCapabilities: { extensions: { [EXT]: {} } } });
const text = (t, isError) => ({ content: [{ type: 'text', text: t }], ...(isError ? { isError: true } : {}) });

function newTask(run) {
  const t = { taskId: randomUUID(), status: 'working', createdAt: now(), lastUpdatedAt: now(), ttlMs: 600000, pollIntervalMs: 200,
              inputRequests: {}, waiters: {}, abort: new AbortController() };
  tasks.set(t.taskId, t);
  const set = (patch) => Object.assign(t, patch, { lastUpdatedAt: now() });
  const ask = (key, params) => new Promise((resolve) => {  // park task in input_required
    t.inputRequests[key] = { method: 'elicitation/create', params: { mode: 'form', ...params } };
    t.waiters[key] = resolve; set({ status: 'input_required' });
  });
  run({ signal: t.abort.signal, ask }).then(
    (result) => { if (t.status !== 'cancelled') set({ status: 'completed', result }); },
    (err) => { if (t.status !== 'cancelled') set({ status: 'failed', error: { code: -32603, message: String(err?.message ?? err) } }); });
  const { taskId, status, createdAt, lastUpdatedAt, ttlMs, pollIntervalMs } = t;
  return { resultType: 'task', taskId, status, createdAt, lastUpdatedAt, ttlMs, pollIntervalMs };  // flat CreateTaskResult
}
function detailed(t) {
  const { taskId, status, createdAt, lastUpdatedAt, ttlMs, pollIntervalMs } = t;
  const d = { taskId, status, createdAt, lastUpdatedAt, ttlMs, pollIntervalMs };
  if (status === 'input_required') d.inputRequests = { ...t.inputRequests };
  if (status === 'completed') d.result = t.result;
  if (status === 'failed') d.error = t.error;
  return d;
}
const sleep = (ms, signal) => new Promise((res, rej) => { const h = setTimeout(res, ms); signal?.addEventListener('abort', () => { clearTimeout(h); rej(new Error('cancelled')); }); });

function build() {
  const mcp = new McpServer({ name: 'tasks-fixture', version: '0.0.1' }, { capabilities: { tools: {}, extensions: { [EXT]: {} } } });
  mcp.registerTool('greet', { inputSchema: z.object({ name: z.string() }) }, async ({ name }) => text(`Hello, ${name}!`));
  mcp.registerTool('slow_compute', { inputSchema: z.object({ seconds: z.number().int().default(3), label: z.string().default('default') }) },
    async ({ seconds, label }, ctx) => {
      if (!declared(ctx)) { await sleep(seconds * 1000); return text(`Computation ${label} done. Result: 42.`); }
      return newTask(async ({ signal }) => { await sleep(seconds * 1000, signal); return text(`Computation ${label} done. Result: 42.`); });
    });
  mcp.registerTool('failing_job', { inputSchema: z.object({}) }, async (_a, ctx) => {
    if (!declared(ctx)) throw missing();
    return newTask(async () => { await sleep(1000); return text('simulated failure: job crashed', true); });
  });
  mcp.registerTool('protocol_error_job', { inputSchema: z.object({}) }, async (_a, ctx) => {
    if (!declared(ctx)) throw missing();
    return newTask(async () => { await sleep(500); throw new Error('simulated protocol error'); });
  });
  mcp.registerTool('confirm_delete', { inputSchema: z.object({ filename: z.string().default('important.txt') }) }, async ({ filename }, ctx) => {
    if (!declared(ctx)) throw missing();
    return newTask(async ({ ask }) => {
      const r = await ask('confirm', { message: `Delete '${filename}'?`, requestedSchema: { type: 'object', properties: { confirm: { type: 'boolean' } }, required: ['confirm'] } });
      return text(r?.action === 'accept' && r.content?.confirm ? `deleted '${filename}'` : `kept '${filename}'`);
    });
  });
  mcp.registerTool('multi_input', { inputSchema: z.object({}) }, async (_a, ctx) => {
    if (!declared(ctx)) throw missing();
    return newTask(async ({ ask }) => {
      const [n, c] = await Promise.all([
        ask('name', { message: 'Enter your name:', requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } }),
        ask('confirm', { message: 'Confirm action?', requestedSchema: { type: 'object', properties: { confirm: { type: 'boolean' } }, required: ['confirm'] } })]);
      return text(`name=${n?.content?.name} confirmed=${c?.content?.confirm}`);
    });
  });
  mcp.registerTool('test_tool_with_task', { inputSchema: z.object({}) }, async (_a, ctx) => {
    if (!declared(ctx)) throw missing();
    const r = ctx.mcpReq.inputResponses?.user_name;
    if (!r) return inputRequired({ inputRequests: { user_name: inputRequired.elicit({ message: 'What is your name?',
      requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } }) } });
    const name = r.content?.name ?? r.result?.content?.name;
    return newTask(async () => { await sleep(50); return text(`Hello, ${name}! (computed in task)`); });
  });
  const s = mcp.server;
  // McpServer turns every non-URL-elicitation error thrown by a tool callback into an isError result,
  // so the -32021 for task-required tools must be raised before McpServer's tools/call handler runs.
  const REQUIRED = new Set(['failing_job', 'protocol_error_job', 'confirm_delete', 'multi_input', 'test_tool_with_task']);
  const orig = s._requestHandlers.get('tools/call');
  s._requestHandlers.set('tools/call', async (req, ctx) => {
    if (REQUIRED.has(req.params?.name) && !declared(ctx)) throw missing();
    return orig(req, ctx);
  });
  const lookup = (ctx, taskId) => { if (!declared(ctx)) throw missing();
    const t = tasks.get(taskId); if (!t) throw new ProtocolError(ProtocolErrorCode.InvalidParams, 'Failed to retrieve task: Task not found'); return t; };
  s.setRequestHandler('tasks/get', { params: z.looseObject({ taskId: z.string() }) }, async ({ taskId }, ctx) => detailed(lookup(ctx, taskId)));
  s.setRequestHandler('tasks/cancel', { params: z.looseObject({ taskId: z.string() }) }, async ({ taskId }, ctx) => {
    const t = lookup(ctx, taskId);
    if (!['completed', 'failed', 'cancelled'].includes(t.status)) { t.abort.abort(); Object.assign(t, { status: 'cancelled', lastUpdatedAt: now() }); }
    return {};
  });
  s.setRequestHandler('tasks/update', { params: z.looseObject({ taskId: z.string() }) }, async ({ taskId }, ctx) => {
    const t = lookup(ctx, taskId);
    // SDK 2.3.1 lifts params.inputResponses (MRTR reserved name) out of params into ctx.mcpReq.inputResponses
    const inputResponses = ctx.mcpReq.inputResponses ?? {};
    for (const [k, v] of Object.entries(inputResponses)) if (t.waiters[k]) { const w = t.waiters[k]; delete t.waiters[k]; delete t.inputRequests[k]; w(v); }
    if (t.status === 'input_required' && Object.keys(t.inputRequests).length === 0) Object.assign(t, { status: 'working', lastUpdatedAt: now() });
    return {};
  });
  return mcp;
}

setTimeout(() => process.exit(0), +(process.env.FIXTURE_LIFETIME_MS ?? 600000)).unref();
if (process.argv[2] === 'stdio') serveStdio(() => build());
else {
  const h = createMcpHandler(() => build());
  serve({ fetch: (req) => h.fetch(req), port: +(process.argv[3] ?? 0), hostname: '127.0.0.1' },
    (info) => console.log(`listening http://127.0.0.1:${info.port}/mcp`));
  process.stdin.on('end', () => process.exit(0));
  process.stdin.resume();
}
