// mcpvisor dashboard: every server live from the admin API. No framework,
// no build step; all data is written with textContent, never as HTML.
"use strict";
(() => {
  const TOKEN_KEY = "mcpvisor.token", THEME_KEY = "mcpvisor.theme";
  const POLL_MS = 3000, MAX_EVENTS = 100, MAX_LINES = 300, MAX_OPEN = 3;
  const $ = (id) => document.getElementById(id);
  const el = (tag, props, ...kids) => {
    const e = document.createElement(tag);
    if (props) for (const [k, v] of Object.entries(props)) {
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : v);
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k);
    return e;
  };

  // ---- theme: automatic (the system's), light or dark; kept per browser.
  const themes = ["auto", "light", "dark"];
  function applyTheme(t) {
    if (t === "auto") document.documentElement.removeAttribute("data-theme");
    else document.documentElement.setAttribute("data-theme", t);
    const b = $("theme");
    if (b) { b.textContent = "Theme: " + t; b.setAttribute("aria-label", "Color theme: " + (t === "auto" ? "automatic" : t) + " (change)"); }
  }
  let theme = localStorage.getItem(THEME_KEY) || "auto";
  if (!themes.includes(theme)) theme = "auto";
  applyTheme(theme);

  const API_TIMEOUT_MS = 75000, STREAM_IDLE_MS = 45000;

  // ---- API access: the token lives in this tab's sessionStorage only.
  let token = sessionStorage.getItem(TOKEN_KEY) || "";
  class AuthError extends Error {}
  function headers(extra) {
    const h = Object.assign({}, extra);
    if (token) h.Authorization = "Bearer " + token;
    return h;
  }
  async function api(path, opts = {}) {
    // Bounded: a request the network lost ends (the longest the API
    // takes is an action's 60 s bound).
    const res = await fetch(path, { cache: "no-store", signal: AbortSignal.timeout(API_TIMEOUT_MS), ...opts, headers: headers(opts.headers) });
    if (res.status === 401) { needToken("The token was refused."); throw new AuthError("unauthorized"); }
    let body = null;
    const text = await res.text();
    try { body = text ? JSON.parse(text) : null; } catch { body = { error: text.trim() }; }
    return { status: res.status, ok: res.ok, body };
  }
  const enc = encodeURIComponent;

  // ---- Server-Sent Events read with fetch (an EventSource cannot send
  // the Authorization header). onEvent gets {event, id, data}.
  // The server sends a comment every 15 s: a stream silent for
  // STREAM_IDLE_MS is a connection lost without a reset, ended (ac) so
  // that the caller reconnects.
  async function readSSE(url, lastId, ac, onOpen, onEvent) {
    const h = { Accept: "text/event-stream" };
    if (lastId) h["Last-Event-ID"] = lastId;
    let idle = setTimeout(() => ac.abort(), STREAM_IDLE_MS);
    try {
      return await readSSEBody(url, h, ac, onOpen, onEvent, () => {
        clearTimeout(idle);
        idle = setTimeout(() => ac.abort(), STREAM_IDLE_MS);
      });
    } finally {
      clearTimeout(idle);
    }
  }
  async function readSSEBody(url, h, ac, onOpen, onEvent, alive) {
    const res = await fetch(url, { cache: "no-store", headers: headers(h), signal: ac.signal });
    if (res.status === 401) { needToken("The token was refused."); throw new AuthError("unauthorized"); }
    if (!res.ok) { const t = await res.text(); const e = new Error(t.trim() || "HTTP " + res.status); e.status = res.status; throw e; }
    onOpen();
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "", ev = { event: "message", id: "", data: [] };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      alive();
      buf += value;
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        let line = buf.slice(0, i); buf = buf.slice(i + 1);
        if (line.endsWith("\r")) line = line.slice(0, -1);
        if (line === "") {
          if (ev.data.length) onEvent({ event: ev.event, id: ev.id, data: ev.data.join("\n") });
          ev = { event: "message", id: "", data: [] };
          continue;
        }
        if (line.startsWith(":")) continue;
        const c = line.indexOf(":");
        const field = c < 0 ? line : line.slice(0, c);
        let v = c < 0 ? "" : line.slice(c + 1);
        if (v.startsWith(" ")) v = v.slice(1);
        if (field === "data") ev.data.push(v);
        else if (field === "event") ev.event = v;
        else if (field === "id") ev.id = v;
      }
    }
  }

  // stream keeps one SSE stream open: it reconnects after an end or an
  // error with capped exponential backoff and jitter, resuming after the
  // last id seen; stop() ends it for good.
  function stream(url, { onEvent, onState, stopOn }) {
    const ctl = { lastId: "", stopped: false, abort: null, timer: 0 };
    let failures = 0;
    const run = async () => {
      if (ctl.stopped) return;
      const ac = new AbortController(); ctl.abort = ac;
      let opened = 0;
      try {
        await readSSE(url, ctl.lastId, ac, () => { opened = Date.now(); onState && onState("live"); }, (m) => {
          failures = 0;
          if (m.id) ctl.lastId = m.id;
          onEvent(m);
        });
      } catch (e) {
        if (ctl.stopped || e instanceof AuthError) return;
        if (stopOn && stopOn(e)) { ctl.stopped = true; return; }
      }
      if (ctl.stopped) return;
      if (opened && Date.now() - opened > 10000) failures = 0;
      const delay = Math.min(30000, 500 * 2 ** failures) * (0.5 + Math.random() / 2);
      failures++;
      onState && onState("down", delay);
      ctl.timer = setTimeout(run, delay);
    };
    ctl.stop = () => { ctl.stopped = true; clearTimeout(ctl.timer); ctl.abort && ctl.abort.abort(); };
    ctl.reconnect = () => { clearTimeout(ctl.timer); ctl.abort && ctl.abort.abort(); };
    run();
    return ctl;
  }

  // ---- formatting
  function bytes(n) { return n ? formatBytes(n) : "–"; } // format.js
  function since(t) {
    if (!t) return "";
    let s = Math.max(0, (Date.now() - Date.parse(t)) / 1000);
    if (s < 60) return Math.floor(s) + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + Math.floor(s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
    return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
  }
  const clock = (t) => { const d = new Date(t); return isNaN(d) ? "" : d.toLocaleTimeString([], { hour12: false }); };
  const stamp = (t) => { const d = new Date(t); return isNaN(d) ? "" : d.toLocaleString([], { hour12: false }); };

  // ---- state
  const rows = new Map();      // name -> {status, tbody, cells, open, detail, logs, ...}
  const open = [];             // names of expanded rows, oldest first
  let lastRate = null;         // {requests, at}
  let refreshTimer = 0, pollTimer = 0, events = null, started = false;

  function setConn(state, delay) {
    const c = $("conn");
    c.className = "conn " + (state === "live" ? "live" : "down");
    c.textContent = state === "live" ? "live" : "reconnecting in " + Math.ceil(delay / 1000) + "s";
  }
  function notice(msg, bad) {
    const n = $("notice");
    n.textContent = msg;
    n.className = "notice" + (bad ? " bad" : "");
  }

  // hexId is name's UTF-8 bytes in hex: an id part that is the same for
  // two names only if they are one (a.b and a_b are not).
  const utf8 = new TextEncoder();
  function hexId(name) {
    return Array.from(utf8.encode(name), (b) => b.toString(16).padStart(2, "0")).join("");
  }

  // ---- servers table
  const COLS = [["state", "State"], ["era", "Era"], ["pid", "PID"], ["mem", "Memory"], ["up", "Up / dormant"],
    ["idle", "Idle"], ["inflight", "In flight"], ["restarts", "Restarts"], ["clients", "Clients"]];

  function makeRow(name) {
    const r = { name, cells: {}, open: false };
    const detailId = "detail-" + hexId(name);
    r.toggle = el("button", { type: "button", "aria-expanded": "false", "aria-controls": detailId,
      "aria-label": "Details of " + name, onclick: () => setOpen(r, !r.open) }, ...breakable(name));
    r.pending = el("span", { class: "pending", hidden: true });
    const tr = el("tr", { class: "row", "data-server": name },
      el("td", { class: "name", "data-label": "Server" }, r.toggle, r.pending));
    for (const [k, label] of COLS) {
      r.cells[k] = el("td", { class: k, "data-label": label });
      tr.append(r.cells[k]);
    }
    r.badge = el("span", { class: "badge" });
    r.cells.state.append(r.badge);
    r.btn = {
      restart: el("button", { type: "button", "data-action": "restart", "aria-label": "Restart " + name, onclick: () => act(r, "restart") }, "Restart"),
      stop: el("button", { type: "button", "data-action": "stop", "aria-label": "Stop " + name, onclick: () => act(r, "stop") }, "Stop"),
      start: el("button", { type: "button", "data-action": "start", "aria-label": "Start " + name, onclick: () => act(r, "start") }, "Start"),
      sleep: el("button", { type: "button", "data-action": "sleep", "aria-label": "Put " + name + " to sleep", onclick: () => act(r, "sleep") }, "Sleep"),
      login: el("button", { type: "button", "data-action": "login", "aria-label": "Log in to " + name, hidden: true, onclick: () => login(r) }, "Log in"),
    };
    tr.append(el("td", { class: "act", "data-label": "Actions" }, el("div", { class: "actions", role: "group", "aria-label": "Actions on " + name },
      r.btn.login, r.btn.restart, r.btn.stop, r.btn.start, r.btn.sleep)));
    // What is wrong with the server — its last error, a warning — has a
    // line of its own under the row, the whole width of the table: two
    // lines of the error (all of it in its title, and once the row is
    // open), the whole warning.
    r.noteCell = el("td", { colspan: String(COLS.length + 2) });
    r.note = el("tr", { class: "note", hidden: true }, r.noteCell);
    r.detailCell = el("td", { colspan: String(COLS.length + 2) });
    r.detailRow = el("tr", { class: "detail", id: detailId, hidden: true }, r.detailCell);
    r.tbody = el("tbody", { "data-server": name }, tr, r.note, r.detailRow);
    return r;
  }

  // breakable is name as text that may wrap after each . and _ (as it
  // does after -), for a long name to fit its column.
  function breakable(name) {
    const out = [];
    for (const part of name.match(/[^._]*[._]?/g)) {
      if (!part) continue;
      if (out.length) out.push(el("wbr"));
      out.push(part);
    }
    return out;
  }

  function renderRow(r) {
    const s = r.status;
    r.badge.textContent = s.state;
    r.badge.className = "badge s-" + s.state;
    r.tbody.dataset.state = s.state;
    r.cells.era.textContent = s.era || "–";
    r.cells.pid.textContent = s.pid ? String(s.pid) : "–";
    r.cells.mem.textContent = bytes(s.memoryBytes);
    renderTimes(r);
    r.cells.inflight.textContent = String(s.inFlight || 0);
    r.cells.restarts.textContent = String(s.restarts || 0);
    renderClients(r.cells.clients, s.clients || []);
    const err = s.lastError || s.refusing || "", warning = s.warning || "";
    if (r.errText !== err || r.warnText !== warning) {
      r.errText = err;
      r.warnText = warning;
      r.noteCell.replaceChildren(
        err ? el("div", { class: "err" }, el("span", { class: "vh", text: "Last error of " + r.name + ": " }), el("span", { class: "clamp", title: err, text: err })) : "",
        warning ? el("div", { class: "warning" }, el("span", { class: "vh", text: "Warning about " + r.name + ": " }), warning) : "");
      r.note.hidden = !err && !warning;
      r.tbody.classList.toggle("noted", !r.note.hidden);
    }
    const n = s.pendingDefinitions || 0;
    r.pending.hidden = !n;
    r.pending.textContent = n ? n + " pending" : "";
    r.pending.title = n ? "tool definitions held back until approved" : "";
    if (!r.busy) setButtons(r);
  }
  // The clients whose requests reached a server, as ps shows them: their
  // names when they fit, else how many (what fits of it: the cell
  // truncates); every name in the title.
  const CLIENTS_WIDTH = 24;
  function renderClients(cell, cs) {
    const names = cs.map((c) => c.name), text = names.join(",");
    const fit = cell.firstChild || cell.appendChild(el("span", { class: "fit" }));
    fit.textContent = !cs.length ? "–" : text.length <= CLIENTS_WIDTH ? text : cs.length === 1 ? "1 client" : cs.length + " clients";
    cell.title = cs.length ? cs.map((c) => c.name + " (" + c.requests + ")").join(", ") : "";
  }
  function renderTimes(r) {
    const s = r.status;
    const running = ["running", "degraded", "starting", "restarting"].includes(s.state);
    r.cells.up.textContent = s.state === "dormant" && s.dormantSince ? "dormant " + since(s.dormantSince)
      : running && s.startedAt ? "up " + since(s.startedAt) : "–";
    r.cells.idle.textContent = running && s.lastActivity ? since(s.lastActivity) : "–";
  }
  function setButtons(r) {
    const st = r.status.state;
    r.btn.stop.hidden = st === "stopped";
    r.btn.start.hidden = st !== "stopped";
    r.btn.sleep.disabled = st !== "running" || (r.status.inFlight || 0) > 0;
    r.btn.restart.disabled = r.btn.stop.disabled = r.btn.start.disabled = false;
    // A login is wanted when the server needs one, or asked for more
    // scope than it was granted (a step-up: it serves on meanwhile).
    const stepUp = r.status.oauth && r.status.oauth.state === "logged-in" && /^insufficient scope: /.test(r.status.oauth.reason || "");
    r.btn.login.hidden = st !== "needs-login" && !stepUp;
    r.btn.login.disabled = false;
  }

  function applyServers(body) {
    const table = $("servers");
    const seen = new Set();
    for (const s of body.servers || []) {
      seen.add(s.name);
      let r = rows.get(s.name);
      if (!r) { r = makeRow(s.name); rows.set(s.name, r); }
      r.status = s;
      renderRow(r);
    }
    for (const [name, r] of rows) if (!seen.has(name)) { setOpen(r, false); r.tbody.remove(); rows.delete(name); }
    // Keep the API's order (by name) without moving focused nodes needlessly.
    let prev = table.tHead;
    for (const s of body.servers || []) {
      const r = rows.get(s.name);
      if (prev.nextSibling !== r.tbody) prev.after(r.tbody);
      prev = r.tbody;
    }
    $("empty").hidden = rows.size > 0;
    const t = body.totals || {}, by = t.byState || {};
    $("t-running").textContent = String((by.running || 0) + (by.degraded || 0));
    $("t-dormant").textContent = String(by.dormant || 0);
    $("t-failed").textContent = String(by.failed || 0);
    $("t-memory").textContent = bytes(t.memoryBytes);
    const requests = (body.servers || []).reduce((a, s) => a + (s.requests || 0), 0);
    const now = performance.now();
    if (lastRate && now > lastRate.at) {
      const rate = Math.max(0, requests - lastRate.requests) / ((now - lastRate.at) / 1000);
      $("t-rate").textContent = rate < 10 ? rate.toFixed(1) : rate.toFixed(0);
    }
    lastRate = { requests, at: now };
  }

  // ---- the deployment, on a replica: which replica runs what. A serve
  // that is no replica lists none, and the section stays hidden.
  let replicas = true;
  async function refreshReplicas() {
    if (!replicas) return;
    const r = await api("/api/replicas");
    if (!r.ok || !r.body) return;
    if (!(r.body.replicas || []).length) { replicas = false; return; }
    const tbody = $("replicas").tBodies[0];
    tbody.replaceChildren();
    for (const p of r.body.replicas || []) {
      const tr = document.createElement("tr");
      const runs = Object.keys(p.servers || {}).sort().map((n) => n + "×" + p.servers[n]).join(", ") || "–";
      const ready = p.reachable ? p.ready : "unreachable: " + (p.error || "");
      const cells = [String(p.ordinal) + (p.ordinal === r.body.self ? " (this one)" : ""), p.address, ready, p.configVersion || "–", runs, String(p.forwarded || 0), String(p.received || 0)];
      for (const c of cells) {
        const td = document.createElement("td");
        td.textContent = c;
        tr.append(td);
      }
      if (!p.reachable || p.ready !== "ok") tr.className = "unready";
      tbody.append(tr);
    }
    $("replicas-section").hidden = false;
  }

  async function refresh() {
    clearTimeout(refreshTimer); refreshTimer = 0;
    try {
      const r = await api("/api/servers");
      if (r.ok) applyServers(r.body);
      else notice("Could not read the servers: " + ((r.body && r.body.error) || r.status), true);
      await refreshReplicas();
    } catch (e) {
      if (!(e instanceof AuthError)) setConn("down", POLL_MS);
    }
  }
  // soon refreshes after a short pause, so that a burst of events is one read.
  function soon() { if (!refreshTimer) refreshTimer = setTimeout(refresh, 120); }
  function poll() {
    clearTimeout(pollTimer);
    pollTimer = setTimeout(async () => {
      if (!document.hidden) {
        await refresh();
        for (const name of open) loadDetail(rows.get(name));
      }
      poll();
    }, POLL_MS);
  }

  // ---- actions, through the API of mcpvisor restart|stop|start|sleep
  async function act(r, action) {
    r.busy = true;
    for (const b of Object.values(r.btn)) b.disabled = true;
    r.tbody.setAttribute("aria-busy", "true");
    notice(action + " " + r.name + "…");
    try {
      const res = await api("/api/servers/" + enc(r.name) + "/" + action + "?timeout=60s", { method: "POST" });
      const b = res.body || {};
      if (res.ok && b.ok) {
        const pid = b.status && b.status.pid ? ", pid " + b.status.pid : "";
        notice({ restart: "Restarted ", stop: "Stopped ", start: "Started ", sleep: "Put to sleep: " }[action] + r.name + pid + ".");
      } else {
        notice("Could not " + action + " " + r.name + ": " + (b.error || "HTTP " + res.status), true);
      }
      if (b.status) { r.status = Object.assign({}, r.status, b.status); }
    } catch (e) {
      if (!(e instanceof AuthError)) notice("Could not " + action + " " + r.name + ": " + e.message, true);
    } finally {
      r.busy = false;
      r.tbody.removeAttribute("aria-busy");
      renderRow(r);
      refresh();
      if (r.open) loadDetail(r);
    }
  }

  // ---- a remote server's OAuth login: serve begins the flow with its own
  // /oauth/callback as the redirect, and the browser goes to the
  // authorization server's page; its redirect comes back to serve, which
  // completes the login and links back here.
  async function login(r) {
    r.btn.login.disabled = true;
    notice("Beginning the login to " + r.name + "…");
    try {
      const res = await api("/api/servers/" + enc(r.name) + "/login", { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
      const b = res.body || {};
      // Only a web page: serve checks the authorization server's
      // endpoint, and the page does not navigate to anything else
      // (a javascript: URL would run here).
      if (res.ok && /^https?:\/\//i.test(b.authorizationUrl || "")) {
        window.location.assign(b.authorizationUrl);
        return;
      }
      notice("Could not log in to " + r.name + ": " + (b.error || "HTTP " + res.status), true);
    } catch (e) {
      if (!(e instanceof AuthError)) notice("Could not log in to " + r.name + ": " + e.message, true);
    }
    r.btn.login.disabled = false;
  }

  // ---- expanded rows: detail, tools, history, instances, definitions,
  // and the stderr tail, live.
  function setOpen(r, want) {
    if (r.open === want) return;
    r.open = want;
    r.toggle.setAttribute("aria-expanded", String(want));
    r.detailRow.hidden = !want;
    r.tbody.classList.toggle("open", want);
    if (want) {
      open.push(r.name);
      if (open.length > MAX_OPEN) { const first = rows.get(open[0]); if (first) setOpen(first, false); }
      buildDetail(r);
      loadDetail(r);
      startLogs(r);
    } else {
      const i = open.indexOf(r.name); if (i >= 0) open.splice(i, 1);
      if (r.logs) { r.logs.stop(); r.logs = null; }
    }
  }

  function buildDetail(r) {
    r.d = {
      about: el("div", { class: "sub" }),
      defs: el("div"),
      tools: el("ul", { class: "plain" }),
      history: el("ul", { class: "plain" }),
      instances: el("div"),
      clients: el("div"),
      stderr: el("pre", { class: "stderr", role: "log", "aria-label": "stderr of " + r.name, tabindex: "0" }),
      stderrNote: el("p", { class: "sub" }),
    };
    r.lines = [];
    r.detailCell.replaceChildren(
      r.d.about,
      r.d.defs,
      el("div", { class: "detail-grid" },
        el("div", null, el("h3", { text: "stderr (live)" }), r.d.stderr, r.d.stderrNote),
        el("div", null, el("h3", { text: "Tools" }), r.d.tools)),
      el("div", { class: "detail-grid" },
        el("div", null, el("h3", { text: "Restart history" }), r.d.history),
        el("div", null, el("h3", { text: "Instances" }), r.d.instances)),
      el("div", { class: "detail-grid" },
        el("div", null, el("h3", { text: "Clients" }), r.d.clients)));
  }

  async function loadDetail(r) {
    if (!r || !r.open) return;
    try {
      const [d, t] = await Promise.all([api("/api/servers/" + enc(r.name)), api("/api/servers/" + enc(r.name) + "/tools")]);
      if (!r.open || !r.d) return;
      if (d.ok) renderDetail(r, d.body);
      if (t.ok) renderTools(r, t.body);
    } catch (e) {
      if (!(e instanceof AuthError) && r.d) r.d.about.textContent = "Could not read the details (trying again): " + e.message;
    }
  }

  function renderDetail(r, d) {
    const info = d.serverInfo ? (d.serverInfo.name || "") + (d.serverInfo.version ? " " + d.serverInfo.version : "") : "";
    r.d.about.replaceChildren(
      el("code", { text: d.launch || "" }),
      " · " + [d.kind, d.sharing, "protocol " + d.protocol, d.era && "era " + d.era, info, d.spawns !== undefined && d.spawns + " spawns",
        d.heldCalls ? d.heldCalls + " held calls" : ""].filter(Boolean).join(" · "));
    // Definitions held back by pinning, to approve: rebuilt only when what it shows changed: the details are read
    // again every poll, and a rebuild would close the values the
    // operator opened and lose a click that lands while it happens.
    const defs = d.definitions;
    const defsKey = JSON.stringify(defs && defs.pending && defs.pending.length ? [defs.changedAt, defs.pending] : null);
    if (r.d.defsKey !== defsKey) renderPending(r, defs, defsKey);
    const h = d.history || [];
    r.d.history.replaceChildren(...(h.length ? h.slice().reverse().map((x) => el("li", null,
      el("time", { datetime: x.time, text: stamp(x.time) }), " " + x.stage +
      (x.code !== undefined ? " · exit " + x.code : "") + (x.signal ? " · " + x.signal : "") + (x.pid ? " · pid " + x.pid : "") + " — " + x.error))
      : [el("li", { class: "muted", text: "no crash or failed start" })]));
    const ins = d.instances || [];
    const t = el("table", { class: "inner" }, el("thead", null, el("tr", null, ...["Instance", "State", "PID", "Up", "In flight", "Restarts"].map((c) => el("th", { scope: "col", text: c })))));
    const tb = el("tbody");
    for (const i of ins) tb.append(el("tr", null, el("td", { text: i.shared ? "shared" : "session " + i.session }), el("td", { text: i.state }),
      el("td", { text: i.pid ? String(i.pid) : "–" }), el("td", { text: i.startedAt ? since(i.startedAt) : "–" }),
      el("td", { text: String(i.inFlight || 0) }), el("td", { text: String(i.restarts || 0) })));
    t.append(tb);
    r.d.instances.replaceChildren(ins.length ? t : el("p", { class: "muted", text: "none" }));
    const cs = d.clients || [];
    const ct = el("table", { class: "inner clients" }, el("thead", null, el("tr", null, ...["Client", "Version", "Requests", "Last used"].map((c) => el("th", { scope: "col", text: c })))));
    const cb = el("tbody");
    for (const c of cs) cb.append(el("tr", { "data-client": c.name }, el("td", { text: c.name }), el("td", { text: c.version || "–" }),
      el("td", { text: String(c.requests || 0) }), el("td", null, el("time", { datetime: c.lastUsed, title: stamp(c.lastUsed), text: since(c.lastUsed) + " ago" }))));
    ct.append(cb);
    r.d.clients.replaceChildren(cs.length ? ct : el("p", { class: "muted", text: "no client has used it yet" }));
  }

  // renderPending shows the definitions pinning holds back, to approve.
  function renderPending(r, defs, key) {
    r.d.defsKey = key;
    r.d.defs.replaceChildren();
    if (!defs || !defs.pending || !defs.pending.length) return;
    const list = el("ul", { class: "plain pending-defs" });
    for (const p of defs.pending) {
      const fp = p.fingerprint || "";
      const fields = el("div", { class: "fields" });
      for (const f of p.fields || []) fields.append(renderField(f, p.change === "added"));
      if (p.more) fields.append(el("p", { class: "sub", text: "… and " + p.more + " more changed fields" }));
      list.append(el("li", { "data-tool": p.name },
        el("div", { class: "pending-head" },
          el("code", { text: p.name }), " " + (p.kind || "tool") + " " + (p.change || "changed") + " ",
          fp ? el("span", { class: "sub fp", title: "fingerprint " + fp, text: "@" + fp.slice(0, 32) }) : null, " ",
          el("button", { type: "button", "aria-label": "Approve " + p.name + " of " + r.name, onclick: () => approve(r, [p]) }, "Approve")),
        p.change === "added" ? el("p", { class: "sub", text: "new: its whole definition" }) : null,
        fields));
    }
    r.d.defs.append(el("h3", { text: "Pending definitions" + (defs.changedAt ? " · changed " + stamp(defs.changedAt) : "") }), list,
      el("button", { type: "button", class: "primary", "aria-label": "Approve every pending definition of " + r.name, onclick: () => approve(r, defs.pending) }, "Approve all"));
  }

  function renderTools(r, t) {
    if (!t.learned) { r.d.tools.replaceChildren(el("li", { class: "muted", text: "not known yet: learned when a client first lists them" })); return; }
    if (!t.tools.length) { r.d.tools.replaceChildren(el("li", { class: "muted", text: "no tools" })); return; }
    r.d.tools.replaceChildren(...t.tools.map((x) => el("li", null, el("code", { text: x.name }), x.description ? el("span", { class: "sub", text: " — " + x.description }) : null)));
  }

  // valueText is a field's value as text: "(absent)", a string that
  // spans lines as its text, anything else as JSON (indented when long),
  // and a value the API cut said to be. Always shown with textContent.
  function valueText(v, whole) {
    let t;
    if (v === undefined || v === null) t = "(absent)";
    else if (typeof v === "string" && v.includes("\n") && !whole) t = v;
    else if (typeof v === "string" || JSON.stringify(v).length <= 60) t = JSON.stringify(v);
    else t = JSON.stringify(v, null, 2);
    if (whole) t += " … (cut: " + whole + " bytes in all)";
    return t;
  }
  const LONG_VALUE = 160;

  // renderField shows one field of a pending definition: its path, and
  // its old and new values (of an added definition, its value), each as
  // text; a long one folds into a <details>, closed.
  function renderField(f, added) {
    const cut = f.truncated || {};
    const sides = added ? [["new", "value", f.new, cut.new]] : [["old", "old", f.old, cut.old], ["new", "new", f.new, cut.new]];
    const vals = el("div", { class: "vals" });
    let size = 0;
    for (const [cls, label, v, whole] of sides) {
      const text = valueText(v, whole);
      size = Math.max(size, text.length + (text.includes("\n") ? LONG_VALUE : 0));
      vals.append(el("div", { class: cls + (added ? " added" : "") }, el("span", { class: "lbl", text: label }), el("pre", { class: "val", text })));
    }
    const path = el("code", { class: "path", text: f.path || fieldPath(f) });
    if (size <= LONG_VALUE) return el("div", { class: "field", "data-path": f.path }, path, vals);
    const chars = sides.map(([, , v, whole]) => valueText(v, whole).length);
    return el("details", { class: "field", "data-path": f.path },
      el("summary", null, path, el("span", { class: "sub", text: " long value (" + chars.join(" → ") + " characters)" })), vals);
  }

  // A changed field is a path string (events) or {path, old, new} (details).
  function fieldPath(f) { return typeof f === "string" ? f : f.path; }

  // approve approves the pending definitions shown (each with the
  // fingerprint the operator saw: one that changed since is refused).
  async function approve(r, pending) {
    const names = pending.map((p) => p.name);
    const fingerprints = {};
    for (const p of pending) if (p.fingerprint) fingerprints[p.name] = p.fingerprint;
    try {
      const res = await api("/api/servers/" + enc(r.name) + "/approve", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ names, fingerprints }) });
      if (res.ok) notice("Approved " + ((res.body && res.body.approved) || names).join(", ") + " of " + r.name + ".");
      else notice("Could not approve: " + ((res.body && res.body.error) || "HTTP " + res.status), true);
    } catch (e) { if (!(e instanceof AuthError)) notice("Could not approve: " + e.message, true); }
    refresh(); loadDetail(r);
  }

  function startLogs(r) {
    r.d.stderrNote.textContent = "";
    r.logs = stream("/api/servers/" + enc(r.name) + "/logs?follow&tail=50", {
      stopOn: (e) => { if (e.status === 404 || e.status === 400) { r.d.stderrNote.textContent = e.message; return true; } return false; },
      onEvent: (m) => {
        if (m.event === "end") { r.d.stderrNote.textContent = "The server was removed from the configuration."; r.logs && r.logs.stop(); return; }
        if (m.event === "dropped") { addLine(r, null, "… " + JSON.parse(m.data).dropped + " lines no longer kept"); return; }
        const e = JSON.parse(m.data);
        addLine(r, e.time, (e.pid ? "[pid " + e.pid + "] " : "") + e.line);
      },
    });
  }
  function addLine(r, t, text) {
    const box = r.d.stderr;
    const atEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 8;
    const line = el("div", { class: "line" }, t ? el("span", { class: "t", text: clock(t) + " " }) : null, text);
    box.append(line);
    while (box.childNodes.length > MAX_LINES) box.firstChild.remove();
    if (atEnd) box.scrollTop = box.scrollHeight;
  }

  // ---- events timeline
  const STATE_EVENTS = /^(started|dormant|respawned|exited|restarting|restarted|failed|stopped|operator-|reload|definitions_changed|needs-login|logged-)/;
  function summary(e) {
    const d = e.details || {};
    if (e.type === "definitions_changed") {
      const names = (xs) => (xs || []).map((x) => x.name || x).join(", ");
      return [d.added && d.added.length && "added " + names(d.added), d.removed && d.removed.length && "removed " + names(d.removed),
        d.changed && d.changed.length && "changed " + (d.changed || []).map((c) => c.name + (c.fields && c.fields.length ? " (" + c.fields.map(fieldPath).join(", ") + ")" : "")).join(", "),
        d.held && d.held.length && "held " + names(d.held)].filter(Boolean).join("; ");
    }
    const parts = [];
    if (d.pid) parts.push("pid " + d.pid);
    if (d.code !== undefined) parts.push("exit " + d.code);
    if (d.signal) parts.push(d.signal);
    if (d.by) parts.push("by " + d.by);
    if (d.attempt) parts.push("attempt " + d.attempt);
    if (d.error) parts.push(String(d.error));
    return parts.join(" · ");
  }
  function addEvent(e) {
    const list = $("events");
    const item = el("li", { "data-type": e.type, "data-server": e.server || "" },
      el("time", { datetime: e.time, text: clock(e.time) }),
      e.server ? el("span", { class: "srv", text: e.server }) : null,
      el("span", { class: "ev ev-" + e.type, text: e.type }),
      el("span", { class: "sub", text: summary(e) }));
    list.prepend(item);
    while (list.childNodes.length > MAX_EVENTS) list.lastChild.remove();
  }
  function startEvents() {
    events = stream("/api/events", {
      onState: setConn,
      onEvent: (m) => {
        if (m.event === "lagged") { events.reconnect(); return; }
        let e; try { e = JSON.parse(m.data); } catch { return; }
        addEvent(e);
        if (STATE_EVENTS.test(e.type)) {
          soon();
          const r = rows.get(e.server);
          if (r && r.open) loadDetail(r);
        }
      },
    });
  }

  // ---- token and start-up
  // With team identity and a dashboard client, the page can log in at
  // the issuer (/ui/login): serve keeps the session, the browser only an
  // HttpOnly cookie that fetch sends on its own.
  let canLogin = false, session = false;
  function needToken(msg) {
    stopAll();
    session = false;
    $("app").hidden = true;
    $("login").hidden = false;
    $("sso").hidden = !canLogin;
    $("logout").hidden = true;
    $("login-error").textContent = msg || "";
    $("token").focus();
  }
  function stopAll() {
    started = false;
    if (events) { events.stop(); events = null; }
    for (const name of open.slice()) setOpen(rows.get(name), false);
    clearTimeout(pollTimer); clearTimeout(refreshTimer); refreshTimer = 0;
  }
  async function begin() {
    $("login").hidden = true;
    $("app").hidden = false;
    $("forget").hidden = !token;
    $("logout").hidden = !session;
    if (started) return;
    started = true;
    await refresh();
    if (!started) return;
    startEvents();
    poll();
  }

  document.addEventListener("DOMContentLoaded", async () => {
    applyTheme(theme);
    $("theme").addEventListener("click", () => {
      theme = themes[(themes.indexOf(theme) + 1) % themes.length];
      localStorage.setItem(THEME_KEY, theme);
      applyTheme(theme);
    });
    $("forget").addEventListener("click", () => { token = ""; sessionStorage.removeItem(TOKEN_KEY); needToken(""); });
    $("sso-login").addEventListener("click", () => { location.assign("/ui/login"); });
    $("logout").addEventListener("click", async () => {
      try { await fetch("/ui/logout", { method: "POST", cache: "no-store", signal: AbortSignal.timeout(API_TIMEOUT_MS) }); } catch { /* the cookie is cleared or ends with its token */ }
      needToken("Logged out.");
    });
    $("login").addEventListener("submit", (ev) => {
      ev.preventDefault();
      token = $("token").value.trim();
      $("token").value = "";
      if (token) sessionStorage.setItem(TOKEN_KEY, token);
      begin();
    });
    document.addEventListener("visibilitychange", () => { if (!document.hidden && started) refresh(); });
    setInterval(() => { for (const r of rows.values()) if (r.status) renderTimes(r); }, 1000);
    let wants = false;
    try {
      const st = await (await fetch("/ui/auth.json", { cache: "no-store" })).json();
      wants = st.token; canLogin = !!st.login; session = !!st.session;
    } catch { /* ask the API */ }
    if (wants && !token && !session) needToken("");
    else begin();
  });
})();
