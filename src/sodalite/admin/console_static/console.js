// Sodalite console: a small single-page front end over /api/v1 (no build step, no third-party code).
// Every value from the broker is put into the page as text (never as HTML).
"use strict";

const state = { csrf: null, keyName: null, namespace: "", timer: null, browse: null };

// ---- helpers -------------------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// One message at a time: a new notice or error replaces whichever was shown before.
function showError(message) {
  const box = document.getElementById("error");
  box.textContent = message;
  box.hidden = !message;
  if (message) clearBox("notice");
}

function notice(message) {
  const box = document.getElementById("notice");
  box.textContent = message;
  box.hidden = !message;
  if (message) clearBox("error");
}

function clearBox(id) {
  const box = document.getElementById(id);
  box.textContent = "";
  box.hidden = true;
}

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error && body.error.code;
  }
}

async function api(method, path, body) {
  const headers = { "Accept": "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && state.csrf) headers["X-CSRF-Token"] = state.csrf;
  const response = await fetch("/api/v1" + path, {
    method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let parsed = null;
  try { parsed = text ? JSON.parse(text) : null; } catch (e) { parsed = null; }
  if (!response.ok) {
    const error = new ApiError(response.status, parsed);
    if (response.status === 401 && path !== "/login") {
      state.csrf = null;
      renderLogin(error.message);
    }
    throw error;
  }
  return parsed;
}

function entityUrl(path) {
  return "/entities/" + path.split("/").map(encodeURIComponent).join("/");
}

function stopTimer() {
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
}

function startTimer(refresh) {
  stopTimer(); // one refresher at a time, whichever page asked last
  state.timer = setInterval(() => { refresh().catch((e) => showError(e.message)); }, 2000);
}

async function guarded(action) {
  try {
    showError("");
    await action();
  } catch (error) {
    showError(error.message);
  }
}

function formatBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

function time(ms) {
  return ms === null || ms === undefined ? "" : new Date(ms).toISOString().replace("T", " ").replace("Z", "");
}

// ---- login ----------------------------------------------------------------------------------------------

function renderLogin(message) {
  stopTimer();
  document.getElementById("nav").hidden = true;
  const main = document.getElementById("main");
  const keyName = el("input", { id: "login-key-name", name: "keyName", value: "RootManageSharedAccessKey",
                                 autocomplete: "username", required: true });
  const key = el("input", { id: "login-key", name: "key", type: "password", autocomplete: "current-password",
                            required: true });
  const form = el("form", { id: "login", class: "panel", onsubmit: (event) => {
    event.preventDefault();
    guarded(async () => {
      const session = await api("POST", "/login", { keyName: keyName.value, key: key.value });
      startSession(session);
      if (location.hash && location.hash !== "#/") location.hash = "#/"; // the hashchange routes
      else route();
    });
  } },
    el("h1", { text: "Log in" }),
    el("label", {}, "Key name", keyName),
    el("label", {}, "Key", key),
    el("button", { id: "login-submit", type: "submit" }, "Log in"));
  main.replaceChildren(form);
  showError(message || "");
}

function startSession(session) {
  state.csrf = session.csrfToken;
  state.keyName = session.keyName;
  state.namespace = session.namespace;
  document.getElementById("nav").hidden = false;
  document.getElementById("who").textContent = session.keyName;
  document.getElementById("ns").textContent = session.namespace;
}

// ---- message rates: two readings of the broker's counters make a rate ---------------------------------------

const rates = new Map(); // path -> { at, in, out, inRate, outRate, history: [[in/s, out/s], ...] }

function noteRate(entity) {
  const now = performance.now();
  const last = rates.get(entity.path);
  if (last && now - last.at < 1000) return last; // readings too close together make no rate
  const entry = { at: now, in: entity.messagesIn, out: entity.messagesOut, inRate: 0, outRate: 0,
                  history: last ? last.history : [] };
  if (last && now > last.at) {
    const seconds = (now - last.at) / 1000;
    entry.inRate = Math.max(0, (entity.messagesIn - last.in) / seconds);
    entry.outRate = Math.max(0, (entity.messagesOut - last.out) / seconds);
    entry.history = [...last.history, [entry.inRate, entry.outRate]].slice(-60);
  }
  rates.set(entity.path, entry);
  return entry;
}

function rateText(value) {
  return value >= 10 ? value.toFixed(0) : value.toFixed(1);
}

function chart(history) {
  const ns = "http://www.w3.org/2000/svg";
  const width = 360, height = 80;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("id", "rate-chart");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "messages in and out per second");
  const top = Math.max(1, ...history.flat());
  const frame = document.createElementNS(ns, "rect");
  for (const [k, v] of [["x", 0], ["y", 0], ["width", width], ["height", height], ["fill", "#fff"], ["stroke", "#e1e4e8"]]) frame.setAttribute(k, v);
  svg.append(frame);
  [[0, "#2c6fbb"], [1, "#c0562c"]].forEach(([index, color]) => {
    const line = document.createElementNS(ns, "polyline");
    const points = history.map((pair, i) => `${(i / 59) * width},${height - 4 - (pair[index] / top) * (height - 8)}`);
    line.setAttribute("points", points.join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", color);
    line.setAttribute("stroke-width", "2");
    svg.append(line);
  });
  return svg;
}

// ---- the namespace page ----------------------------------------------------------------------------------

const COUNT_COLUMNS = [
  ["active", "Active"], ["deadLetter", "Dead-letter"], ["scheduled", "Scheduled"], ["deferred", "Deferred"],
  ["transfer", "Transfer"], ["transferDeadLetter", "Transfer DLQ"],
];

function entityRow(entity) {
  const cells = COUNT_COLUMNS.map(([key]) => el("td", { class: "num", "data-count": key },
                                               String(entity.counts[key])));
  return el("tr", { "data-path": entity.path },
    el("td", {}, el("a", { href: "#/entity/" + encodeURIComponent(entity.path) }, entity.path)),
    el("td", {}, entity.kind), ...cells,
    el("td", { class: "num", "data-count": "sizeInBytes" }, formatBytes(entity.counts.sizeInBytes)),
    el("td", { class: "num", "data-count": "inRate" }, rateText(noteRate(entity).inRate)),
    el("td", { class: "num", "data-count": "outRate" }, rateText(rates.get(entity.path).outRate)),
    el("td", { "data-count": "availability" }, entity.availability));
}

async function renderNamespace() {
  const main = document.getElementById("main");
  const body = el("tbody", { id: "entities" });
  const table = el("table", { id: "entity-table" },
    el("thead", {}, el("tr", {}, el("th", {}, "Entity"), el("th", {}, "Kind"),
                       ...COUNT_COLUMNS.map(([, label]) => el("th", { class: "num" }, label)),
                       el("th", { class: "num" }, "Size"), el("th", { class: "num" }, "In/s"),
                       el("th", { class: "num" }, "Out/s"), el("th", {}, "Availability"))),
    body);
  const refreshed = el("span", { id: "refreshed", class: "muted" });
  main.replaceChildren(el("h1", {}, "Entities ", refreshed), createForm(), table);
  await refreshNamespace();
  startTimer(refreshNamespace);
}

async function refreshNamespace() {
  const entities = await api("GET", "/entities");
  const body = document.getElementById("entities");
  if (!body) return;
  const rows = new Map([...body.children].map((row) => [row.dataset.path, row]));
  const seen = new Set();
  for (const entity of entities) {
    seen.add(entity.path);
    const row = rows.get(entity.path);
    if (!row) {
      body.append(entityRow(entity));
      continue;
    }
    const rate = noteRate(entity);
    for (const cell of row.querySelectorAll("[data-count]")) {
      const key = cell.dataset.count;
      const text = key === "availability" ? entity.availability
        : key === "inRate" ? rateText(rate.inRate) : key === "outRate" ? rateText(rate.outRate)
        : key === "sizeInBytes" ? formatBytes(entity.counts.sizeInBytes) : String(entity.counts[key]);
      if (cell.textContent !== text) cell.textContent = text;
    }
  }
  for (const [path, row] of rows) if (!seen.has(path)) row.remove();
  const sorted = [...body.children].sort((a, b) => a.dataset.path.toLowerCase().localeCompare(b.dataset.path.toLowerCase()));
  body.replaceChildren(...sorted);
  const stamp = document.getElementById("refreshed");
  if (stamp) stamp.textContent = `(${entities.length}, updated ${new Date().toLocaleTimeString()})`;
}

function createForm() {
  const kind = el("select", { id: "create-kind" }, el("option", { value: "queue" }, "queue"),
                  el("option", { value: "topic" }, "topic"), el("option", { value: "subscription" }, "subscription"));
  const path = el("input", { id: "create-path", placeholder: "name, or topic/subscriptions/name", size: 36 });
  const properties = el("textarea", { id: "create-properties", rows: 2, cols: 40,
                                      placeholder: '{"MaxDeliveryCount": 5}' });
  return el("form", { class: "inline panel", id: "create-form", onsubmit: (event) => {
    event.preventDefault();
    guarded(async () => {
      let props = {};
      if (properties.value.trim()) {
        try { props = JSON.parse(properties.value); } catch (e) { throw new Error("Properties: " + e.message); }
      }
      await api("POST", "/entities", { kind: kind.value, path: path.value.trim(), properties: props });
      notice(`Created ${kind.value} ${path.value.trim()}`);
      path.value = "";
      properties.value = "";
      await refreshNamespace();
    });
  } },
    el("label", {}, "Kind", kind), el("label", {}, "Path", path),
    el("label", {}, "Properties (JSON, Config.json names)", properties),
    el("button", { id: "create-submit", type: "submit" }, "Create"));
}

// ---- an entity's page ---------------------------------------------------------------------------------------

async function renderEntity(path) {
  const entity = await api("GET", entityUrl(path));
  const main = document.getElementById("main");
  const counts = el("table", { id: "entity-counts" },
    el("tr", {}, ...COUNT_COLUMNS.map(([, label]) => el("th", { class: "num" }, label)), el("th", {}, "Size")),
    el("tr", {}, ...COUNT_COLUMNS.map(([key]) => el("td", { class: "num", "data-count": key },
                                                      String(entity.counts[key]))),
       el("td", { "data-count": "sizeInBytes" }, formatBytes(entity.counts.sizeInBytes))));
  const properties = el("textarea", { id: "entity-properties", rows: 10 },
                        JSON.stringify(entity.properties, null, 2));
  const editor = el("div", { class: "panel" }, el("h2", {}, "Properties"), properties,
    el("div", { class: "toolbar" },
      el("button", { id: "entity-save", type: "button", onclick: () => guarded(async () => {
        let props;
        try { props = JSON.parse(properties.value); } catch (e) { throw new Error("Properties: " + e.message); }
        await api("PUT", entityUrl(entity.path), { properties: props });
        notice(`Saved ${entity.path}`);
      }) }, "Save"),
      el("button", { id: "entity-delete", type: "button", class: "danger", onclick: () => guarded(async () => {
        if (!confirm(`Delete ${entity.kind} ${entity.path} and every message in it?`)) return;
        await api("DELETE", entityUrl(entity.path));
        notice(`Deleted ${entity.path}`);
        location.hash = "#/";
      }) }, "Delete")));
  noteRate(entity);
  const rateBox = el("div", { class: "panel", id: "rates" }, el("h2", {}, "Messages per second ",
    el("span", { class: "muted", id: "rate-now" }, "in 0 · out 0")), chart(rates.get(entity.path).history),
    el("div", { class: "muted" }, "blue: in (acknowledged sends) · orange: out (completed or received)"));
  const sections = [el("h1", {}, `${entity.kind} ${entity.path}`), counts, rateBox];
  if (entity.kind === "topic") sections.push(await subscriptionsPanel(entity));
  if (entity.kind !== "topic") sections.push(browser(entity));
  if (entity.kind !== "subscription") sections.push(sendForm(entity));
  if (entity.kind === "subscription") sections.push(await rulesPanel(entity));
  sections.push(editor);
  main.replaceChildren(...sections);
  startTimer(() => refreshCounts(entity.path));
}

async function refreshCounts(path) {
  const entity = await api("GET", entityUrl(path));
  if (entity.kind === "topic") await refreshSubscriptions(entity);
  for (const cell of document.querySelectorAll("#entity-counts [data-count]")) {
    const key = cell.dataset.count;
    const text = key === "sizeInBytes" ? formatBytes(entity.counts.sizeInBytes) : String(entity.counts[key]);
    if (cell.textContent !== text) cell.textContent = text;
  }
  state.counts = entity.counts;
  const rate = noteRate(entity);
  const now = document.getElementById("rate-now");
  if (now) now.textContent = `in ${rateText(rate.inRate)} · out ${rateText(rate.outRate)}`;
  const old = document.getElementById("rate-chart");
  if (old) old.replaceWith(chart(rate.history));
}

// ---- a topic's subscriptions ---------------------------------------------------------------------------

const SUBSCRIPTION_COLUMNS = [["active", "Active"], ["deadLetter", "Dead-letter"], ["scheduled", "Scheduled"],
                              ["deferred", "Deferred"], ["transferDeadLetter", "Transfer DLQ"]];

async function subscriptionsPanel(topic) {
  const body = el("tbody", { id: "subscription-rows" });
  const panel = el("div", { class: "panel", id: "subscriptions" }, el("h2", {}, "Subscriptions"),
    el("table", { id: "subscription-table" },
      el("thead", {}, el("tr", {}, el("th", {}, "Subscription"),
        ...SUBSCRIPTION_COLUMNS.map(([, label]) => el("th", { class: "num" }, label)), el("th", {}, "Status"))),
      body));
  await refreshSubscriptions(topic, body);
  return panel;
}

async function refreshSubscriptions(topic, body) {
  body = body || document.getElementById("subscription-rows");
  if (!body) return;
  const subscriptions = await api("GET", `/entities?kind=subscription&topic=${encodeURIComponent(topic.path)}`);
  const rows = subscriptions.map((s) => el("tr", { "data-path": s.path },
    el("td", {}, el("a", { href: "#/entity/" + encodeURIComponent(s.path) }, s.path.split("/").pop())),
    ...SUBSCRIPTION_COLUMNS.map(([key]) => el("td", { class: "num", "data-count": key }, String(s.counts[key]))),
    el("td", {}, s.status)));
  body.replaceChildren(...rows);
  if (!rows.length) body.append(el("tr", {}, el("td", { colspan: 7, class: "muted" }, "no subscriptions")));
}

// ---- the message browser ------------------------------------------------------------------------------------

const SUB_QUEUES = [["active", "Active"], ["deferred", "Deferred"], ["scheduled", "Scheduled"],
                    ["deadletter", "Dead-letter"], ["transferdeadletter", "Transfer dead-letter"]];
const SUB_QUEUE_COUNTS = { active: "active", deferred: "deferred", scheduled: "scheduled",
                           deadletter: "deadLetter", transferdeadletter: "transferDeadLetter" };

function browser(entity) {
  const b = { entity, from: 0, pages: [], next: null, messages: [] };
  state.browse = b;
  const sub = el("select", { id: "browse-sub-queue", onchange: () => guarded(async () => {
    b.pages = [];
    await load(0); // another sub-queue: its messages from the start
  }) }, ...SUB_QUEUES.map(([value, label]) => el("option", { value }, label)));
  const from = el("input", { id: "browse-from", type: "number", min: 0, value: 0, size: 8 });
  const count = el("input", { id: "browse-count", type: "number", min: 1, max: 100, value: 25, size: 4 });
  const target = el("input", { id: "move-target", placeholder: `(its own: ${entity.path})`, size: 28 });
  const filter = el("input", { id: "move-filter", placeholder: "color = 'red'", size: 28 });
  const rows = el("tbody", { id: "messages" });
  const detail = el("div", { id: "message-detail" });
  const pageInfo = el("span", { id: "page-info", class: "muted" });

  async function load(start) {
    const query = `?subQueue=${sub.value}&fromSequenceNumber=${start}&count=${count.value}`;
    const page = await api("GET", entityUrl(entity.path) + "/$messages" + query);
    b.from = start;
    b.next = page.nextSequenceNumber;
    b.messages = page.messages;
    rows.replaceChildren(...page.messages.map((m) => el("tr", { class: "clickable", "data-seq": m.sequenceNumber,
                                                                 onclick: (event) => {
      if (event.target.tagName !== "INPUT") guarded(() => showMessage(entity, sub.value, m.sequenceNumber, detail));
    } },
      el("td", {}, el("input", { type: "checkbox", class: "pick", value: m.sequenceNumber })),
      el("td", { class: "num" }, String(m.sequenceNumber)), el("td", {}, m.messageId || ""),
      el("td", { class: "state" }, shownState(m)), el("td", {}, time(m.enqueuedTime)), el("td", { class: "num" }, String(m.deliveryCount)),
      el("td", {}, m.subject || ""), el("td", {}, m.deadLetterReason || ""), el("td", { class: "num" }, String(m.size)))));
    pageInfo.textContent = page.messages.length ? `${page.messages.length} from #${start}` : "no messages";
    detail.replaceChildren();
  }

  function picked() {
    return [...rows.querySelectorAll("input.pick:checked")].map((box) => Number(box.value));
  }

  async function resubmit(selection) {
    const body = { subQueue: sub.value, target: target.value.trim() || undefined, ...selection };
    const preview = await api("POST", entityUrl(entity.path) + "/$move", { ...body, dryRun: true });
    const where = target.value.trim() || entity.path;
    const moving = target.value.trim() !== ""; // to another entity: a move; else back to its own: a resubmit
    const [verb, done] = moving ? ["Move", "Moved"] : ["Resubmit", "Resubmitted"];
    if (!confirm(`${verb} ${preview.selected} message(s) from ${entity.path} (${sub.value}) to ${where}?`)) return;
    let outcome;
    if (preview.selected > 500) { // a long move runs in the background; show its progress
      let operation = await api("POST", entityUrl(entity.path) + "/$move", { ...body, background: true });
      while (operation.state === "running") {
        notice(`${moving ? "Moving" : "Resubmitting"}: ${operation.done} of ${operation.total}`);
        await new Promise((resolve) => setTimeout(resolve, 500));
        operation = await api("GET", `/operations/${operation.id}`);
      }
      if (operation.state === "failed") throw new Error(operation.error);
      outcome = operation.outcome;
    } else {
      outcome = await api("POST", entityUrl(entity.path) + "/$move", body);
    }
    notice(`${done} ${outcome.moved} of ${outcome.selected} message(s) to ${where}` +
           (outcome.skipped ? ` (${outcome.skipped} locked or gone, left in place)` : ""));
    await load(b.from);
  }

  const panel = el("div", { class: "panel", id: "browser" }, el("h2", {}, "Messages"),
    el("form", { class: "inline", onsubmit: (event) => { event.preventDefault(); guarded(() => load(Number(from.value) || 0)); } },
      el("label", {}, "Sub-queue", sub), el("label", {}, "From sequence number", from), el("label", {}, "Count", count),
      el("button", { id: "browse-peek", type: "submit" }, "Peek"),
      el("button", { id: "browse-next", type: "button", class: "secondary", onclick: () => guarded(async () => {
        if (b.next === null) { notice("No more messages"); return; }
        b.pages.push(b.from);
        await load(b.next);
      }) }, "Next page"),
      el("button", { id: "browse-previous", type: "button", class: "secondary", onclick: () => guarded(async () => {
        await load(b.pages.length ? b.pages.pop() : 0);
      }) }, "Previous page"), pageInfo),
    el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, ""), el("th", { class: "num" }, "Seq"),
      el("th", {}, "MessageId"), el("th", {}, "State"), el("th", {}, "Enqueued (UTC)"),
      el("th", { class: "num" }, "Deliveries"), el("th", {}, "Subject"), el("th", {}, "Dead-letter reason"),
      el("th", { class: "num" }, "Size"))), rows),
    el("div", { class: "toolbar" },
      el("label", {}, "Move to (empty: resubmit to its entity)", target),
      el("button", { id: "move-selected", type: "button", onclick: () => guarded(async () => {
        const numbers = picked();
        if (!numbers.length) throw new Error("Select messages first");
        await resubmit({ sequenceNumbers: numbers });
      }) }, "Resubmit selected"),
      el("button", { id: "move-all", type: "button", onclick: () => guarded(() => resubmit({ all: true })) },
         "Resubmit all"),
      el("label", {}, "SQL filter over properties", filter),
      el("button", { id: "move-filtered", type: "button", onclick: () => guarded(async () => {
        if (!filter.value.trim()) throw new Error("Write a filter first");
        await resubmit({ filter: filter.value.trim() });
      }) }, "Resubmit matching"),
      el("button", { id: "purge", type: "button", class: "danger", onclick: () => guarded(async () => {
        const fresh = await api("GET", entityUrl(entity.path));
        const expected = fresh.counts[SUB_QUEUE_COUNTS[sub.value]];
        if (!confirm(`Purge ${expected} message(s) from ${entity.path} (${sub.value})? Locked messages stay.`)) return;
        const result = await api("POST", entityUrl(entity.path) + "/$purge", { subQueue: sub.value });
        notice(`Purged ${result.purged} message(s)`);
        await load(0);
      }) }, "Purge"),
      el("button", { id: "cancel-scheduled", type: "button", class: "secondary", onclick: () => guarded(async () => {
        const numbers = picked();
        if (!numbers.length) throw new Error("Select scheduled messages first");
        if (!confirm(`Cancel ${numbers.length} scheduled message(s)?`)) return;
        await api("POST", entityUrl(entity.path) + "/$cancel-scheduled", { sequenceNumbers: numbers });
        notice(`Cancelled ${numbers.length} scheduled message(s)`);
        await load(b.from);
      }) }, "Cancel scheduled")),
    detail);
  return panel;
}

// What the browser calls a message's state: a message in a dead-letter sub-queue is dead-lettered (the
// broker's state field, like the message-state annotation the SDKs read, keeps its three values).
function shownState(m) {
  if (m.subQueue === "deadletter") return "Dead-lettered";
  if (m.subQueue === "transferdeadletter") return "Dead-lettered (transfer)";
  return m.state;
}

function decodeBody(base64) {
  const raw = atob(base64);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return bytes;
}

function bodyAs(bytes, mode) {
  if (mode === "hex") {
    const lines = [];
    for (let i = 0; i < bytes.length; i += 16) {
      const chunk = [...bytes.slice(i, i + 16)];
      lines.push(i.toString(16).padStart(8, "0") + "  " + chunk.map((x) => x.toString(16).padStart(2, "0")).join(" ").padEnd(48) +
                 "  " + chunk.map((x) => (x >= 32 && x < 127 ? String.fromCharCode(x) : ".")).join(""));
    }
    return lines.join("\n");
  }
  const text = new TextDecoder("utf-8", { fatal: false }).decode(bytes);
  if (mode === "json") {
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch (e) { return `(not JSON: ${e.message})\n\n${text}`; }
  }
  return text;
}

async function showMessage(entity, subQueue, sequenceNumber, detail) {
  const m = await api("GET", `${entityUrl(entity.path)}/$messages/${sequenceNumber}?subQueue=${subQueue}`);
  const bytes = decodeBody(m.body);
  const pre = el("pre", { class: "body", id: "message-body" }, bodyAs(bytes, "text"));
  const mode = el("select", { id: "body-mode", onchange: () => { pre.textContent = bodyAs(bytes, mode.value); } },
                  el("option", { value: "text" }, "Text"), el("option", { value: "json" }, "JSON"),
                  el("option", { value: "hex" }, "Hex"));
  const system = [["Sequence number", m.sequenceNumber], ["MessageId", m.messageId], ["State", shownState(m)],
    ["Enqueued (UTC)", time(m.enqueuedTime)], ["Delivery count", m.deliveryCount], ["Size", m.size],
    ["SessionId", m.sessionId], ["PartitionKey", m.partitionKey], ["ContentType", m.contentType],
    ["Subject", m.subject], ["CorrelationId", m.correlationId], ["To", m.to], ["ReplyTo", m.replyTo],
    ["TimeToLive (ms)", m.timeToLiveMs], ["Expires (UTC)", time(m.expiresAt)],
    ["Scheduled (UTC)", time(m.scheduledEnqueueTime)], ["Dead-letter reason", m.deadLetterReason],
    ["Dead-letter description", m.deadLetterDescription]].filter(([, v]) => v !== null && v !== undefined && v !== "");
  const props = Object.entries(m.applicationProperties || {});
  detail.replaceChildren(el("div", { class: "columns" },
    el("div", {}, el("h2", {}, "Properties"),
      el("table", { id: "system-properties" }, ...system.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, String(v))))),
      el("h2", {}, "Application properties"),
      el("table", { id: "application-properties" }, ...props.map(([k, v]) => el("tr", {}, el("th", {}, k),
                                                                               el("td", {}, JSON.stringify(v)))))),
    el("div", {}, el("h2", {}, "Body ", mode), pre)));
}

// ---- sending --------------------------------------------------------------------------------------------------

function sendForm(entity) {
  const field = (id, label, attrs) => { const input = el("input", { id, ...(attrs || {}) }); return [input, el("label", {}, label, input)]; };
  const body = el("textarea", { id: "send-body", rows: 4, placeholder: "message body" });
  const [contentType, contentTypeLabel] = field("send-content-type", "ContentType", { placeholder: "application/json" });
  const [messageId, messageIdLabel] = field("send-message-id", "MessageId");
  const [sessionId, sessionIdLabel] = field("send-session-id", "SessionId");
  const [partitionKey, partitionKeyLabel] = field("send-partition-key", "PartitionKey");
  const [subject, subjectLabel] = field("send-subject", "Subject");
  const [ttl, ttlLabel] = field("send-ttl", "TimeToLive (s)", { type: "number", min: 1 });
  const [scheduled, scheduledLabel] = field("send-scheduled", "Scheduled (UTC)", { type: "datetime-local" });
  const props = el("textarea", { id: "send-properties", rows: 2, placeholder: '{"color": "red"}' });
  return el("form", { class: "panel", id: "send-form", onsubmit: (event) => {
    event.preventDefault();
    guarded(async () => {
      let applicationProperties = {};
      if (props.value.trim()) {
        try { applicationProperties = JSON.parse(props.value); } catch (e) { throw new Error("Application properties: " + e.message); }
      }
      const message = { body: body.value, applicationProperties };
      for (const [key, input] of [["contentType", contentType], ["messageId", messageId], ["sessionId", sessionId],
                                  ["partitionKey", partitionKey], ["subject", subject]]) {
        if (input.value.trim()) message[key] = input.value.trim();
      }
      if (ttl.value) message.timeToLiveMs = Number(ttl.value) * 1000;
      if (scheduled.value) message.scheduledEnqueueTimeMs = Date.parse(scheduled.value + "Z");
      await api("POST", entityUrl(entity.path) + "/$send", message);
      notice(`Sent a message to ${entity.path}`);
      body.value = "";
    });
  } },
    el("h2", {}, "Send a message"), body,
    el("div", { class: "toolbar" }, contentTypeLabel, messageIdLabel, sessionIdLabel, partitionKeyLabel, subjectLabel,
       ttlLabel, scheduledLabel),
    el("label", {}, "Application properties (JSON object)", props),
    el("div", { class: "toolbar" }, el("button", { id: "send-submit", type: "submit" }, "Send")));
}

// ---- rules ---------------------------------------------------------------------------------------------------------

// A correlation filter's fields as the console names them (Subject is the filter's Label).
const CORRELATION_FIELDS = [["CorrelationId", "CorrelationId"], ["MessageId", "MessageId"], ["To", "To"],
  ["ReplyTo", "ReplyTo"], ["Label", "Subject"], ["SessionId", "SessionId"], ["ReplyToSessionId", "ReplyToSessionId"],
  ["ContentType", "ContentType"]];

function quoted(value) {
  return typeof value === "string" ? `'${value.replaceAll("'", "''")}'` : JSON.stringify(value);
}

// A rule's filter as a Service Bus Explorer user reads it: its kind, then its expression or its matches.
function filterText(properties) {
  switch (properties.FilterType) {
    case "Sql": return properties.SqlFilter.SqlExpression;
    case "Correlation": {
      const c = properties.CorrelationFilter || {};
      const parts = CORRELATION_FIELDS.filter(([key]) => c[key] !== undefined && c[key] !== null)
        .map(([key, label]) => `${label} = ${quoted(c[key])}`);
      for (const [key, value] of Object.entries(c.Properties || {})) parts.push(`${key} = ${quoted(value)}`);
      return parts.join(" AND ");
    }
    case "True": return "every message";
    case "False": return "no message";
    default: return properties.FilterType;
  }
}

function filterKind(properties) {
  return { Sql: "SQL filter", Correlation: "Correlation filter", True: "True filter", False: "False filter" }[
    properties.FilterType] || properties.FilterType;
}

// "name=value" lines (a string), "name:=JSON" for a number, boolean or null (as the CLI's --property).
function parseProperties(text) {
  const out = {};
  for (const line of text.split("\n").map((l) => l.trim()).filter(Boolean)) {
    const at = line.indexOf("=");
    if (at < 1) throw new Error(`Correlation properties: '${line}' is not name=value`);
    let key = line.slice(0, at), value = line.slice(at + 1);
    if (key.endsWith(":")) {
      key = key.slice(0, -1);
      try { value = JSON.parse(value); } catch (e) { throw new Error(`Correlation properties: ${key}: ${e.message}`); }
    }
    out[key.trim()] = value;
  }
  return out;
}

async function rulesPanel(entity) {
  const rules = await api("GET", entityUrl(entity.path) + "/$rules");
  const name = el("input", { id: "rule-name", placeholder: "name" });
  const kind = el("select", { id: "rule-filter-type" }, el("option", { value: "Sql" }, "SQL filter"),
                  el("option", { value: "Correlation" }, "Correlation filter"),
                  el("option", { value: "True" }, "True (every message)"),
                  el("option", { value: "False" }, "False (no message)"));
  const sql = el("input", { id: "rule-filter", placeholder: "color = 'red'", size: 40 });
  const sqlLabel = el("label", {}, "SQL filter", sql);
  const correlationInputs = CORRELATION_FIELDS.map(([key, label]) =>
    [key, el("input", { id: `rule-correlation-${label.toLowerCase()}`, size: 14 }), label]);
  const correlationProps = el("textarea", { id: "rule-correlation-properties", rows: 2, cols: 30,
                                            placeholder: "color=red\npriority:=2" });
  const correlation = el("div", { class: "toolbar", id: "rule-correlation", hidden: true },
    ...correlationInputs.map(([, input, label]) => el("label", {}, label, input)),
    el("label", {}, "Application properties (name=value, name:=JSON)", correlationProps));
  const action = el("input", { id: "rule-action", placeholder: "SET x = 1 (optional)", size: 30 });
  kind.addEventListener("change", () => {
    sqlLabel.hidden = kind.value !== "Sql";
    correlation.hidden = kind.value !== "Correlation";
  });
  const header = el("tr", {}, el("th", {}, "Name"), el("th", { colspan: 2 }, "Filter"), el("th", {}, "Action"),
                    el("th", {}, ""));
  return el("div", { class: "panel", id: "rules" }, el("h2", {}, "Rules"),
    el("table", { id: "rule-table" }, header, ...rules.map((r) => el("tr", { "data-rule": r.name }, el("td", {}, r.name),
      el("td", { class: "muted filter-kind" }, filterKind(r.rule.Properties)),
      el("td", { class: "filter" }, el("code", {}, filterText(r.rule.Properties))),
      el("td", { class: "action" }, r.rule.Properties.Action
        ? el("code", {}, r.rule.Properties.Action.SqlExpression) : el("span", { class: "muted" }, "none")),
      el("td", {}, el("button", { type: "button", class: "danger", onclick: () => guarded(async () => {
        if (!confirm(`Delete rule ${r.name}?`)) return;
        await api("DELETE", `${entityUrl(entity.path)}/$rules/${encodeURIComponent(r.name)}`);
        route();
      }) }, "Delete"))))),
    el("form", { onsubmit: (event) => {
      event.preventDefault();
      guarded(async () => {
        const properties = { FilterType: kind.value };
        if (kind.value === "Sql") properties.SqlFilter = { SqlExpression: sql.value };
        if (kind.value === "Correlation") {
          const filter = {};
          for (const [key, input] of correlationInputs) if (input.value.trim()) filter[key] = input.value.trim();
          const props = parseProperties(correlationProps.value);
          if (Object.keys(props).length) filter.Properties = props;
          properties.CorrelationFilter = filter;
        }
        if (action.value.trim()) properties.Action = { SqlExpression: action.value.trim() };
        await api("POST", entityUrl(entity.path) + "/$rules", { rule: { Name: name.value.trim(), Properties: properties } });
        await route();
        notice(`Added rule ${name.value.trim()}`);
      });
    } }, el("div", { class: "toolbar" }, el("label", {}, "Name", name), el("label", {}, "Filter", kind), sqlLabel,
           el("label", {}, "Action", action), el("button", { id: "rule-add", type: "submit" }, "Add rule")),
      correlation));
}

// ---- keys and stores --------------------------------------------------------------------------------------------------

// A key is shown masked until its Show button is pressed (someone may be looking over the shoulder).
function secret(value) {
  if (!value) return "";
  const shown = el("code", { class: "secret" }, "••••••••••••");
  const button = el("button", { type: "button", class: "secondary reveal" }, "Show");
  button.addEventListener("click", () => {
    const hidden = button.textContent === "Show";
    shown.textContent = hidden ? value : "••••••••••••";
    button.textContent = hidden ? "Hide" : "Show";
  });
  return el("span", { class: "key" }, shown, " ", button);
}

async function renderKeys() {
  const keys = await api("GET", "/keys");
  const row = (k) => el("tr", { "data-key-name": k.keyName, "data-scope": k.entity || "" },
    el("td", {}, k.entity || "(namespace)"), el("td", {}, k.keyName),
    el("td", {}, k.rights.join(", ")), el("td", { class: "primary-key" }, secret(k.primaryKey)),
    el("td", { class: "secondary-key" }, secret(k.secondaryKey)),
    el("td", {}, ...["PrimaryKey", "SecondaryKey"].map((type) => el("button", { type: "button", class: "secondary",
      onclick: () => guarded(async () => {
        if (!confirm(`Regenerate the ${type} of ${k.keyName}? Tokens signed with the old key stop working.`)) return;
        await api("POST", "/keys/regenerate", { entity: k.entity || undefined, keyName: k.keyName, keyType: type });
        notice(`Regenerated the ${type} of ${k.keyName}`);
        await renderKeys();
      }) }, `Regenerate ${type === "PrimaryKey" ? "primary" : "secondary"}`))));
  document.getElementById("main").replaceChildren(el("h1", {}, "Shared access keys"),
    el("table", {}, el("tr", {}, ...["Scope", "Key name", "Rights", "Primary key", "Secondary key", ""].map((h) => el("th", {}, h))),
       ...keys.map(row)));
}

async function renderStores() {
  const stores = await api("GET", "/stores");
  document.getElementById("main").replaceChildren(el("h1", {}, "Messaging stores"),
    el("table", {}, el("tr", {}, el("th", {}, "Store"), el("th", {}, "State"), el("th", {}, "")),
      ...stores.map((s) => el("tr", {}, el("td", {}, s.name), el("td", {}, s.online ? "online" : "offline"),
        el("td", {}, el("button", { type: "button", class: s.online ? "danger" : "", onclick: () => guarded(async () => {
          const next = s.online ? "offline" : "online";
          if (!confirm(`Take store ${s.name} ${next}?`)) return;
          await api("POST", `/stores/${encodeURIComponent(s.name)}/${next}`);
          await renderStores();
        }) }, s.online ? "Take offline" : "Bring online"))))));
}

// ---- geo-replication ------------------------------------------------------------------------------------------------

async function renderGeo() {
  const status = await api("GET", "/geo");
  const when = (t) => (t == null ? "" : new Date(t * 1000).toISOString());
  const promote = (site, mode) => el("button", { type: "button", class: mode === "forced" ? "danger" : "",
    onclick: () => guarded(async () => {
      const warning = mode === "forced" ? " Messages acknowledged after its last replayed transaction may be lost." : "";
      if (!confirm(`Promote site ${site} (${mode})?${warning}`)) return;
      const report = await api("POST", "/geo/promote", { site, mode });
      notice(`Site ${report.site} is the primary (epoch ${report.epoch})` +
        (mode === "forced" ? `; loss bound: LSN ${report.lsn} at ${when(report.bound_time)}` : "; nothing lost"));
      await renderGeo();
    }) }, `Promote (${mode})`);
  const row = (s) => el("tr", { "data-site": s.site },
    el("td", {}, s.site), el("td", { class: "geo-role" }, s.role), el("td", {}, s.reason),
    el("td", {}, String(s.database.timeline ?? "")), el("td", {}, s.database.lsn || ""),
    el("td", {}, String(s.database.epoch)),
    el("td", { class: "geo-lag" }, s.lag ? `${s.lag.bytes ?? "?"} bytes, ${s.lag.seconds == null ? "?" : s.lag.seconds.toFixed(3) + " s"}` : ""),
    el("td", { class: "geo-mode" }, s.lag ? s.lag.mode : ""),
    el("td", {}, s.lastReplayedLsn ? `${s.lastReplayedLsn} at ${when(s.lastReplayedTime)}` : ""),
    el("td", {}, ...(s.role === "primary" ? [] : [promote(s.site, "planned"), promote(s.site, "forced")])));
  document.getElementById("main").replaceChildren(el("h1", {}, "Geo-replication"),
    el("table", {}, el("tr", {}, ...["Site", "Role", "Why", "Timeline", "LSN", "Epoch", "Lag", "Mode",
                                     "Last replayed", ""].map((h) => el("th", {}, h))),
      ...status.sites.map(row)));
}

// ---- routing --------------------------------------------------------------------------------------------------------

async function route() {
  stopTimer();
  if (!state.csrf) {
    try { startSession(await api("GET", "/session")); } catch (e) { renderLogin(""); return; }
  }
  const hash = location.hash || "#/";
  await guarded(async () => {
    if (hash.startsWith("#/entity/")) await renderEntity(decodeURIComponent(hash.slice("#/entity/".length)));
    else if (hash === "#/keys") await renderKeys();
    else if (hash === "#/stores") await renderStores();
    else if (hash === "#/geo") await renderGeo();
    else await renderNamespace();
  });
}

window.addEventListener("hashchange", () => { notice(""); showError(""); route(); });
document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("logout").addEventListener("click", () => guarded(async () => {
    await api("POST", "/logout");
    state.csrf = null;
    renderLogin("");
  }));
  route();
});
