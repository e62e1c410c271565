// Precis console: reads the public v3 API of the origin that served it, with the key pasted into this tab.
// Everything the API returns is put on the page as text (textContent / text nodes), never parsed as HTML.
"use strict";

(() => {
  const KEY_STORAGE = "precis.console.key";
  const POLL_MS = 2000; // live refresh: at most one round of reads every 2 s, and only while the tab is visible
  const LIST_SIZE = 20; // workspaces and sessions per page
  const MESSAGES_PAGE = 100; // messages per page of the timeline (the API's largest page)
  const CONCLUSIONS_SHOWN = 20;
  const MAX_BUDGET = 100000;

  const $ = (id) => document.getElementById(id);
  const fmt = (n) => Number(n).toLocaleString("en-US");
  const plural = (n, one, many) => `${fmt(n)} ${n === 1 ? one : many || `${one}s`}`;

  const state = {
    ws: null,
    session: null,
    wsPage: 1,
    sessionsPage: 1,
    sessionFilter: "",
    messagePages: 1,
    messages: [], // the loaded messages, ascending by seq
    messagesTotal: 0,
    context: null,
    summaries: null,
    peers: [],
    seqOf: new Map(), // message id -> seq, for where a summary ends
    generation: 0, // bumped by navigation: answers for a view no longer shown are dropped
    requests: {}, // panel -> number of its newest request: an older answer arriving late is dropped
    rendered: new Map(), // panel -> what it shows, so an unchanged poll leaves focus and scroll alone
    problems: new Map(), // source -> sentence, shown in the banner (first one)
    running: null,
    again: false,
    lastStart: 0,
    timer: null,
    focusSession: false,
    scrolled: false, // whether the timeline was scrolled to the window once for this session
    hookLog: null, // the webhook endpoint whose delivery log is shown
    retentionShown: null, // the workspace and session whose retention settings are shown
  };

  // ---------------------------------------------------------------- DOM, safely

  /** An element with attributes and children; strings become text nodes, never markup. */
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "className") node.className = value;
      else if (name === "dataset") Object.assign(node.dataset, value);
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function show(id, ...children) {
    $(id).replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  }

  function note(id, text) {
    $(id).textContent = text || "";
  }

  function changed(panel, value) {
    const signature = JSON.stringify(value);
    if (state.rendered.get(panel) === signature) return false;
    state.rendered.set(panel, signature);
    return true;
  }

  /** A stored time as UTC, to the second (absolute: a panel left unchanged by a poll is not redrawn). */
  function when(iso) {
    if (!iso) return "";
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return String(iso);
    return date.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }

  // ---------------------------------------------------------------- the API

  class ApiError extends Error {
    constructor(status, detail) {
      super(detail);
      this.status = status;
      this.detail = detail;
    }
  }

  function detailOf(data, fallback) {
    if (data && typeof data.detail === "string") return data.detail;
    if (data && Array.isArray(data.detail)) {
      return data.detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ");
    }
    if (data && typeof data.message === "string") return data.message;
    return fallback;
  }

  const key = () => sessionStorage.getItem(KEY_STORAGE);

  /** One call of the v3 API on this origin; ApiError (status 0: nothing answered) on failure. */
  async function api(method, path, { query, body } = {}) {
    const url = new URL(path, window.location.origin);
    for (const [name, value] of Object.entries(query || {})) {
      if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, String(value));
    }
    const headers = { Accept: "application/json" };
    const bearer = key();
    if (bearer) headers.Authorization = `Bearer ${bearer}`;
    const init = { method, headers, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(url, init);
    } catch (error) {
      throw new ApiError(0, error.message || "network error");
    }
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (error) {
      data = null;
    }
    if (!response.ok) throw new ApiError(response.status, detailOf(data, response.statusText || "no detail"));
    return data;
  }

  const wsPath = () => `/v3/workspaces/${encodeURIComponent(state.ws)}`;
  const sessionPath = () => `${wsPath()}/sessions/${encodeURIComponent(state.session)}`;

  /** What went wrong, in a sentence a person can act on. */
  function explain(error, what) {
    if (!(error instanceof ApiError)) return `The console failed reading ${what}: ${error.message}`;
    const detail = error.detail;
    switch (error.status) {
      case 0:
        return `Cannot reach the Precis API at ${window.location.origin}: the stack may be stopped (start it with ` +
          `make dev) or the network is down.${$("live").checked ? " Trying again every 2 s." : ""}`;
      case 401:
        return key()
          ? `The API refused this key (401 Unauthorized): ${detail}. Paste a valid key above.`
          : `This Precis checks keys (401 Unauthorized): ${detail}. Paste a key above; make dev prints an admin key ` +
            "when PRECIS_AUTH is on.";
      case 403:
        return `This key may not read ${what} (403 Forbidden): ${detail}`;
      case 404:
        return `Not found (404): ${detail}`;
      case 429:
        return `The service is throttling requests (429): ${detail}. The console keeps trying.`;
      default:
        return `The API answered ${error.status} reading ${what}: ${detail}`;
    }
  }

  /** Errors every panel shares (no stack, no valid key) go to the banner; the rest stay in their panel. */
  const isGlobal = (error) => !(error instanceof ApiError) || error.status === 0 || error.status === 401;

  function report(source, error, what) {
    if (error) state.problems.set(source, explain(error, what));
    else state.problems.delete(source);
  }

  function showProblems() {
    const problem = $("problem");
    const text = [...state.problems.values()][0] || "";
    if (problem.textContent !== text) problem.textContent = text;
    problem.hidden = !text;
  }

  /** A newer request for `panel` supersedes this one: true when this answer is still wanted. */
  function ticket(panel) {
    const number = (state.requests[panel] || 0) + 1;
    state.requests[panel] = number;
    const generation = state.generation;
    return () => state.requests[panel] === number && state.generation === generation;
  }

  // ---------------------------------------------------------------- workspaces and sessions

  function pager(prefix, page) {
    const pages = Math.max(1, page.pages || 1);
    $(`${prefix}-pager`).hidden = pages <= 1;
    $(`${prefix}-page`).textContent = `Page ${fmt(page.page)} of ${fmt(pages)}`;
    $(`${prefix}-prev`).disabled = page.page <= 1;
    $(`${prefix}-next`).disabled = page.page >= pages;
  }

  function pick(label, current, onActivate) {
    return el("li", {}, el("button", { type: "button", "aria-current": current ? "true" : null, onclick: onActivate },
      label));
  }

  /** Mark the chosen item in place, so the button just pressed keeps the focus. */
  function markCurrent(listId, current) {
    for (const button of $(listId).querySelectorAll("button")) {
      if (button.textContent === current) button.setAttribute("aria-current", "true");
      else button.removeAttribute("aria-current");
    }
  }

  async function loadWorkspaces() {
    const wanted = ticket("workspaces");
    try {
      const page = await api("POST", "/v3/workspaces/list", { query: { page: state.wsPage, size: LIST_SIZE }, body: {} });
      if (!wanted()) return;
      report("workspaces", null);
      if (page.page > 1 && page.page > page.pages) {
        state.wsPage = Math.max(1, page.pages);
        return;
      }
      if (!changed("workspaces", page)) return;
      note("workspaces-note", page.total ? `${plural(page.total, "workspace")}.` : "No workspaces yet.");
      show("workspace-list", page.items.map((ws) => pick(ws.id, ws.id === state.ws, () => navigate(ws.id, null, false))));
      pager("workspaces", page);
    } catch (error) {
      if (!wanted()) return;
      if (isGlobal(error)) report("workspaces", error, "the workspaces");
      else report("workspaces", null);
      if (changed("workspaces", String(error.status))) {
        note("workspaces-note", error.status === 403
          ? "This key cannot list workspaces (an admin key can): open one by id."
          : isGlobal(error) ? "Workspaces cannot be listed (see the message above)." : explain(error, "the workspaces"));
        show("workspace-list");
        $("workspaces-pager").hidden = true;
      }
    }
  }

  async function loadSessions() {
    const wanted = ticket("sessions");
    const filter = state.sessionFilter.trim();
    const body = filter ? { filters: { id: { icontains: filter } } } : {};
    try {
      const page = await api("POST", `${wsPath()}/sessions/list`, { query: { page: state.sessionsPage, size: LIST_SIZE },
        body });
      if (!wanted()) return;
      report("sessions", null);
      if (page.page > 1 && page.page > page.pages) {
        state.sessionsPage = Math.max(1, page.pages);
        return;
      }
      if (!changed("sessions", [state.ws, page])) return;
      note("sessions-note", page.total
        ? `${plural(page.total, "session")}${filter ? ` with “${filter}” in the id` : ""}.`
        : filter ? `No session id contains “${filter}”.` : "No sessions in this workspace yet.");
      show("session-list", page.items.map((s) => pick(s.id, s.id === state.session,
        () => navigate(state.ws, s.id, true))));
      pager("sessions", page);
    } catch (error) {
      if (!wanted()) return;
      report("sessions", isGlobal(error) || error.status === 404 ? error : null, "the sessions");
      if (changed("sessions", String(error.status))) {
        note("sessions-note", error.status === 403
          ? "This key cannot list the workspace's sessions (a workspace key can): open one by id."
          : error.status === 404 ? "This workspace does not exist." : "Sessions cannot be listed (see the message above).");
        show("session-list");
        $("sessions-pager").hidden = true;
      }
    }
  }

  // ---------------------------------------------------------------- the workspace's usage

  /** This month's model usage, summed by role and model, and the spend against the monthly token budget. */
  async function loadUsage() {
    const wanted = ticket("usage");
    try {
      const answer = await api("GET", `${wsPath()}/usage`);
      if (!wanted() || !changed("usage", answer)) return;
      const sums = new Map();
      for (const row of answer.usage) {
        const key = `${row.role}\u0000${row.model}`;
        const sum = sums.get(key) || { role: row.role, model: row.model, calls: 0, input: 0, cached: 0, output: 0 };
        sum.calls += row.calls;
        sum.input += row.input_tokens;
        sum.cached += row.cached_input_tokens;
        sum.output += row.output_tokens;
        sums.set(key, sum);
      }
      const budget = answer.budget;
      const spend = budget.monthly_token_budget === null
        ? `${fmt(budget.spent)} tokens spent in ${budget.month}; no monthly token budget.`
        : `${fmt(budget.spent)} of ${fmt(budget.monthly_token_budget)} tokens of ${budget.month}'s budget spent.`;
      const num = (n) => el("td", { className: "num" }, fmt(n));
      show("usage",
        sums.size === 0 ? el("p", { className: "note" }, "No model calls this month.") : el("table", { className: "usage" },
          el("thead", {}, el("tr", {}, ["Role", "Model", "Calls", "Input", "Cached", "Output"].map((h) => el("th", {}, h)))),
          el("tbody", {}, [...sums.values()].map((u) => el("tr", { dataset: { role: u.role } },
            el("td", {}, u.role), el("td", {}, u.model), num(u.calls), num(u.input), num(u.cached), num(u.output))))),
        el("p", { className: "hint", id: "usage-budget" }, spend),
        budget.paused ? el("p", { className: "note", id: "usage-paused" },
          "Derivation is paused: the monthly token budget is spent. It resumes next month or when the budget is raised.")
          : null);
    } catch (error) {
      if (!wanted() || isGlobal(error) || !changed("usage", String(error.status))) return;
      show("usage", el("p", { className: "note" }, error.status === 403
        ? "This key cannot read the workspace's usage (a workspace key can)."
        : explain(error, "the usage")));
    }
  }

  // ---------------------------------------------------------------- the workspace's webhooks

  const hooksPath = () => `${wsPath()}/webhooks`;

  async function loadWebhooks() {
    const wanted = ticket("webhooks");
    try {
      const page = await api("GET", hooksPath(), { query: { size: 50 } });
      if (!wanted() || !changed("webhooks", page)) return;
      note("webhooks-note", page.total ? `${plural(page.total, "endpoint")}.` : "No endpoints yet.");
      show("webhook-list", page.items.map(hookItem));
    } catch (error) {
      if (!wanted() || isGlobal(error) || !changed("webhooks", String(error.status))) return;
      note("webhooks-note", error.status === 403
        ? "This key cannot manage the workspace's webhooks (a workspace key can)."
        : explain(error, "the webhooks"));
      show("webhook-list");
    }
  }

  function hookItem(hook) {
    const events = hook.event_types ? hook.event_types.join(", ") : "every event";
    return el("li", { dataset: { id: hook.id } },
      el("div", { className: "hook-url" }, hook.url),
      el("div", { className: "hint hook-state" }, `${hook.disabled ? "disabled" : "enabled"} · ${events} · ${hook.id}`),
      hook.disabled ? el("p", { className: "note hook-disabled" }, `Disabled ${when(hook.disabled_at)}: ` +
        `${hook.disabled_reason}. Add its URL again to re-enable it.`) : null,
      el("div", { className: "row" },
        el("button", { type: "button", onclick: () => openLog(hook) }, "Deliveries"),
        el("button", { type: "button", onclick: () => rotateHook(hook) }, "Rotate secret"),
        el("button", { type: "button", onclick: () => deleteHook(hook) }, "Delete")));
  }

  function showSecret(...children) {
    show("webhook-secret", ...children);
    $("webhook-secret").hidden = children.length === 0;
  }

  async function hookChanged() {
    state.rendered.delete("webhooks");
    await loadWebhooks();
    if (state.hookLog) await loadDeliveries();
    showProblems();
  }

  async function createHook(event) {
    event.preventDefault();
    const url = $("webhook-url").value.trim();
    if (!url || !state.ws) return;
    const types = [...$("webhook-events").selectedOptions].map((option) => option.value);
    try {
      const made = await api("POST", hooksPath(), { body: types.length ? { url, event_types: types } : { url } });
      $("webhook-url").value = "";
      showSecret(made.secret
        ? ["Endpoint added. Its secret, shown this once (keep it for the receiver): ", el("code", {}, made.secret)]
        : "This URL was registered already: its endpoint is enabled, and its secret was shown when it was added.");
    } catch (error) {
      showSecret(explain(error, "the endpoint"));
    }
    await hookChanged();
  }

  async function rotateHook(hook) {
    try {
      const rotated = await api("POST", `${hooksPath()}/${encodeURIComponent(hook.id)}/rotate`);
      showSecret("New secret, shown this once: ", el("code", {}, rotated.secret),
        `. The old one keeps signing until ${when(new Date(rotated.previous_secret_expires_at * 1000).toISOString())}.`);
    } catch (error) {
      showSecret(explain(error, "the endpoint"));
    }
  }

  async function deleteHook(hook) {
    if (!window.confirm(`Delete the webhook endpoint ${hook.url}? Nothing more is sent to it.`)) return;
    try {
      await api("DELETE", `${hooksPath()}/${encodeURIComponent(hook.id)}`);
      showSecret();
      if (state.hookLog && state.hookLog.id === hook.id) {
        state.hookLog = null;
        show("webhook-deliveries");
      }
    } catch (error) {
      showSecret(explain(error, "the endpoint"));
    }
    await hookChanged();
  }

  function openLog(hook) {
    state.hookLog = hook;
    state.rendered.delete("deliveries");
    loadDeliveries().then(showProblems);
  }

  /** The shown endpoint's delivery log, newest first (GET …/webhooks/{id}/deliveries). */
  async function loadDeliveries() {
    const hook = state.hookLog;
    if (!hook) return;
    const wanted = ticket("deliveries");
    const title = el("h3", {}, `Deliveries to ${hook.url}`);
    try {
      const page = await api("GET", `${hooksPath()}/${encodeURIComponent(hook.id)}/deliveries`, { query: { size: 20 } });
      if (!wanted() || !changed("deliveries", [hook.id, page])) return;
      show("webhook-deliveries", title, page.items.length === 0
        ? el("p", { className: "note" }, "No deliveries in the last 3 days.")
        : el("ul", { className: "deliveries" }, page.items.map((d) => el("li", { dataset: { id: d.id, status: d.status } },
          el("div", { className: "delivery-head" }, `${d.event_type} · ${d.status} · ${plural(d.attempts, "attempt")}` +
            (d.last_http_status === null ? "" : ` · HTTP ${d.last_http_status}`)),
          el("div", { className: "hint" }, `last attempt ${when(d.last_attempt_at)}`),
          d.last_error ? el("div", { className: "delivery-error" }, d.last_error) : null))),
      page.total > page.items.length ? el("p", { className: "hint" }, `The newest ${page.items.length} of ` +
        `${fmt(page.total)}; \`precis webhooks deliveries\` pages through them.`) : null);
    } catch (error) {
      if (!wanted() || isGlobal(error) || !changed("deliveries", String(error.status))) return;
      show("webhook-deliveries", title, el("p", { className: "note" }, explain(error, "the deliveries")));
    }
  }

  // ---------------------------------------------------------------- retention (configuration.retention.days)

  /** The workspace as stored: the list (an admin key), else the one read a workspace key has (get-or-create). */
  async function readWorkspace() {
    try {
      const page = await api("POST", "/v3/workspaces/list", { body: { filters: { id: state.ws } } });
      return page.items[0] || null;
    } catch (error) {
      if (!(error instanceof ApiError) || error.status !== 403) throw error;
      return api("POST", "/v3/workspaces", { body: { id: state.ws } });
    }
  }

  async function readSession() {
    const page = await api("POST", `${wsPath()}/sessions/list`, { body: { filters: { id: state.session } } });
    return page.items[0] || null;
  }

  /** A level's own retention.days: a number, or null when it sets none (it inherits). */
  const ownDays = (resource) => {
    const days = ((resource && resource.configuration) || {}).retention?.days;
    return days === undefined ? null : days;
  };
  const keptFor = (days) => (days ? `expire ${plural(days, "day")} after they are stored` : "are kept for ever");

  /** Both levels' settings and the one in force, read when the view opens and after a change (not polled: a
   * conditional write is the one read of a workspace a workspace key has). */
  async function loadRetention() {
    const wanted = ticket("retention");
    const shown = `${state.ws}\u0000${state.session || ""}`;
    let workspace;
    try {
      workspace = await readWorkspace();
    } catch (error) {
      if (!wanted() || isGlobal(error)) return; // the banner says it; the next round reads again
      state.retentionShown = shown; // said once; opening the view again reads again
      note("ws-retention", explain(error, "the workspace's settings"));
      note("session-retention", "");
      return;
    }
    if (!wanted()) return;
    const wsDays = ownDays(workspace);
    $("ws-retention").dataset.own = wsDays === null ? "" : String(wsDays);
    $("ws-retention-days").value = wsDays === null ? "" : String(wsDays);
    note("ws-retention", workspace === null ? "This workspace does not exist." : wsDays === null
      ? "Not set: new messages are kept for ever, unless a session sets its own."
      : `Set to ${fmt(wsDays)}: new messages ${keptFor(wsDays)}, unless a session sets its own.`);
    if (!state.session) {
      state.retentionShown = shown;
      return;
    }
    let session;
    try {
      session = await readSession();
    } catch (error) {
      if (!wanted() || isGlobal(error)) return;
      state.retentionShown = shown;
      note("session-retention", error.status === 403
        ? "This key cannot read the session's settings (a workspace key can)." : explain(error, "the session's settings"));
      return;
    }
    if (!wanted()) return;
    state.retentionShown = shown;
    if (session === null) {
      note("session-retention", "This session does not exist.");
      return;
    }
    // The service's rule (precis.configuration.retention_days): the session's value wins, and 0 there keeps.
    const sDays = ownDays(session);
    const days = (sDays === null ? wsDays : sDays) || null;
    $("session-retention").dataset.own = sDays === null ? "" : String(sDays);
    $("session-retention").dataset.effective = days === null ? "" : String(days);
    $("session-retention-days").value = sDays === null ? "" : String(sDays);
    note("session-retention", `${sDays === null ? "Not set here: the workspace's setting applies." : `Set here to ` +
      `${fmt(sDays)}.`} This session's new messages ${keptFor(days)}.`);
  }

  /** Store `days` (null: remove the setting, so the level inherits) in the workspace's or the session's
   * configuration, its other sections as they are. */
  async function saveRetention(level, days) {
    const noteId = `${level}-retention-note`;
    try {
      const resource = level === "ws" ? await readWorkspace() : await readSession();
      const configuration = { ...((resource && resource.configuration) || {}) };
      if (days === null) delete configuration.retention;
      else configuration.retention = { ...(configuration.retention || {}), days };
      if (level === "ws") await api("PUT", wsPath(), { body: { configuration } });
      else await api("PUT", sessionPath(), { body: { configuration } });
      note(noteId, days === null ? "Cleared: the setting is inherited." : "Saved: it applies to messages stored from now on.");
    } catch (error) {
      note(noteId, error instanceof ApiError && error.status === 422 ? `Not saved: ${error.detail}`
        : explain(error, "the retention setting"));
    }
    await loadRetention();
    showProblems();
  }

  function retentionSubmitted(level) {
    return (event) => {
      event.preventDefault();
      const text = $(`${level}-retention-days`).value.trim();
      if (!text) {
        note(`${level}-retention-note`, "Enter a number of days (0 keeps for ever), or Clear to inherit.");
        return;
      }
      saveRetention(level, Number(text)); // the service checks it and says what is wrong (422)
    };
  }

  // ---------------------------------------------------------------- a session

  function budget() {
    const value = Number($("budget").value);
    return Number.isInteger(value) && value >= 1 && value <= MAX_BUDGET ? value : null;
  }

  function contextQuery() {
    const query = { tokens: budget() };
    if (!$("ctx-summary").checked) query.summary = "false";
    if ($("ctx-whole-runs").value) query.whole_runs = $("ctx-whole-runs").value;
    const target = $("ctx-peer-target").value;
    if (target) {
      query.peer_target = target;
      query.peer_perspective = $("ctx-peer-perspective").value;
      if ($("ctx-limit-to-session").checked) query.limit_to_session = "true";
      query.search_query = $("ctx-search-query").value.trim();
      query.max_conclusions = $("ctx-max-conclusions").value;
    }
    return query;
  }

  async function loadMessages() {
    const pages = [];
    for (let page = 1; page <= state.messagePages; page += 1) {
      pages.push(api("POST", `${sessionPath()}/messages/list`,
        { query: { page, size: MESSAGES_PAGE, reverse: "true" }, body: {} }));
    }
    const answers = await Promise.all(pages);
    const bySeq = new Map();
    for (const answer of answers) for (const message of answer.items) bySeq.set(message.seq, message);
    const messages = [...bySeq.values()].sort((a, b) => a.seq - b.seq);
    for (const message of messages) state.seqOf.set(message.id, message.seq);
    return { messages, total: answers[0].total };
  }

  /** The seq of the message a summary ends at: from the loaded messages, else read once by id. */
  async function seqOfMessage(id) {
    if (!state.seqOf.has(id)) {
      const message = await api("GET", `${sessionPath()}/messages/${encodeURIComponent(id)}`);
      state.seqOf.set(id, message.seq);
    }
    return state.seqOf.get(id);
  }

  async function loadSession() {
    const wanted = ticket("session");
    const query = contextQuery();
    if (query.tokens === null) {
      note("context-note", "Budget: a whole number of tokens from 1 to 100,000.");
      return;
    }
    const reads = [loadMessages(), api("GET", `${sessionPath()}/summaries`),
      api("GET", `${sessionPath()}/context`, { query }), api("GET", `${sessionPath()}/peers`, { query: { size: 100 } })];
    let messages;
    let summaries;
    let context;
    let peers;
    try {
      [messages, summaries, context, peers] = await Promise.all(reads);
      const ends = [summaries.short_summary, summaries.long_summary].filter(Boolean).map((s) => s.message_id);
      await Promise.all(ends.map(seqOfMessage));
    } catch (error) {
      if (!wanted()) return;
      report("session", error, `session '${state.session}'`);
      if (!isGlobal(error) && changed("session-error", String(error.status))) {
        show("timeline", el("p", { className: "note" }, explain(error, `session '${state.session}'`)));
      }
      return;
    }
    if (!wanted()) return;
    state.rendered.delete("session-error");
    report("session", null);
    state.messages = messages.messages;
    state.messagesTotal = messages.total;
    state.summaries = summaries;
    state.context = context;
    renderPeers(peers.items.map((p) => p.id));
    renderContext(context, query);
    renderTimeline();
    renderSummaries();
  }

  async function loadQueue() {
    const wanted = ticket("queue");
    try {
      const status = await api("GET", `${wsPath()}/queue/status`, { query: { session_id: state.session } });
      if (!wanted() || !changed("queue", status)) return;
      const row = (label, value) => [el("dt", {}, label), el("dd", {}, fmt(value))];
      show("queue", el("p", { className: "hint" }, "Work the deriver and the summarizer still have for this session:"),
        el("dl", { className: "counts" },
          row("Pending", status.pending_work_units), row("In progress", status.in_progress_work_units),
          row("Completed", status.completed_work_units), row("Total", status.total_work_units)));
    } catch (error) {
      if (!wanted() || isGlobal(error) || !changed("queue", String(error.status))) return;
      show("queue", el("p", { className: "note" }, explain(error, "the queue status")));
    }
  }

  async function loadPeerMemory() {
    const peer = $("peer-select").value;
    const wanted = ticket("peer");
    if (!peer) {
      if (changed("peer", null)) show("peer-memory", el("p", { className: "note" }, "Choose a peer to see its card and conclusions."));
      return;
    }
    const filters = { observed_id: peer };
    if ($("conclusions-this-session").checked) filters.session_id = state.session;
    const [card, conclusions] = await Promise.allSettled([
      api("GET", `${wsPath()}/peers/${encodeURIComponent(peer)}/card`),
      api("POST", `${wsPath()}/conclusions/list`, { query: { size: CONCLUSIONS_SHOWN }, body: { filters } }),
    ]);
    if (!wanted() || !changed("peer", [peer, filters, card, conclusions])) return;
    const parts = [el("h4", {}, `Card of ${peer}`)];
    if (card.status === "rejected") parts.push(el("p", { className: "note" }, explain(card.reason, `the card of '${peer}'`)));
    else if (!card.value.peer_card || card.value.peer_card.length === 0) parts.push(el("p", { className: "note" }, "No card yet."));
    else parts.push(el("ul", { className: "card-list" }, card.value.peer_card.map((entry) => el("li", {}, entry))));

    parts.push(el("h4", {}, `Conclusions about ${peer}`));
    if (conclusions.status === "rejected") {
      parts.push(el("p", { className: "note" }, explain(conclusions.reason, `the conclusions about '${peer}'`)));
    } else if (conclusions.value.items.length === 0) {
      parts.push(el("p", { className: "note" }, "No conclusions yet."));
    } else {
      const page = conclusions.value;
      parts.push(el("p", { className: "hint" }, `Newest first: ${fmt(page.items.length)} of ${fmt(page.total)}.`));
      parts.push(el("ul", { className: "conclusions" }, page.items.map((c) => el("li", { dataset: { id: c.id } },
        el("p", { className: "text" }, c.content),
        el("p", { className: "meta" }, [
          `by ${c.observer_id}`, `derived ${plural(c.times_derived, "time")}`,
          c.session_id ? `session ${c.session_id}` : "no session", c.level, when(c.created_at),
        ].join(" · "))))));
    }
    show("peer-memory", parts);
  }

  // ---------------------------------------------------------------- rendering a session

  function setOptions(select, first, values) {
    const current = select.value;
    select.replaceChildren(el("option", { value: "" }, first), ...values.map((v) => el("option", { value: v }, v)));
    select.value = values.includes(current) ? current : "";
  }

  function renderPeers(peers) {
    if (!changed("peers", peers)) return;
    state.peers = peers;
    setOptions($("ctx-peer-target"), "none", peers);
    setOptions($("ctx-peer-perspective"), "the target itself", peers);
    setOptions($("peer-select"), "choose a peer", peers);
    peerFieldsEnabled();
  }

  function peerFieldsEnabled() {
    const on = Boolean($("ctx-peer-target").value);
    for (const id of ["ctx-peer-perspective", "ctx-limit-to-session", "ctx-search-query", "ctx-max-conclusions"]) {
      $(id).disabled = !on;
    }
  }

  /** How the context spends its budget, from the API's own token counts. */
  function contextParts(context, limit) {
    const summary = context.summary ? context.summary.token_count : 0;
    const messages = context.messages.reduce((sum, m) => sum + m.token_count, 0);
    // The representation and the card take what token_count holds beyond summary and messages; the card's share is
    // card_token_count (Precis's ext). From a server without it their split is estimated from their lengths.
    const peerTokens = Math.max(0, context.token_count - summary - messages);
    const representationText = context.peer_representation || "";
    const cardText = (context.peer_card || []).join("\n");
    let representation = peerTokens;
    let card = 0;
    let estimated = false;
    if (typeof context.card_token_count === "number") {
      card = Math.min(peerTokens, context.card_token_count);
      representation = peerTokens - card;
    } else if (cardText && !representationText) {
      representation = 0;
      card = peerTokens;
    } else if (cardText && representationText && peerTokens > 0) {
      representation = Math.round(peerTokens * representationText.length / (representationText.length + cardText.length));
      card = peerTokens - representation;
      estimated = true;
    }
    return { summary, messages, representation, card, unused: Math.max(0, limit - context.token_count), estimated };
  }

  const PART_LABELS = { summary: "Summary", representation: "Representation", card: "Card", messages: "Messages",
    unused: "Unused" };

  function renderContext(context, query) {
    const limit = query.tokens;
    if (!changed("context", [context, query])) return;
    const parts = contextParts(context, limit);
    const bar = $("bar");
    const order = ["summary", "representation", "card", "messages", "unused"];
    bar.replaceChildren(...order.map((part) => {
      const seg = el("div", { className: `seg seg-${part}`, dataset: { part, tokens: String(parts[part]) } });
      seg.style.width = `${(parts[part] / limit) * 100}%`; // CSSOM, which the page's CSP allows; no style attribute
      return seg;
    }));
    bar.dataset.budget = String(limit);
    // The parameters this drawing answers, for whoever checks it against the API (the browser tests).
    bar.dataset.params = JSON.stringify(Object.fromEntries(Object.entries(query)
      .filter(([, v]) => v !== undefined && v !== null && v !== "").map(([k, v]) => [k, String(v)])
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))));
    bar.dataset.tokenCount = String(context.token_count);
    const approx = (part) => (parts.estimated && (part === "representation" || part === "card") ? "≈" : "");
    const spoken = order.filter((p) => parts[p] > 0).map((p) => `${PART_LABELS[p]} ${approx(p)}${fmt(parts[p])}`);
    bar.setAttribute("aria-label", `Context window: ${fmt(context.token_count)} of ${fmt(limit)} tokens. ${spoken.join(", ")}.`);

    const newest = windowMessages(context);
    const recalled = context.messages.length - newest.length;
    const first = newest[0];
    const last = newest[newest.length - 1];
    $("bar-caption").textContent = `${fmt(context.token_count)} of ${fmt(limit)} tokens` +
      (newest.length ? ` · ${plural(newest.length, "message")} (#${first.seq}–#${last.seq})` : " · no message fits") +
      (recalled ? ` · ${plural(recalled, "recalled message")}` : "");
    const details = {
      summary: context.summary ? `${summaryName(context.summary.summary_type)}` : "none in the window",
      messages: plural(context.messages.length, "message"),
      representation: query.peer_target ? `of ${query.peer_target}` : "no peer target",
      card: context.peer_card ? plural(context.peer_card.length, "entry", "entries") : "none",
      unused: "",
    };
    show("bar-legend", order.map((part) => el("li", { dataset: { part } },
      el("span", { className: `swatch seg-${part}`, "aria-hidden": "true" }),
      `${PART_LABELS[part]} ${approx(part)}${fmt(parts[part])}${details[part] ? ` (${details[part]})` : ""}`)));
    const notes = [];
    if (context.messages_skipped) {
      notes.push(`${plural(context.messages_skipped, "older message")} ${context.summary ? "after the summary " : ""}` +
        "did not fit (messages_skipped).");
    }
    if (context.representation_skipped) {
      notes.push(`${plural(context.representation_skipped, "conclusion")} dropped from the representation to fit.`);
    }
    if (parts.estimated) notes.push("The API counts representation and card together; ≈ marks their split by length.");
    note("context-note", notes.join(" "));

    const pieces = [];
    if (context.summary) {
      pieces.push(el("h4", {}, `${summaryName(context.summary.summary_type)} · ${plural(context.summary.token_count, "token")}`),
        el("p", { className: "text" }, context.summary.content));
    }
    if (context.peer_representation) {
      pieces.push(el("h4", {}, `Representation of ${query.peer_target}`), el("p", { className: "text" }, context.peer_representation));
    }
    if (context.peer_card && context.peer_card.length) {
      pieces.push(el("h4", {}, `Card of ${query.peer_target}`),
        el("ul", { className: "card-list" }, context.peer_card.map((entry) => el("li", {}, entry))));
    }
    if (!pieces.length) pieces.push(el("p", { className: "note" }, "Only messages: no summary, representation or card."));
    show("context-parts", pieces);
  }

  function summaryName(type) {
    if (type === "honcho_chat_summary_short") return "Short summary";
    if (type === "honcho_chat_summary_long") return "Long summary";
    if (type === "rolling") return "Rolling summary";
    return `Summary (${type})`;
  }

  function summaryEnds() {
    const ends = [];
    for (const summary of [state.summaries?.short_summary, state.summaries?.long_summary]) {
      if (summary && state.seqOf.has(summary.message_id)) {
        ends.push({ seq: state.seqOf.get(summary.message_id), summary });
      }
    }
    return ends;
  }

  /** The context's newest messages: those of this session that search_query did not recall (recalled ones come
   * first, from any session the peers take part in, and are not where the window starts). */
  function windowMessages(context) {
    const recalled = new Set(context.recalled || []);
    return context.messages.filter((m) => !recalled.has(m.id));
  }

  function renderTimeline() {
    const context = state.context;
    const inWindow = new Set(context.messages.map((m) => m.id));
    const newest = windowMessages(context);
    const windowStart = newest.length ? newest[0].seq : null;
    const ends = summaryEnds();
    if (!changed("timeline", [state.messages, state.messagesTotal, [...inWindow], ends, context.messages_skipped,
      context.summary && context.summary.summary_type])) return;

    const loadedFrom = state.messages.length ? state.messages[0].seq : null;
    const older = state.messagesTotal - state.messages.length;
    $("older").hidden = older <= 0;
    note("older-note", older > 0 ? `${plural(older, "older message")} not loaded.` +
      (windowStart !== null && loadedFrom !== null && windowStart < loadedFrom ? " The context window starts among them." : "") : "");

    if (!state.messages.length) {
      show("timeline", el("p", { className: "note" }, "No messages in this session yet."));
      return;
    }
    const items = [];
    for (const message of state.messages) {
      if (message.seq === windowStart) {
        const skipped = context.messages_skipped;
        const used = context.summary ? `after the ${summaryName(context.summary.summary_type).toLowerCase()}` : "";
        items.push({ boundary: "window-start", text: `Context window starts here${used ? ` (${used})` : ""}` +
          (skipped ? ` · ${plural(skipped, "older message")} skipped` : "") });
      }
      items.push({ message });
      for (const end of ends.filter((e) => e.seq === message.seq)) {
        items.push({ boundary: "summary-end", text: `${summaryName(end.summary.summary_type)} ends here: covers ` +
          `messages through #${end.seq}` });
      }
    }

    const blocks = [];
    let run = null;
    let turn = null;
    const runKey = (m) => (m.run_id ? `run:${m.run_id}` : `seq:${m.seq}`);
    for (const item of items) {
      if (item.boundary) {
        blocks.push(el("p", { className: `boundary ${item.boundary}`, dataset: { boundary: item.boundary } }, item.text));
        run = null;
        turn = null;
        continue;
      }
      const m = item.message;
      if (!run || run.key !== runKey(m)) {
        const label = m.run_id ? `run ${m.run_id}` : "no run id";
        run = { key: runKey(m), node: el("section", { className: "run", "aria-label": label, dataset: { run: m.run_id || "" } },
          el("p", { className: "run-label" }, label)) };
        blocks.push(run.node);
        turn = null;
      }
      if (!turn || turn.peer !== m.peer_id) {
        turn = { peer: m.peer_id, node: el("div", { className: "turn" }, el("p", { className: "turn-peer" }, m.peer_id)) };
        run.node.append(turn.node);
      }
      const inside = inWindow.has(m.id);
      turn.node.append(el("article", {
        className: inside ? "msg in-window" : "msg", id: `m-${m.id}`, tabindex: "-1",
        dataset: { id: m.id, seq: String(m.seq) },
      },
      el("p", { className: "meta" }, `#${m.seq} · ${plural(m.token_count, "token")} · ${when(m.created_at)}`,
        inside ? el("span", { className: "tag" }, "in context") : null),
      el("p", { className: "text" }, m.content)));
    }
    show("timeline", blocks);
    if (!state.scrolled && windowStart !== null) {
      state.scrolled = true; // once per session opened: a later refresh never moves what the reader is looking at
      scrollToWindow();
    }
  }

  /** Scroll the timeline (not the page) so the start of the context window is at its top. */
  function scrollToWindow() {
    const timeline = $("timeline");
    let start = timeline.querySelector(".boundary.window-start");
    // A summary ending just before the window is part of the picture: keep its mark in view too.
    if (start && start.previousElementSibling && start.previousElementSibling.classList.contains("boundary")) {
      start = start.previousElementSibling;
    }
    if (start) timeline.scrollTop += start.getBoundingClientRect().top - timeline.getBoundingClientRect().top - 4;
  }

  function renderSummaries() {
    const summaries = [state.summaries.short_summary, state.summaries.long_summary].filter(Boolean);
    const used = state.context && state.context.summary ? state.context.summary.summary_type : null;
    if (!changed("summaries", [summaries, used, summaries.map((s) => state.seqOf.get(s.message_id))])) return;
    if (!summaries.length) {
      show("summaries", el("p", { className: "note" }, "No summary yet: one is written once enough messages arrive."));
      return;
    }
    show("summaries", summaries.map((s) => el("article", { className: "summary", dataset: { type: s.summary_type } },
      el("h4", {}, summaryName(s.summary_type), s.summary_type === used ? el("span", { className: "tag" }, "in context") : null),
      el("p", { className: "meta" }, [`type ${s.summary_type}`, `covers messages through #${state.seqOf.get(s.message_id)}`,
        plural(s.token_count, "token"), `written ${when(s.created_at)}`].join(" · ")),
      el("p", { className: "text" }, s.content))));
  }

  // ---------------------------------------------------------------- search

  async function search(event) {
    event.preventDefault();
    const query = $("search-query").value.trim();
    if (!query || !state.session) return;
    const wanted = ticket("search");
    note("search-note", "Searching…");
    try {
      const found = await api("POST", `${sessionPath()}/search`, { body: { query, limit: 20 } });
      if (!wanted()) return;
      note("search-note", found.length ? `${plural(found.length, "message")} found, best first.` : "No message matches.");
      show("search-results", found.map((m) => {
        const loaded = state.messages.some((x) => x.id === m.id);
        return el("li", { dataset: { id: m.id } },
          el("p", { className: "meta" }, `#${m.seq} · ${m.peer_id}`),
          el("p", { className: "text" }, m.content.length > 400 ? `${m.content.slice(0, 400)}…` : m.content),
          loaded ? el("button", { type: "button", onclick: () => reveal(m.id) }, `Show #${m.seq} in the timeline`)
            : el("span", { className: "hint" }, "(older than the loaded messages)"));
      }));
    } catch (error) {
      if (!wanted()) return;
      note("search-note", explain(error, "the search"));
      show("search-results");
    }
  }

  function reveal(id) {
    const node = $(`m-${id}`);
    if (!node) return;
    node.scrollIntoView({ block: "center" });
    node.focus({ preventScroll: true });
    node.classList.add("flash");
    setTimeout(() => node.classList.remove("flash"), 1500);
  }

  // ---------------------------------------------------------------- navigation and refresh

  function parseHash() {
    const parts = window.location.hash.replace(/^#\/?/, "").split("/").filter(Boolean);
    const decode = (s) => {
      try {
        return decodeURIComponent(s);
      } catch (error) {
        return null;
      }
    };
    const ws = parts[0] === "w" && parts[1] ? decode(parts[1]) : null;
    const session = ws && parts[2] === "s" && parts[3] ? decode(parts[3]) : null;
    return { ws, session };
  }

  function navigate(ws, session, focus) {
    state.focusSession = focus;
    const hash = ws ? `#/w/${encodeURIComponent(ws)}${session ? `/s/${encodeURIComponent(session)}` : ""}` : "#/";
    if (window.location.hash === hash) onRoute();
    else window.location.hash = hash;
  }

  function onRoute() {
    const { ws, session } = parseHash();
    if (ws !== state.ws) {
      state.sessionsPage = 1;
      state.sessionFilter = "";
      $("session-filter").value = "";
      state.problems.delete("sessions");
    }
    if (ws !== state.ws || session !== state.session) {
      state.messagePages = 1;
      state.messages = [];
      state.seqOf = new Map();
      state.context = null;
      state.summaries = null;
      for (const panel of ["timeline", "summaries", "context", "peers", "peer", "queue", "session-error"]) {
        state.rendered.delete(panel);
      }
      state.problems.delete("session");
      state.scrolled = false;
      show("search-results");
      note("search-note", "");
    }
    if (ws !== state.ws || session !== state.session) {
      for (const id of ["ws-retention-note", "session-retention-note"]) note(id, "");
      note("session-retention", "Loading…");
    }
    if (ws !== state.ws) {
      note("ws-retention", "Loading…");
      show("usage");
      state.rendered.delete("usage");
      show("webhook-list");
      show("webhook-deliveries");
      showSecret();
      state.hookLog = null;
      state.rendered.delete("webhooks");
      show("session-list");
      note("sessions-note", "Loading…");
      $("sessions-pager").hidden = true;
      state.rendered.delete("sessions");
    }
    state.ws = ws;
    state.session = session;
    state.generation += 1;
    markCurrent("workspace-list", ws);
    markCurrent("session-list", session);
    $("sessions-section").hidden = !ws;
    $("usage-section").hidden = !ws;
    $("webhooks-section").hidden = !ws;
    $("retention-section").hidden = !ws;
    $("welcome").hidden = Boolean(session);
    $("session-view").hidden = !session;
    if (session) {
      $("session-title").textContent = `Session ${session} · workspace ${ws}`;
      document.title = `${session} · Precis console`;
      show("timeline", el("p", { className: "note" }, "Loading messages…"));
      $("bar-caption").textContent = "Loading the context…";
    } else {
      document.title = "Precis console";
    }
    if (state.focusSession && session) $("session").focus();
    state.focusSession = false;
    refresh();
  }

  /** One round of reads for what is on screen; a call while one runs queues exactly one more. */
  async function refresh() {
    if (state.running) {
      state.again = true;
      return state.running;
    }
    state.lastStart = performance.now();
    const reads = [loadWorkspaces()];
    if (state.ws) reads.push(loadSessions(), loadUsage(), loadWebhooks(), loadDeliveries());
    if (state.ws && state.session) reads.push(loadSession(), loadQueue(), loadPeerMemory());
    if (state.ws && state.retentionShown !== `${state.ws}\u0000${state.session || ""}`) reads.push(loadRetention());
    state.running = Promise.allSettled(reads);
    try {
      await state.running;
    } finally {
      state.running = null;
    }
    showProblems();
    $("refreshed").textContent = `Updated ${new Date().toLocaleTimeString("en-GB")}.`;
    if (state.again) {
      state.again = false;
      await refresh();
    }
    return undefined;
  }

  function schedule() {
    clearTimeout(state.timer);
    state.timer = null;
    if (!$("live").checked || document.visibilityState !== "visible") return;
    const wait = Math.max(0, POLL_MS - (performance.now() - state.lastStart));
    state.timer = setTimeout(async () => {
      await refresh();
      schedule();
    }, wait);
  }

  function debounce(fn, ms) {
    let timer = null;
    return (...args) => {
      clearTimeout(timer);
      timer = setTimeout(() => fn(...args), ms);
    };
  }

  const contextChanged = debounce(() => {
    if (state.session) loadSession().then(showProblems);
  }, 250);

  function showKeyState() {
    $("key-state").textContent = key() ? "A key is set for this tab; it is sent with every request." : "No key set.";
    $("key-forget").disabled = !key();
  }

  function keyChanged() {
    showKeyState();
    state.rendered.clear();
    state.retentionShown = null;
    state.problems.clear();
    state.generation += 1;
    refresh();
  }

  function wire() {
    $("key-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const value = $("key").value.trim();
      $("key").value = "";
      if (!value) return;
      sessionStorage.setItem(KEY_STORAGE, value.replace(/^Bearer\s+/i, ""));
      keyChanged();
    });
    $("key-forget").addEventListener("click", () => {
      sessionStorage.removeItem(KEY_STORAGE);
      keyChanged();
    });
    $("live").addEventListener("change", schedule);
    document.addEventListener("visibilitychange", () => {
      if (document.visibilityState === "visible") schedule();
      else clearTimeout(state.timer);
    });
    window.addEventListener("hashchange", onRoute);

    $("workspace-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const id = $("workspace-id").value.trim();
      if (id) navigate(id, null, false);
    });
    $("session-open-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const id = $("session-open-id").value.trim();
      if (id && state.ws) navigate(state.ws, id, true);
    });
    $("session-filter").addEventListener("input", debounce(() => {
      state.sessionFilter = $("session-filter").value;
      state.sessionsPage = 1;
      loadSessions().then(showProblems);
    }, 250));
    const turnPage = (which, delta) => () => {
      state[which] = Math.max(1, state[which] + delta);
      (which === "wsPage" ? loadWorkspaces : loadSessions)().then(showProblems);
    };
    $("workspaces-prev").addEventListener("click", turnPage("wsPage", -1));
    $("workspaces-next").addEventListener("click", turnPage("wsPage", 1));
    $("sessions-prev").addEventListener("click", turnPage("sessionsPage", -1));
    $("sessions-next").addEventListener("click", turnPage("sessionsPage", 1));

    $("context-form").addEventListener("submit", (event) => event.preventDefault());
    $("budget").addEventListener("input", () => {
      const value = budget();
      if (value !== null) $("budget-range").value = String(Math.min(value, Number($("budget-range").max)));
      contextChanged();
    });
    $("budget-range").addEventListener("input", () => {
      $("budget").value = $("budget-range").value;
      contextChanged();
    });
    for (const id of ["ctx-summary", "ctx-whole-runs", "ctx-peer-perspective", "ctx-limit-to-session"]) {
      $(id).addEventListener("change", contextChanged);
    }
    $("ctx-peer-target").addEventListener("change", () => {
      peerFieldsEnabled();
      contextChanged();
    });
    $("ctx-search-query").addEventListener("input", contextChanged);
    $("ctx-max-conclusions").addEventListener("input", contextChanged);

    $("load-older").addEventListener("click", () => {
      state.messagePages += 1;
      loadSession().then(showProblems);
    });
    $("search-form").addEventListener("submit", search);
    $("webhook-form").addEventListener("submit", createHook);
    $("ws-retention-form").addEventListener("submit", retentionSubmitted("ws"));
    $("session-retention-form").addEventListener("submit", retentionSubmitted("session"));
    $("ws-retention-clear").addEventListener("click", () => saveRetention("ws", null));
    $("session-retention-clear").addEventListener("click", () => saveRetention("session", null));
    $("to-window").addEventListener("click", scrollToWindow);
    $("peer-select").addEventListener("change", () => loadPeerMemory());
    $("conclusions-this-session").addEventListener("change", () => loadPeerMemory());
  }

  wire();
  peerFieldsEnabled();
  showKeyState();
  onRoute();
  schedule();
})();
