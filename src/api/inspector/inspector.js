// The inspector: every character with its model session and its tools, a "try it" form per
// tool, the MCP servers that give tools (configured, and registered by plugins at run time), and
// a live feed of the server's change events.
//
// It uses only the public HTTP API: GET /api/tools?detail=full, GET /api/sessions and
// GET /api/mcp for the state, GET /api/tools/search for each character's search box, GET /api/calls for each tool's recent calls (its latency and
// error rate, kept up to date by the tool.call events), GET /api/events (Server-Sent Events) for
// changes, POST /api/tools/invoke for calls, GET /api/approvals and POST /api/approvals/{id} for
// the calls that wait for a person's decision.
// Deciding is the person's: the page decides with the operator token it was opened with (the
// address the server printed, `/#token=...`), which it keeps for the tab only and sends in the
// Authorization header of each decision, never in a URL. Opened without it, it shows the calls
// that wait but cannot decide them (unless the server lets any local caller decide).
// Every string from the server is inserted with textContent: tool names, descriptions and
// schemas come from plugins.

import { ArgumentError, argumentsEditor, freshId, numberOf, parseExact } from "./schema-form.js";

/** The feed keeps this many events; older ones are dropped from the page. */
const FEED_LIMIT = 200;

/** After the browser gives up on the event stream (an answer that is not a stream), wait this
 * long before starting over. */
const RESTART_DELAY_MS = 3000;

const $ = (id) => document.getElementById(id);

/** Characters by name: their section, session box, tool list and tools by name. */
const characters = new Map();
/** Each character's last session report (GET /api/sessions). */
const sessions = new Map();
/** The server instance the page last saw (`hello`), to tell a restart. */
let instanceId = null;
/** Each MCP server's source, and its name: what runs the tools of that source. */
const mcpSources = new Map();
/** The last tool listing, drawn again when the MCP servers change (where a tool runs). */
let lastTools = null;
/** Each tool's recent calls (`role\u0000tool` → newest last), for its latency and error rate. */
const recentCalls = new Map();

/** The calls of a tool its latency is computed over: the last few dozen, so it follows change. */
const LATENCY_WINDOW = 50;

/** The histogram's bins, upper bounds in milliseconds (the last is everything longer). */
const LATENCY_BINS = [[1, "< 1 ms"], [10, "< 10 ms"], [100, "< 100 ms"], [1000, "< 1 s"], [10000, "< 10 s"], [Infinity, "≥ 10 s"]];

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// ---- Talking to the API -------------------------------------------------------------------

/** The text of an error answer: `detail` as text, or each message of a 422. */
function detailText(body, status) {
  const detail = body && body.detail;
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    return detail.map((d) => `${(d.loc ?? []).join(".")}: ${d.msg}`).join("; ");
  }
  return `HTTP ${status}`;
}

/** Fetches JSON; resolves to [status, body]. With `exact`, numbers keep their digits (a tool's
 * output, a schema) and read through numberOf. */
async function fetchJson(path, options, exact) {
  const response = await fetch(path, { ...options, headers: { accept: "application/json", ...options?.headers } });
  const text = await response.text();
  let body = null;
  try {
    body = exact ? parseExact(text) : JSON.parse(text);
  } catch {
    body = { detail: text };
  }
  return [response.status, body];
}

async function getJson(path, exact) {
  const [status, body] = await fetchJson(path, {}, exact);
  if (status !== 200) throw new Error(`GET ${path}: ${detailText(body, status)}`);
  return body;
}

function showProblem(text) {
  const problem = $("problem");
  problem.textContent = text;
  problem.hidden = !text;
}

/** A loader that never runs twice at once: a call while one runs makes it run once more after. */
function coalesced(load) {
  let running = false;
  let again = false;
  return async () => {
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      do {
        again = false;
        try {
          await load();
          showProblem("");
        } catch (e) {
          showProblem(`Could not read the server's state: ${e.message}`);
        }
      } while (again);
    } finally {
      running = false;
    }
  };
}

const refreshTools = coalesced(async () => {
  const body = await getJson("/api/tools?detail=full", true);
  lastTools = body.tools_by_role ?? {};
  renderCharacters(lastTools);
});

const refreshMcp = coalesced(async () => {
  const body = await getJson("/api/mcp");
  renderMcp(body.mcp_servers ?? {}, body.runtime_mcp_servers ?? {});
  if (lastTools) renderCharacters(lastTools);
});

const refreshSessions = coalesced(async () => {
  const body = await getJson("/api/sessions");
  sessions.clear();
  for (const [role, report] of Object.entries(body.sessions_by_role ?? {})) {
    sessions.set(role, report);
  }
  for (const [role, character] of characters) renderSession(character.session, sessions.get(role));
});

// ---- The operator token -------------------------------------------------------------------

/** Where the page keeps the operator token: the tab's own storage (sessionStorage), which
 * outlives a reload and ends with the tab. */
const TOKEN_KEY = "runtime-tools.operator-token";

/** How to give the page the token, for a page that cannot decide. */
const HOW_TO_DECIDE =
  "To decide here, open the inspector at the address the server printed when it started, on its " +
  "line that begins with \"inspector:\" and ends in \"/#token=…\" (with [security] " +
  "operator_token_env set, add #token= and that variable's value to this page's address).";

/** Moves a token given in the address (`#token=...`) into the tab's storage, and out of the
 * address bar and the tab's history (the fragment never reaches a server, but a copied address
 * or a screen share would show it); whether one was given. */
function takeTokenFromAddress() {
  const given = /^#token=(.*)$/s.exec(location.hash);
  if (!given) return false;
  history.replaceState(history.state, "", location.pathname + location.search);
  let token = given[1];
  try {
    token = decodeURIComponent(token);
  } catch {
    // Not percent-encoded: kept as written.
  }
  if (!token) return false;
  sessionStorage.setItem(TOKEN_KEY, token);
  return true;
}

takeTokenFromAddress();
addEventListener("hashchange", () => {
  if (takeTokenFromAddress()) refreshDeciding();
});

/** How the page may decide: "token" (with the operator token), "open" (the server lets any
 * local caller decide: `[security] decisions = "loopback"`) or "read-only". */
let deciding = "read-only";

function setDeciding(how, why) {
  deciding = how;
  const note = $("approvals-read-only");
  note.textContent = how === "read-only" ? `${why} ${HOW_TO_DECIDE}` : "";
  note.hidden = how !== "read-only";
  for (const entry of approvals.values()) showActions(entry);
}

/** Whether the page may decide. With a token it may (the server says otherwise when a decision
 * is refused). Without one it may only when the server lets any local caller decide, which
 * `GET /api/health` says (`decisions`). */
const refreshDeciding = coalesced(async () => {
  if (sessionStorage.getItem(TOKEN_KEY)) {
    setDeciding("token");
    return;
  }
  const health = await getJson("/api/health");
  if (health.decisions === "loopback") {
    setDeciding("open");
  } else {
    setDeciding(
      "read-only",
      "Read-only: this page was opened without the operator token, which deciding an approval needs.",
    );
  }
});

// ---- Approvals ----------------------------------------------------------------------------

/** The pending approvals shown, by id: their record, list item and decision controls, and the
 * count of approval events when it was shown. */
const approvals = new Map();

/** Approval events seen so far: a list read before an event must not undo it. */
let approvalEvents = 0;

/** The approvals an event resolved, by id, with the count of approval events then: a list read
 * before that must not show them again. Forgotten once a list read after it is in. */
const resolvedApprovals = new Map();

const refreshApprovals = coalesced(async () => {
  const since = approvalEvents;
  const body = await getJson("/api/approvals");
  const listed = new Set();
  for (const record of body.approvals ?? []) {
    listed.add(record.id);
    if ((resolvedApprovals.get(record.id) ?? -1) <= since) showApproval(record);
  }
  for (const [id, entry] of [...approvals]) {
    // One an event showed while the list was being read is not in it yet.
    if (!listed.has(id) && entry.shownAt <= since) dropApproval(id);
  }
  for (const [id, at] of [...resolvedApprovals]) {
    if (at <= since) resolvedApprovals.delete(id);
  }
});

/** Seconds left before `record` expires, never below 0. */
function secondsLeft(record) {
  const left = (Date.parse(record.expires_at) - Date.now()) / 1000;
  return Math.max(0, Math.ceil(left));
}

function showApproval(record) {
  if (approvals.has(record.id)) return;
  const item = element("li", "approval");
  item.dataset.id = record.id;
  item.append(element("h3", null, `${record.role} · ${record.tool}`));
  const by = record.kind ? kindName(record.kind) : record.caller === "mcp" ? "an MCP client (/mcp)" : record.caller;
  item.append(element("p", "muted", `called by ${by} · call ${record.call_id}`));
  item.append(element("pre", "approval-arguments", JSON.stringify(record.arguments, null, 2)));
  const left = element("p", "approval-left");
  item.append(left);
  const reason = element("input", "approval-reason");
  reason.type = "text";
  reason.maxLength = 1024;
  reason.placeholder = "Reason (optional; told to the model on a denial)";
  reason.setAttribute("aria-label", `Reason for ${record.tool}`);
  const approve = element("button", "approve", "Approve");
  const deny = element("button", "deny", "Deny");
  for (const button of [approve, deny]) button.type = "button";
  const problem = element("p", "approval-problem");
  problem.hidden = true;
  const decide = async (decision) => {
    approve.disabled = deny.disabled = true;
    const body = { decision };
    if (reason.value) body.reason = reason.value;
    const headers = { "content-type": "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.authorization = `Bearer ${token}`;
    const [status, answer] = await fetchJson(`/api/approvals/${encodeURIComponent(record.id)}`, {
      method: "POST",
      headers,
      body: JSON.stringify(body),
    });
    if (status === 401 || status === 403) {
      // The token is not (or no longer: a restarted server makes a new one) the operator's, or
      // the server now wants one: the page cannot decide until it is given the right one.
      sessionStorage.removeItem(TOKEN_KEY);
      problem.textContent = `Not decided: the server refused it (${detailText(answer, status)}).`;
      problem.hidden = false;
      setDeciding(
        "read-only",
        token
          ? "Read-only: the server refused this page's token: it is not the operator token (a server that restarted made a new one)."
          : "Read-only: the server now needs the operator token to decide.",
      );
    } else if (status !== 200) {
      problem.textContent = detailText(answer, status);
      problem.hidden = false;
      approve.disabled = deny.disabled = false;
    }
  };
  approve.addEventListener("click", () => decide("approve"));
  deny.addEventListener("click", () => decide("deny"));
  const actions = element("div", "approval-actions");
  actions.append(reason, approve, deny);
  item.append(problem);
  const entry = { record, item, left, actions, problem, buttons: [approve, deny], shownAt: approvalEvents };
  showActions(entry);
  approvals.set(record.id, entry);
  tickApproval(entry);
  $("approvals").append(item);
  $("approvals-empty").hidden = true;
}

/** Gives an approval its reason field and Approve / Deny buttons while the page may decide,
 * and takes them away while it may not. */
function showActions(entry) {
  if (deciding === "read-only") {
    entry.actions.remove();
  } else if (!entry.actions.isConnected) {
    for (const button of entry.buttons) button.disabled = false;
    entry.problem.hidden = true;
    entry.item.insertBefore(entry.actions, entry.problem);
  }
}

function tickApproval(entry) {
  const left = secondsLeft(entry.record);
  entry.left.textContent = `${left} s left to decide`;
}

function dropApproval(id) {
  const entry = approvals.get(id);
  if (!entry) return;
  entry.item.remove();
  approvals.delete(id);
  $("approvals-empty").hidden = approvals.size > 0;
}

setInterval(() => {
  for (const entry of approvals.values()) tickApproval(entry);
}, 1000);

/** Reads everything again: on (re)connecting, after a restart, after missed events. */
function startOver() {
  refreshDeciding();
  refreshApprovals();
  refreshCalls();
  refreshTools();
  refreshSessions();
  refreshMcp();
}

// ---- Characters and tools -----------------------------------------------------------------

/** Puts `nodes` into `parent` in this order, moving only what is out of place (a moved node
 * would lose the keyboard focus). */
function placeInOrder(parent, nodes) {
  let cursor = parent.firstChild;
  for (const node of nodes) {
    if (node === cursor) {
      cursor = cursor.nextSibling;
    } else {
      parent.insertBefore(node, cursor);
    }
  }
  while (cursor) {
    const next = cursor.nextSibling;
    cursor.remove();
    cursor = next;
  }
}

function renderCharacters(toolsByRole) {
  const seen = new Set();
  const sections = [];
  for (const [role, tools] of Object.entries(toolsByRole)) {
    seen.add(role);
    let character = characters.get(role);
    if (!character) {
      character = characterSection(role);
      characters.set(role, character);
      renderSession(character.session, sessions.get(role));
    }
    renderTools(character, Array.isArray(tools) ? tools : []);
    sections.push(character.section);
  }
  for (const role of [...characters.keys()]) {
    if (!seen.has(role)) characters.delete(role);
  }
  placeInOrder($("characters"), sections);
  $("characters-empty").hidden = sections.length > 0;
}

function characterSection(role) {
  const section = element("section", "character");
  section.dataset.role = role;
  const heading = element("h3", null, role);
  heading.id = freshId("character");
  section.setAttribute("aria-labelledby", heading.id);
  const count = element("span", "count");
  const head = element("div", "character-head");
  head.append(heading, count);
  const session = element("div", "session");
  const list = element("ul", "tools");
  const empty = element("p", "muted", "No tools registered.");
  section.append(head, session, searchBox(role), list, empty);
  return { role, section, session, list, empty, count, tools: new Map() };
}

// ---- Searching a character's tools ---------------------------------------------------------

/** Most tools a search shows. */
const SEARCH_LIMIT = 10;

/** A search box over one character's tools: asks GET /api/tools/search and lists what it finds,
 * best first, with each tool's score. */
function searchBox(role) {
  const form = element("form", "tool-search");
  form.setAttribute("role", "search");
  const input = element("input");
  input.type = "search";
  input.maxLength = 512;
  input.placeholder = "Search these tools: what should a tool do?";
  input.setAttribute("aria-label", `Search ${role}'s tools`);
  const button = element("button", "quiet", "Search");
  button.type = "submit";
  const problem = element("p", "search-problem");
  problem.hidden = true;
  const results = element("ol", "search-results");
  results.hidden = true;
  results.setAttribute("aria-live", "polite");
  form.append(input, button);
  const box = element("div", "search-box");
  box.append(form, problem, results);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const query = input.value.trim();
    if (!query) return;
    const params = new URLSearchParams({ role, q: query, limit: String(SEARCH_LIMIT) });
    const [status, body] = await fetchJson(`/api/tools/search?${params}`);
    if (status !== 200) {
      problem.textContent = detailText(body, status);
      problem.hidden = false;
      results.hidden = true;
      return;
    }
    problem.hidden = true;
    showResults(results, body.tools ?? []);
  });
  return box;
}

function showResults(results, tools) {
  const items = tools.map((tool) => {
    const item = element("li", "search-result");
    item.dataset.tool = tool.name;
    const name = element("code", null, tool.name);
    const score = element("span", "score", `score ${Number(tool.score).toFixed(3)}`);
    item.append(name, " ", score);
    if (tool.description) item.append(element("p", "description", tool.description));
    return item;
  });
  if (!items.length) items.push(element("li", "search-none muted", "No tool matches."));
  results.replaceChildren(...items);
  results.dataset.count = String(tools.length);
  results.hidden = false;
}

function renderTools(character, tools) {
  const items = [];
  const seen = new Set();
  for (const tool of tools) {
    const signature = JSON.stringify([tool, runsAt(tool)]);
    let entry = character.tools.get(tool.name);
    if (!entry || entry.signature !== signature) {
      // A new or changed definition gets a new card (and a form for its current schema).
      entry = { signature, item: toolCard(character.role, tool) };
      character.tools.set(tool.name, entry);
    }
    seen.add(tool.name);
    items.push(entry.item);
  }
  for (const name of [...character.tools.keys()]) {
    if (!seen.has(name)) character.tools.delete(name);
  }
  placeInOrder(character.list, items);
  character.empty.hidden = items.length > 0;
  character.count.textContent = `${items.length} tool${items.length === 1 ? "" : "s"}`;
}

/** Where a tool runs: its callback URL, an MCP server, or inside the server's process. */
function runsAt(tool) {
  if (typeof tool.callback_url === "string") return ["callback", tool.callback_url];
  const server = mcpSources.get(tool.source);
  if (server !== undefined) return ["runs on", `MCP server ${server}`];
  if (typeof tool.source === "string" && tool.source.startsWith("mcp:")) {
    return ["runs on", `MCP server ${tool.source.slice(4)}`];
  }
  return ["runs", "in-process"];
}

function definitionList(className, pairs) {
  const dl = element("dl", className);
  for (const [term, value] of pairs) {
    const dd = element("dd");
    if (value instanceof Node) dd.append(value);
    else dd.textContent = value;
    const pair = element("div");
    pair.append(element("dt", null, term), dd);
    dl.append(pair);
  }
  return dl;
}

// ---- Latency ------------------------------------------------------------------------------

const callKey = (role, tool) => `${role}\u0000${tool}`;

/** Reads the recent calls again (at start, and whenever the page starts over). */
async function refreshCalls() {
  const [status, body] = await fetchJson("/api/calls?limit=1000");
  if (status !== 200 || !Array.isArray(body?.calls)) return;
  recentCalls.clear();
  // The listing is newest first; each tool keeps its calls oldest first.
  for (const call of body.calls.slice().reverse()) noteCall(call);
  for (const character of characters.values()) {
    for (const [name, entry] of character.tools) renderLatency(entry.item, character.role, name);
  }
}

/** Keeps one finished call (from the listing or a tool.call event). */
function noteCall(call) {
  const key = callKey(call.role, call.tool);
  const calls = recentCalls.get(key) ?? [];
  // Counted from the outcome alone, as the recent calls have no more: a model's repeat
  // (`deduplicated`) reached no plugin, so it is not one of the tool's failures (its first call
  // is counted as it ended); a call held back by the tool's limits (`busy`, `rate_limited`) is.
  const error = !["ok", "deduplicated"].includes(call.outcome);
  calls.push({ ms: Number(call.duration_ms), error });
  if (calls.length > LATENCY_WINDOW) calls.shift();
  recentCalls.set(key, calls);
}

/** The value below which `share` of the sorted `values` lie (nearest rank). */
function percentile(sorted, share) {
  return sorted[Math.min(sorted.length - 1, Math.ceil(share * sorted.length) - 1)];
}

/** Draws a tool's latency beside it: p50, p95, its error rate, and a small histogram. */
function renderLatency(item, role, tool) {
  const box = item.querySelector(".latency");
  if (!box) return;
  const calls = recentCalls.get(callKey(role, tool)) ?? [];
  box.dataset.calls = String(calls.length);
  if (!calls.length) {
    box.replaceChildren(element("span", "muted", "No calls yet."));
    return;
  }
  const sorted = calls.map((c) => c.ms).sort((a, b) => a - b);
  const errors = calls.filter((c) => c.error).length;
  const rate = Math.round((100 * errors) / calls.length);
  const facts = element("span", "latency-facts");
  const p50 = element("span", "p50", `p50 ${formatMs(percentile(sorted, 0.5))}`);
  const p95 = element("span", "p95", `p95 ${formatMs(percentile(sorted, 0.95))}`);
  const failed = element("span", errors ? "error-rate bad" : "error-rate", `errors ${errors}/${calls.length} (${rate}%)`);
  facts.append(p50, " · ", p95, " · ", failed);
  box.replaceChildren(facts, histogram(sorted));
}

/** A bar per latency bin (a log scale), its height (one of eight steps, in the style sheet)
 * the share of calls in it. */
function histogram(sorted) {
  const counts = LATENCY_BINS.map(() => 0);
  for (const ms of sorted) counts[LATENCY_BINS.findIndex(([upper]) => ms < upper)] += 1;
  const most = Math.max(...counts);
  const bars = element("span", "histogram");
  bars.setAttribute("role", "img");
  const summary = LATENCY_BINS.map(([, label], i) => `${label}: ${counts[i]}`).join(", ");
  bars.setAttribute("aria-label", `Latency of the last ${sorted.length} calls: ${summary}`);
  LATENCY_BINS.forEach(([, label], i) => {
    const bar = element("span", "bar");
    bar.dataset.bin = label;
    bar.dataset.count = String(counts[i]);
    bar.dataset.level = String(counts[i] ? Math.max(1, Math.round((8 * counts[i]) / most)) : 0);
    bar.title = `${label}: ${counts[i]}`;
    bars.append(bar);
  });
  return bars;
}

function toolCard(role, tool) {
  const item = element("li", "tool");
  item.dataset.tool = tool.name;
  const article = element("article");
  const heading = element("h4", "tool-name");
  heading.append(element("code", null, tool.name));
  heading.id = freshId("tool");
  article.setAttribute("aria-labelledby", heading.id);
  article.append(heading);
  if (tool.description) article.append(element("p", "description", tool.description));
  const meta = [["source", element("code", null, String(tool.source ?? ""))], runsAt(tool)];
  const timeout = numberOf(tool.timeout_seconds);
  if (!Number.isNaN(timeout)) meta.push(["timeout", `${timeout} s`]);
  // A non-blocking tool: a live model is answered at once, its result follows.
  if (tool.behavior === "non_blocking") meta.push(["behavior", "non-blocking: the talk goes on while it runs"]);
  meta.push(...limitsOf(tool));
  article.append(definitionList("meta", meta));
  const latency = element("div", "latency");
  latency.setAttribute("aria-label", `Latency and errors of ${tool.name}`);
  article.append(latency);

  const schema = element("details", "schema");
  schema.append(element("summary", null, "Parameters schema"));
  schema.append(element("pre", "json", JSON.stringify(tool.parameters ?? {}, null, 2)));
  article.append(schema);
  article.append(tryItForm(role, tool));
  item.append(article);
  renderLatency(item, role, tool.name);
  return item;
}

/** A tool's own limits, as lines of its card: how many calls at once, its rate, repeats. */
function limitsOf(tool) {
  const lines = [];
  const most = numberOf(tool.max_concurrent);
  if (!Number.isNaN(most)) {
    lines.push(["at once", most === 1 ? "one call at a time; others wait their turn" : `at most ${most} calls; others wait their turn`]);
  }
  if (tool.rate) {
    const calls = numberOf(tool.rate.calls);
    lines.push(["rate", `at most ${calls} ${calls === 1 ? "call" : "calls"} per ${numberOf(tool.rate.per_seconds)} s`]);
  }
  const dedupe = numberOf(tool.dedupe_seconds);
  if (dedupe > 0) lines.push(["repeats", `a model's repeat within ${dedupe} s gets the first call's result`]);
  return lines;
}

// ---- Try it -------------------------------------------------------------------------------

function tryItForm(role, tool) {
  const details = element("details", "try");
  details.append(element("summary", null, "Try it"));
  const form = element("form");
  const editor = argumentsEditor(tool.parameters ?? {});
  const call = element("button", "primary", `Call ${tool.name}`);
  call.type = "submit";
  const result = element("div", "result");
  result.setAttribute("aria-live", "polite");
  form.append(editor.element, call);
  details.append(form, result);

  let busy = false;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (busy) return;
    let args;
    try {
      args = editor.read();
    } catch (e) {
      if (!(e instanceof ArgumentError)) throw e;
      showResultProblem(result, e.message);
      e.element?.focus();
      return;
    }
    busy = true;
    form.setAttribute("aria-busy", "true");
    result.replaceChildren(element("p", "muted", `Calling ${tool.name}…`));
    const started = performance.now();
    try {
      const [status, body] = await fetchJson("/api/tools/invoke", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name: tool.name, role, arguments: args }),
      }, true);
      const elapsed = performance.now() - started;
      if (status === 200) showResult(result, body, elapsed);
      else showResultProblem(result, `HTTP ${status}: ${detailText(body, status)}`);
    } catch (e) {
      showResultProblem(result, `The call did not reach the server: ${e.message}`);
    } finally {
      busy = false;
      form.removeAttribute("aria-busy");
    }
  });
  return details;
}

function showResultProblem(result, text) {
  result.removeAttribute("data-call-id");
  result.dataset.outcome = "problem";
  result.replaceChildren(element("p", "error-text", text));
}

/** The result as the model gets it: output, error text, images, and how long it took. */
function showResult(result, body, elapsedMs) {
  const isError = body.is_error === true;
  result.dataset.outcome = isError ? "error" : "ok";
  result.dataset.callId = String(body.call_id ?? "");
  const head = element("p", "result-head");
  head.append(
    element("span", `badge ${isError ? "bad" : "good"}`, isError ? "error" : "ok"),
    " ",
    element("code", null, String(body.call_id ?? "")),
    ` · ${formatMs(elapsedMs)}`,
  );
  const parts = [head];
  if (isError) parts.push(element("p", "error-text", String(body.error ?? "")));
  if (!(isError && body.output === null)) {
    const label = element("p", "label", "output");
    parts.push(label, element("pre", "json output", JSON.stringify(body.output, null, 2)));
  }
  const images = Array.isArray(body.images) ? body.images : [];
  if (images.length > 0) {
    const box = element("div", "images");
    images.forEach((image, i) => box.append(imageFigure(image, i)));
    parts.push(box);
  }
  const warnings = Array.isArray(body.image_warnings) ? body.image_warnings : [];
  if (warnings.length > 0) {
    const list = element("ul", "warnings");
    warnings.forEach((w) => list.append(element("li", null, String(w))));
    parts.push(list);
  }
  result.replaceChildren(...parts);
}

/** Only these types are shown inline; anything else is described, not rendered. */
const IMAGE_TYPES = ["image/png", "image/jpeg"];

function imageFigure(image, index) {
  const figure = element("figure");
  const mime = String(image.mime ?? "");
  const size = `${image.width ?? "?"}×${image.height ?? "?"}`;
  const prompt = typeof image.vision_prompt === "string" ? image.vision_prompt : "";
  if (IMAGE_TYPES.includes(mime) && typeof image.data_b64 === "string") {
    const img = element("img");
    img.src = `data:${mime};base64,${image.data_b64}`;
    img.alt = prompt ? `image ${index + 1}: ${prompt}` : `image ${index + 1} returned by the tool`;
    figure.append(img);
  }
  figure.append(element("figcaption", null, `${mime} ${size}${prompt ? ` · ${prompt}` : ""}`));
  return figure;
}

function formatMs(ms) {
  return ms < 10 ? `${ms.toFixed(1)} ms` : `${Math.round(ms)} ms`;
}

// ---- Sessions -----------------------------------------------------------------------------

/** A session field's value as text; objects the page does not know are shown as JSON. */
function formatValue(key, value) {
  if (value === null || value === undefined) return "—";
  if (key === "last_sync" && typeof value === "object" && "ok" in value) {
    const when = value.at ? ` at ${formatTime(value.at)}` : "";
    return value.ok ? `ok${when}` : `failed${when}: ${value.error ?? ""}`;
  }
  if (key === "since" || key === "at") return formatTime(value);
  if (key === "gemini" && typeof value === "object") {
    // A Gemini Live session: new tools come on a new connection resumed from its handle.
    const age = value.handle_age_ms === null ? "no handle yet" : `handle ${formatMs(value.handle_age_ms)} old`;
    return `Gemini Live · ${age} · ${value.switches} moves to a new connection · ${value.refused} refused`;
  }
  if (key === "running_calls" && Array.isArray(value)) {
    if (!value.length) return "none";
    return value
      .map((c) => `${c.tool} (${c.call_id}) · ${c.behavior === "non_blocking" ? "non-blocking" : "blocking"} · ${formatMs(Number(c.running_ms))}`)
      .join("; ");
  }
  if (key === "conversation") return String(value).replaceAll("_", " ");
  if (Array.isArray(value) && value.every((v) => typeof v !== "object")) {
    return value.length ? value.join(", ") : "none";
  }
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function formatTime(text) {
  const date = new Date(text);
  return Number.isNaN(date.getTime()) ? String(text) : date.toLocaleTimeString();
}

const label = (key) => key.replaceAll("_", " ");

/** How each kind of connection reads; a kind the page does not know reads as itself. */
const KIND_NAMES = {
  client: "own connection",
  relay: "relay",
  attach: "attached call",
  embedded: "in-process",
};

const kindName = (kind) => KIND_NAMES[kind] ?? String(kind ?? "connection");

/** A state as a badge whose colour follows the state. */
function stateBadge(state) {
  const badge = element("span", "badge state", String(state ?? "unknown"));
  badge.dataset.state = String(state ?? "");
  return badge;
}

/** The session of a character: its state, and every connection the listing carries (the
 * server's own, apps' relays, attached calls, in-process sessions), each headed by its kind and
 * state, then whatever other fields it has (the listing may grow new kinds and fields). */
function renderSession(box, report) {
  if (!report) {
    box.replaceChildren();
    return;
  }
  const pairs = [["session", stateBadge(report.state)]];
  for (const [key, value] of Object.entries(report)) {
    if (key === "state" || key === "connections" || key === "chat") continue;
    pairs.push([label(key), formatValue(key, value)]);
  }
  const parts = [definitionList("session-facts", pairs)];
  if (report.chat && typeof report.chat === "object") parts.push(renderChat(report.chat));
  const connections = Array.isArray(report.connections) ? report.connections : [];
  if (connections.length > 0) {
    const list = element("ul", "connections");
    list.setAttribute("aria-label", "connections");
    for (const connection of connections) {
      const item = element("li", "connection");
      item.dataset.kind = String(connection?.kind ?? "");
      const head = element("div", "connection-head");
      head.append(element("span", "kind", kindName(connection?.kind)), " ", stateBadge(connection?.state));
      const entries = Object.entries(connection ?? {}).filter(([key]) => key !== "kind" && key !== "state");
      item.append(
        head,
        definitionList(
          "connection-facts",
          entries.map(([key, value]) => [label(key), formatValue(key, value)]),
        ),
      );
      list.append(item);
    }
    parts.push(list);
  }
  box.replaceChildren(...parts);
}

/** A character's text chat endpoint: its upstream and what its requests did. A model that
 * refused tools and the last failure stand out. */
function renderChat(chat) {
  const box = element("div", "chat");
  const head = element("div", "connection-head");
  const refused = Array.isArray(chat.tools_refused) ? chat.tools_refused : [];
  const state = chat.last_error ? "failed" : "ready";
  const badge = stateBadge(state);
  head.append(element("span", "kind", "text chat"), " ", badge);
  const facts = [];
  for (const [key, value] of Object.entries(chat)) {
    if (key === "last_error") {
      const text = value ? `${value.message} (at ${formatTime(value.at)})` : "none";
      facts.push(["last error", text]);
    } else if (key === "tools_refused") {
      const text = refused.length
        ? refused.map((r) => `${r.model}: ${r.error}`).join("; ")
        : "none";
      facts.push(["tools refused by", text]);
    } else {
      facts.push([label(key), formatValue(key, value)]);
    }
  }
  box.append(head, definitionList("chat-facts", facts));
  return box;
}

// ---- MCP servers --------------------------------------------------------------------------

const mcpOrigin = (kind) => (kind === "runtime" ? "registered by a plugin" : "configured");

/** Every MCP server: the configured ones, then those plugins registered at run time. */
function renderMcp(configured, runtime) {
  mcpSources.clear();
  const items = [];
  for (const [name, report] of Object.entries(configured)) items.push(mcpServer(name, "configured", report));
  for (const [name, report] of Object.entries(runtime)) items.push(mcpServer(name, "runtime", report));
  $("mcp-servers").replaceChildren(...items);
  $("mcp-empty").hidden = items.length > 0;
}

/** One MCP server: its name, where it comes from and its state, then every other field the
 * listing gives for it. */
function mcpServer(name, kind, report) {
  if (typeof report?.source === "string") mcpSources.set(report.source, name);
  const item = element("li", "mcp-server");
  item.dataset.name = name;
  item.dataset.kind = kind;
  const head = element("div", "connection-head");
  head.append(element("span", "kind", name), " ", element("span", "muted", mcpOrigin(kind)), " ", stateBadge(report?.state));
  const facts = [];
  for (const [key, value] of Object.entries(report ?? {})) {
    if (key === "state") continue;
    if (key === "skipped") {
      const skipped = Array.isArray(value) ? value : [];
      facts.push(["skipped", skipped.length ? skipped.map((s) => `${s.name}: ${s.reason}`).join("; ") : "none"]);
    } else if (key === "registered_at") {
      facts.push(["registered at", formatTime(value)]);
    } else {
      facts.push([label(key), formatValue(key, value)]);
    }
  }
  item.append(head, definitionList("mcp-facts", facts));
  return item;
}

// ---- The live feed ------------------------------------------------------------------------

function roles(list) {
  return Array.isArray(list) && list.length ? list.join(", ") : "no character";
}

function failures(list) {
  if (!Array.isArray(list) || list.length === 0) return "";
  return `; failed for ${list.map((f) => `${f.role} (${f.error})`).join(", ")}`;
}

/** One line of the feed. `flag` marks what must stand out: an automatic removal, a failed
 * call. */
function addFeed(kind, text, flag) {
  const item = element("li", "event");
  item.dataset.kind = kind;
  if (flag) item.dataset.flag = flag;
  const time = element("time", null, new Date().toLocaleTimeString());
  time.dateTime = new Date().toISOString();
  item.append(time, " ", element("span", "kind", flag === "auto-removed" ? "auto-removed" : kind), " ");
  item.append(element("span", "text", text));
  const feed = $("feed");
  feed.prepend(item);
  while (feed.children.length > FEED_LIMIT) feed.lastElementChild.remove();
  $("feed-empty").hidden = true;
}

function toolsChangedText(data) {
  const done = roles(data.affected_roles);
  const failed = failures(data.failed_roles);
  switch (data.op) {
    case "register":
      return `registered ${data.name} (${data.source}) for ${done}${failed}`;
    case "unregister":
      return `unregistered ${data.name} from ${done}${failed}`;
    case "clear":
      return `cleared the tools of ${data.source} from ${done}${failed}`;
    case "auto_removed":
      return `tools of ${data.source} from ${done}: its callback stopped accepting connections${failed}`;
    case "mcp":
      return `the tools of ${data.source} changed for ${done}${failed}`;
    default:
      return `tools changed (${data.op}) for ${done}${failed}`;
  }
}

function onHello(data) {
  const started = data.started_at ? `, started ${formatTime(data.started_at)}` : "";
  if (instanceId !== null && data.instance_id !== instanceId) {
    addFeed("hello", `the server restarted (instance ${data.instance_id}${started}): everything was read again`);
  } else {
    addFeed("hello", `connected to the server (instance ${data.instance_id}${started})`);
  }
  instanceId = data.instance_id;
  // Whatever happened while the page was away, the state is read again after subscribing, so
  // no change can fall between the two.
  startOver();
}

const handlers = {
  hello: onHello,
  reset: () => {
    addFeed("reset", "some events were missed (the server no longer holds them): everything was read again");
    startOver();
  },
  "tools.changed": (data) => {
    addFeed("tools.changed", toolsChangedText(data), data.op === "auto_removed" ? "auto-removed" : null);
    refreshTools();
  },
  "session.state": (data) => {
    const who = data.kind ? `${kindName(data.kind)} ` : "";
    const facts = [`${data.role}: ${who}${data.state}`];
    if (data.last_sync) facts.push(`last sync ${formatValue("last_sync", data.last_sync)}`);
    const acknowledged = data.acknowledged_tools;
    if (typeof acknowledged === "number") {
      facts.push(`${acknowledged} tool${acknowledged === 1 ? "" : "s"} acknowledged`);
    }
    addFeed("session.state", facts.join(" · "));
    refreshSessions();
  },
  "tool.call": (data) => {
    // A non-blocking call's running answer leaves it running: the listing shows it.
    if (data.behavior === "non_blocking") refreshSessions();
    const by =
      data.kind === "chat" ? "text chat"
      : data.kind ? kindName(data.kind)
      : data.caller === "mcp" ? "an MCP client (/mcp)"
      : data.caller;
    const ran = formatMs(Number(data.duration_ms));
    // A cancelled call (the person interrupted, or its caller went away) says how long it ran.
    // What held a call back (its tool's limits) is named; a repeat names the call it repeats.
    const held = { busy: "busy", rate_limited: "rate limited" };
    const outcome = data.cancelled
      ? `cancelled after ${ran}`
      : data.outcome === "deduplicated"
        ? `${ran} · repeat of ${data.first_call_id} · ${data.is_error ? "error" : "ok"}`
        : `${ran} · ${held[data.outcome] ?? (data.is_error ? "error" : "ok")}`;
    const flag = data.cancelled ? "cancelled" : data.is_error ? "error" : null;
    addFeed("tool.call", `${data.role} · ${data.tool} · called by ${by} · ${outcome}`, flag);
    noteCall(data);
    const entry = characters.get(data.role)?.tools.get(data.tool);
    if (entry) renderLatency(entry.item, data.role, data.tool);
    // A chat keeps no connection: its counters move with its calls.
    if (data.kind === "chat") refreshSessions();
  },
  "tool.result": (data) => {
    // A non-blocking call's result reached its model.
    const spoken = { when_idle: "spoken of when idle", silent: "told silently", interrupt: "interrupting" };
    const how = spoken[data.scheduling] ?? String(data.scheduling);
    addFeed("tool.result", `${data.role} · ${data.tool} · result delivered (${how}) · ${data.is_error ? "error" : "ok"}`, data.is_error ? "error" : null);
    refreshSessions();
  },
  "tool.progress": (data) => {
    const told = data.delivered ? "the model was told" : "shown here only";
    addFeed("tool.progress", `${data.role} · ${data.tool} · ${data.message} (${told})`);
    refreshSessions();
  },
  "approval.requested": (data) => {
    approvalEvents += 1;
    addFeed("approval.requested", `${data.role} · ${data.tool} · waits for your approval`);
    showApproval(data);
  },
  "approval.resolved": (data) => {
    approvalEvents += 1;
    resolvedApprovals.set(data.id, approvalEvents);
    dropApproval(data.id);
    const reason = data.reason ? ` (${data.reason})` : "";
    const flag = data.outcome === "approved" ? null : data.outcome === "denied" ? "error" : "cancelled";
    addFeed("approval.resolved", `${data.role} · ${data.tool} · ${data.outcome}${reason}`, flag);
  },
  "mcp.state": (data) => {
    const who = `MCP server ${data.name} (${mcpOrigin(data.kind)})`;
    if (data.state === "removed") {
      const reason = String(data.reason ?? "");
      addFeed("mcp.state", `${who} removed: ${reason}`, reason.startsWith("auto_removed") ? "auto-removed" : null);
    } else {
      const facts = [`${who}: ${data.state}`];
      if (Array.isArray(data.tools)) facts.push(`${data.tools.length} tool${data.tools.length === 1 ? "" : "s"}`);
      if (data.last_error) facts.push(`last error: ${data.last_error}`);
      const failing = data.state === "unreachable" || data.state === "backoff";
      addFeed("mcp.state", facts.join(" · "), failing ? "error" : null);
    }
    refreshMcp();
  },
  "chat.state": (data) => {
    const facts = [`${data.role}: text chat`];
    const refused = Array.isArray(data.tools_refused) ? data.tools_refused : [];
    if (refused.length) facts.push(`tools refused by ${refused.map((r) => r.model).join(", ")}`);
    if (data.last_error) facts.push(`last error: ${data.last_error.message}`);
    if (Array.isArray(data.clashes) && data.clashes.length) {
      facts.push(`left out for the app's own: ${data.clashes.join(", ")}`);
    }
    addFeed("chat.state", facts.join(" · "), data.last_error ? "error" : null);
    refreshSessions();
  },
};

function setStreamStatus(state, text) {
  const status = $("stream-status");
  status.dataset.state = state;
  status.textContent = text;
}

/** Follows the event stream. The browser reconnects by itself after a dropped connection,
 * sending Last-Event-ID so the server resumes where it stopped; only when it gives up (an
 * answer that is not a stream) does the page start a new stream, and read everything again. */
function follow() {
  const stream = new EventSource("/api/events");
  for (const [kind, handle] of Object.entries(handlers)) {
    stream.addEventListener(kind, (event) => {
      let data;
      try {
        data = JSON.parse(event.data);
      } catch {
        return;
      }
      handle(data);
    });
  }
  stream.addEventListener("open", () => setStreamStatus("live", "Live: following the event stream"));
  stream.addEventListener("error", () => {
    if (stream.readyState === EventSource.CLOSED) {
      setStreamStatus("down", "The event stream was refused; trying again…");
      setTimeout(follow, RESTART_DELAY_MS);
    } else {
      setStreamStatus("reconnecting", "Connection lost; reconnecting…");
    }
  });
}

$("feed-clear").addEventListener("click", () => {
  $("feed").replaceChildren();
  $("feed-empty").hidden = false;
});
follow();
