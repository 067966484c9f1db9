// A 2025-11-25 stdio server with the revision's experimental tasks, whose
// task ids count from 1 in each process (so a restarted one reuses them),
// written without an SDK so that it does what tests need of a server:
//   job       {elicitLater: ms, endAfter: ms}  with params.task: a task
//             (its status is notified before the result); with elicitLater,
//             the server asks for input about the task that much later, on
//             its own; with endAfter, the task completes then (tasks/result
//             answers once it has)
//   askfirst  asks for input first, then makes the task
//   slow      {ms}  answers after ms (a call in flight)
// It exits when its stdin ends, or after FIXTURE_LIFETIME_MS (10 min).
import readline from 'node:readline';
const rl = readline.createInterface({ input: process.stdin });
const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
let next = 1, reqN = 1;
const tasks = new Map();
const waiters = new Map(); // task id → the tasks/result answers waiting for its end
const pending = new Map();
const now = () => new Date().toISOString();
const mk = (id) => ({ taskId: id, status: 'working', createdAt: now(), lastUpdatedAt: now(), ttl: 60000, pollInterval: 100 });
rl.on('line', (line) => {
  const m = JSON.parse(line);
  if (m.id !== undefined && !m.method) { const r = pending.get(m.id); if (r) { pending.delete(m.id); r(m); } return; }
  const p = m.params || {};
  switch (m.method) {
    case 'initialize':
      return send({ jsonrpc: '2.0', id: m.id, result: { protocolVersion: '2025-11-25', serverInfo: { name: 'lt', version: '1' },
        capabilities: { tools: {}, tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } } } });
    case 'notifications/initialized': return;
    case 'ping': return send({ jsonrpc: '2.0', id: m.id, result: {} });
    case 'tools/list':
      return send({ jsonrpc: '2.0', id: m.id, result: { tools: [
        { name: 'job', inputSchema: { type: 'object' }, execution: { taskSupport: 'optional' } },
        { name: 'askfirst', inputSchema: { type: 'object' }, execution: { taskSupport: 'optional' } },
        { name: 'slow', inputSchema: { type: 'object' } }] } });
    case 'tools/call': {
      const name = p.name;
      if (name === 'slow') { setTimeout(() => send({ jsonrpc: '2.0', id: m.id, result: { content: [{ type: 'text', text: 'slow done' }] } }), (p.arguments?.ms ?? 2000)); return; }
      const create = () => {
        if (!p.task) return send({ jsonrpc: '2.0', id: m.id, result: { content: [{ type: 'text', text: 'sync ' + name }] } });
        const id = String(next++);
        const t = mk(id); tasks.set(id, t);
        // status before the result, as server-everything does
        send({ jsonrpc: '2.0', method: 'notifications/tasks/status', params: { ...t, statusMessage: 'secret of task ' + id } });
        send({ jsonrpc: '2.0', id: m.id, result: { task: t } });
        if (p.arguments?.endAfter) setTimeout(() => {
          t.status = 'completed';
          for (const w of waiters.get(id) ?? []) w();
          waiters.delete(id);
        }, p.arguments.endAfter);
        if (p.arguments?.elicitLater) setTimeout(() => {
          const rid = 'e' + (reqN++);
          pending.set(rid, () => {});
          send({ jsonrpc: '2.0', id: rid, method: 'elicitation/create', params: { message: 'private question for task ' + id, requestedSchema: { type: 'object', properties: {} },
            _meta: { 'io.modelcontextprotocol/related-task': { taskId: id } } } });
        }, p.arguments.elicitLater);
      };
      if (name === 'askfirst') {
        const rid = 'a' + (reqN++);
        pending.set(rid, () => create());
        return send({ jsonrpc: '2.0', id: rid, method: 'elicitation/create', params: { message: 'first?', requestedSchema: { type: 'object', properties: {} } } });
      }
      return create();
    }
    case 'tasks/get': { const t = tasks.get(p.taskId); if (!t) return send({ jsonrpc: '2.0', id: m.id, error: { code: -32602, message: 'no task ' + p.taskId } }); return send({ jsonrpc: '2.0', id: m.id, result: t }); }
    case 'tasks/result': {
      // Answers once the task ends (endAfter), as the revision says.
      const t = tasks.get(p.taskId);
      if (!t) return send({ jsonrpc: '2.0', id: m.id, error: { code: -32602, message: 'no task ' + p.taskId } });
      const answer = () => send({ jsonrpc: '2.0', id: m.id, result: { content: [{ type: 'text', text: 'result of ' + t.taskId }],
        _meta: { 'io.modelcontextprotocol/related-task': { taskId: t.taskId } } } });
      if (t.status !== 'working') return answer();
      waiters.set(t.taskId, [...(waiters.get(t.taskId) ?? []), answer]);
      return;
    }
    case 'tasks/list': return send({ jsonrpc: '2.0', id: m.id, result: { tasks: [...tasks.values()] } });
    case 'tasks/cancel': { const t = tasks.get(p.taskId); if (!t) return send({ jsonrpc: '2.0', id: m.id, error: { code: -32602, message: 'no task' } }); t.status = 'cancelled'; return send({ jsonrpc: '2.0', id: m.id, result: t }); }
    default: if (m.id !== undefined) send({ jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'nf ' + m.method } });
  }
});
rl.on('close', () => process.exit(0));
setTimeout(() => process.exit(0), +(process.env.FIXTURE_LIFETIME_MS ?? 600000)).unref();
