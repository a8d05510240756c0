// brook dashboard: polls the JSON API about every second and redraws the page. The
// DOM is built with textContent and SVG elements only, never from HTML strings.
"use strict";

const POLL_MS = 1000;
const body = document.body;
const page = body.dataset.page;
const jobId = body.dataset.job;
// Recent counters per key, for rates: key -> [{t, values}], oldest first.
const previous = new Map();
// Rates are taken over at least this span of report time (ms): the tasks publish
// their counters about once a second, so two reports 500 ms apart often show the
// same counts (a rate of 0 every other report, twice the truth in between).
const RATE_SPAN_MS = 2000;

function el(tag, attrs, ...children) {
  const e = tag.startsWith("svg:")
    ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
    : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function td(value, cls) {
  return el("td", cls ? { class: cls } : {}, value);
}

function fill(tbodyParent, rows) {
  const tbody = document.querySelector(tbodyParent + " tbody");
  tbody.replaceChildren(...rows);
}

function num(n) {
  return n === null || n === undefined ? "-" : Number(n).toLocaleString("en-US");
}

function rate(n) {
  return n === null || n === undefined ? "-" : n >= 100 ? Math.round(n).toLocaleString("en-US") : n.toFixed(1);
}

function pct(n) {
  return n === null || n === undefined ? "-" : Math.min(100, Math.round(n)) + "%";
}

function duration(ms) {
  if (ms === null || ms === undefined) return "-";
  if (ms < 1000) return ms + " ms";
  const s = Math.floor(ms / 1000);
  if (s < 60) return (ms / 1000).toFixed(1) + " s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + " min " + (s % 60) + " s";
  return Math.floor(m / 60) + " h " + (m % 60) + " min";
}

function bytes(n) {
  if (n === null || n === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

function time(ms) {
  if (ms === null || ms === undefined) return "none";
  // i64::MAX: the input ended.
  if (ms >= 9.2e18) return "end";
  const d = new Date(ms);
  return isNaN(d) ? String(ms) : d.toISOString().replace("T", " ").replace("Z", " UTC");
}

// Per-second rates of `values` (an object of counters) for `key` at report time `t`
// (ms), over the last RATE_SPAN_MS of reports (or all there are, if fewer); null
// until there are two reports.
function rates(key, t, values) {
  const samples = previous.get(key) || [];
  const last = samples[samples.length - 1];
  if (!last || t > last.t) {
    samples.push({ t, values });
    // Keep what the span needs: the newest sample at least RATE_SPAN_MS old, and later.
    while (samples.length > 2 && samples[1].t <= t - RATE_SPAN_MS) samples.shift();
    previous.set(key, samples);
  }
  const newest = samples[samples.length - 1];
  const base = samples[0];
  if (newest === base) return null;
  const dt = (newest.t - base.t) / 1000;
  const out = {};
  for (const k of Object.keys(newest.values)) out[k] = Math.max(0, newest.values[k] - base.values[k]) / dt;
  return out;
}

// Set when the session ended: the page stops polling (every request would be refused).
let sessionEnded = false;

async function getJson(url) {
  const r = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (r.status === 401) {
    sessionEnded = true;
    throw new Error("session ended (a restarted server forgets its sessions): run `brook ui` for a new link");
  }
  if (!r.ok) throw new Error(url + ": " + r.status);
  return r.json();
}

function live(ok, message) {
  const l = document.getElementById("live");
  l.textContent = ok ? "live · " + new Date().toLocaleTimeString() : message;
  l.classList.toggle("stale", !ok);
}

// ---- Jobs page ----

function sourceRecordsOut(status) {
  if (!status) return null;
  const sources = new Set(status.splits.map((s) => s.operator));
  const hasInput = new Set((status.edges || []).map((e) => e.to));
  let total = 0;
  status.operators.forEach((o, i) => {
    if (sources.has(o.name) || ((status.edges || []).length && !hasInput.has(i))) total += o.records_out;
  });
  return total;
}

function renderJobs(jobs) {
  const now = Date.now();
  fill("#jobs", jobs.map((j) => {
    const s = j.status;
    const current = j.attempt_history.length ? j.attempt_history[j.attempt_history.length - 1] : null;
    const up = j.state === "RUNNING" && current && !current.ended_ms ? now - current.started_ms : null;
    const r = s ? rates("job:" + j.id, s.updated_ms, { out: sourceRecordsOut(s) }) : null;
    return el("tr", {},
      el("td", {}, el("a", { href: "/ui/jobs/" + encodeURIComponent(j.id) }, j.id)),
      td(j.name),
      td(j.state, "state-" + j.state),
      td(duration(up)),
      td(j.attempts, "num"),
      td(r ? rate(r.out) : "-", "num"),
      td(j.last_failure || ""));
  }));
  document.getElementById("empty").hidden = jobs.length > 0;
}

// ---- Job page ----

function renderSummary(view) {
  const j = view.job;
  const current = j.attempt_history.length ? j.attempt_history[j.attempt_history.length - 1] : null;
  const up = j.state === "RUNNING" && current && !current.ended_ms ? view.now_ms - current.started_ms : null;
  const dl = el("dl", { class: "summary" },
    el("dt", {}, "state"), el("dd", { class: "state-" + j.state }, j.state),
    el("dt", {}, "uptime"), el("dd", {}, duration(up)),
    el("dt", {}, "attempts"), el("dd", {}, j.attempts),
    el("dt", {}, "parallelism"), el("dd", {}, j.parallelism ?? "spec's"),
    el("dt", {}, "last failure"), el("dd", { class: j.last_failure ? "bad" : "" }, j.last_failure || "none"),
    el("dt", {}, "restored from"), el("dd", {}, (current && current.restored_from) || "nothing"));
  document.getElementById("summary").replaceChildren(el("h2", {}, "Job " + j.name), dl);
}

// Actions (runner only): POST with the session's CSRF token from the page, JSON body.
const csrfMeta = document.querySelector('meta[name="brook-csrf"]');
const csrf = csrfMeta ? csrfMeta.content : null;

async function act(action, body, question) {
  if (!window.confirm(question)) return;
  const result = document.getElementById("action-result");
  result.textContent = action + "…";
  try {
    const r = await fetch("/ui/api/jobs/" + encodeURIComponent(jobId) + "/" + action, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf, Accept: "application/json" },
      body: JSON.stringify(body),
    });
    const answer = await r.json().catch(() => ({}));
    result.textContent = r.ok ? action + ": done, the job is " + answer.state : action + " refused: " + (answer.error || r.status);
  } catch (e) {
    result.textContent = action + " failed: " + (e.message || e);
  }
}

function renderActions(j) {
  const section = document.getElementById("actions");
  if (!csrf || !section) return;
  section.hidden = false;
  const live = j.state === "RUNNING" || j.state === "RESTARTING";
  document.getElementById("cancel").disabled = !live;
  document.getElementById("cancel-savepoint").disabled = j.state !== "RUNNING";
  document.getElementById("resume").disabled = !(j.state === "CANCELED" || j.state === "FAILED");
}

if (csrf && page === "job") {
  document.getElementById("cancel").addEventListener("click", () =>
    act("cancel", { savepoint: false }, "Cancel job " + jobId + "? It can be resumed from its last checkpoint."));
  document.getElementById("cancel-savepoint").addEventListener("click", () =>
    act("cancel", { savepoint: true }, "Take a savepoint of job " + jobId + ", then cancel it?"));
  document.getElementById("resume").addEventListener("click", () =>
    act("resume", {}, "Resume job " + jobId + " from its newest savepoint or checkpoint?"));
}

// Tasks: operators joined by chained edges, in graph order of their heads.
function tasksOf(status) {
  const n = status.operators.length;
  const chainedIn = new Map();
  for (const e of status.edges) if (e.chained) chainedIn.set(e.to, e.from);
  const headOf = (i) => { while (chainedIn.has(i)) i = chainedIn.get(i); return i; };
  const tasks = new Map();
  for (let i = 0; i < n; i++) {
    const h = headOf(i);
    if (!tasks.has(h)) tasks.set(h, []);
    tasks.get(h).push(i);
  }
  // Depth of each task: the longest path of unchained edges from a source.
  const depth = new Map();
  const taskOf = new Map();
  for (const [h, ops] of tasks) for (const o of ops) taskOf.set(o, h);
  const d = (h, seen) => {
    if (depth.has(h)) return depth.get(h);
    if (seen.has(h)) return 0;
    seen.add(h);
    let best = 0;
    for (const e of status.edges) {
      if (!e.chained && taskOf.get(e.to) === h) best = Math.max(best, d(taskOf.get(e.from), seen) + 1);
    }
    depth.set(h, best);
    return best;
  };
  for (const h of tasks.keys()) d(h, new Set());
  return { tasks, depth, taskOf };
}

function opRates(status, i) {
  const o = status.operators[i];
  return rates("op:" + i, status.updated_ms, {
    in: o.records_in, out: o.records_out, busy: o.busy_ms, bp: o.backpressure_ms,
  });
}

function renderGraph(status, opRate) {
  const svg = document.getElementById("graph");
  const { tasks, depth, taskOf } = tasksOf(status);
  const W = 250, LINE = 34, PAD = 8, GAPX = 80, GAPY = 24;
  const columns = new Map();
  const pos = new Map();
  for (const [h, ops] of tasks) {
    const c = depth.get(h) || 0;
    const y = columns.get(c) || 20;
    const hgt = PAD * 2 + ops.length * LINE;
    pos.set(h, { x: 10 + c * (W + GAPX), y, h: hgt });
    columns.set(c, y + hgt + GAPY);
  }
  const width = Math.max(...[...pos.values()].map((p) => p.x + W)) + 10;
  const height = Math.max(...columns.values()) + 10;
  svg.setAttribute("viewBox", "0 0 " + width + " " + height);
  svg.setAttribute("height", String(height));
  const defs = el("svg:defs", {}, el("svg:marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" },
    el("svg:path", { d: "M0,0 L10,5 L0,10 z", class: "arrow" })));
  const parts = [defs];
  for (const e of status.edges) {
    if (e.chained) continue;
    const a = pos.get(taskOf.get(e.from)), b = pos.get(taskOf.get(e.to));
    const x1 = a.x + W, y1 = a.y + a.h / 2, x2 = b.x, y2 = b.y + b.h / 2;
    const mx = (x1 + x2) / 2;
    parts.push(el("svg:path", { class: "edge", d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, "marker-end": "url(#arrow)" }));
    parts.push(el("svg:text", { class: "label", x: mx, y: (y1 + y2) / 2 - 4, "text-anchor": "middle" }, e.partitioner));
  }
  for (const [h, ops] of tasks) {
    const p = pos.get(h);
    const busiest = Math.max(...ops.map((i) => (opRate[i] ? opRate[i].bp : 0)));
    parts.push(el("svg:rect", { class: "task" + (busiest > 500 ? " busy" : ""), x: p.x, y: p.y, width: W, height: p.h, rx: 6, "data-task": status.operators[h].name }));
    ops.forEach((i, k) => {
      const o = status.operators[i];
      const r = opRate[i];
      const y = p.y + PAD + k * LINE;
      parts.push(el("svg:text", { class: "op", x: p.x + 10, y: y + 13, "data-operator": o.name }, o.name + "  ×" + o.parallelism));
      const par = o.parallelism || 1;
      const figures = r
        ? `in ${rate(r.in)}/s · out ${rate(r.out)}/s · busy ${pct(r.busy / 10 / par)} · bp ${pct(r.bp / 10 / par)}`
        : `in ${num(o.records_in)} · out ${num(o.records_out)}`;
      parts.push(el("svg:text", {
        class: "figures", x: p.x + 10, y: y + 28, "data-records-in": o.records_in, "data-records-out": o.records_out,
        "data-rate-in": r ? r.in.toFixed(1) : null, "data-rate-out": r ? r.out.toFixed(1) : null,
      }, figures));
    });
  }
  svg.replaceChildren(...parts);
}

function renderOperators(status, opRate) {
  const rows = [];
  status.operators.forEach((o, i) => {
    const r = opRate[i];
    const par = o.parallelism || 1;
    const subs = o.subtasks || [];
    const mean = subs.length ? subs.reduce((a, s) => a + s.records_in, 0) / subs.length : 0;
    const max = subs.length ? Math.max(...subs.map((s) => s.records_in)) : 0;
    const skew = mean > 0 ? max / mean : null;
    rows.push(el("tr", { "data-operator": o.name },
      td(o.name), td("all " + par),
      td(num(o.records_in), "num records-in"), td(num(o.records_out), "num records-out"),
      td(r ? rate(r.in) : "-", "num"), td(r ? rate(r.out) : "-", "num"),
      td(r ? pct(r.busy / 10 / par) : "-", "num"), td(r ? pct(r.bp / 10 / par) : "-", "num"),
      td(time(o.watermark_ms)),
      td(skew === null ? "-" : skew.toFixed(2), skew !== null && skew > 1.5 ? "num hot" : "num")));
    subs.forEach((s, k) => {
      const sr = rates("sub:" + i + ":" + k, status.updated_ms, {
        in: s.records_in, out: s.records_out, busy: s.busy_ms, bp: s.backpressure_ms,
      });
      rows.push(el("tr", { class: "sub" },
        td(""), td(k),
        td(num(s.records_in), "num"), td(num(s.records_out), "num"),
        td(sr ? rate(sr.in) : "-", "num"), td(sr ? rate(sr.out) : "-", "num"),
        td(sr ? pct(sr.busy / 10) : "-", "num"), td(sr ? pct(sr.bp / 10) : "-", "num"),
        td(time(s.watermark_ms)), td("")));
    });
  });
  fill("#operators", rows);
}

const WHY = {
  no_data: "no record yet, and the source sets no idle_timeout: it holds every window back",
  slow_reader: "its reader is behind (records left to read)",
  no_new_data: "read to its end, no new data, not idle (idle_timeout not set or not reached)",
  slowest: "the slowest split",
};

function renderWatermarks(view) {
  const status = view.job.status;
  const rows = [];
  for (const g of view.gates) {
    if (!g.held_by.length) {
      rows.push(el("tr", {}, td(g.operator), td(time(g.watermark_ms)), td("nothing: every upstream split is idle"), td(""), td(""), td("")));
    }
    for (const h of g.held_by) {
      rows.push(el("tr", { "data-holder": h.split },
        td(g.operator), td(time(g.watermark_ms)),
        td(h.source + " / " + h.split + " (subtask " + h.subtask + ")", "hot"),
        td(time(h.watermark_ms)),
        td(h.since_ms === null || h.since_ms === undefined ? "-" : duration(Math.max(0, view.now_ms - h.since_ms)), "num held-for"),
        td(WHY[h.reason] || h.reason)));
    }
  }
  fill("#gates", rows);
  const newest = Math.max(...status.splits.map((s) => (s.watermark_ms === null ? -Infinity : s.watermark_ms)));
  fill("#splits", status.splits.map((s) => el("tr", {},
    td(s.operator), td(s.subtask, "num"), td(s.split), td(time(s.watermark_ms)),
    td(s.watermark_ms === null || !isFinite(newest) ? "-" : duration(newest - s.watermark_ms)),
    td(s.idle ? "idle" : "no"), td(num(s.offset), "num"), td(num(s.lag), "num"),
    td(num(s.late_records), s.late_records ? "num bad" : "num"))));
  fill("#watermarks", status.operators.map((o) => el("tr", {},
    td(o.name), td(time(o.watermark_ms)), td(num(o.late_records), o.late_records ? "num bad" : "num"))));
}

function renderHotKeys(status) {
  const rows = [];
  for (const o of status.operators) {
    (o.hot_keys || []).forEach((k, rank) => rows.push(el("tr", { "data-operator": o.name, "data-key": k.key },
      td(rank === 0 ? o.name : ""), td(k.key, rank === 0 ? "hot" : ""), td(k.subtask, "num"),
      td(num(k.records), "num"), td(pct(k.share * 100), "num"))));
  }
  fill("#hotkeys", rows);
  document.getElementById("hotkeys-empty").hidden = rows.length > 0;
}

// The slowest task's alignment, with every task's in the tooltip.
function alignmentCell(tasks) {
  if (!tasks.length) return td("-");
  const slowest = tasks.reduce((a, b) => (b.alignment_us > a.alignment_us ? b : a));
  const ms = (us) => (us / 1000).toFixed(us < 10000 ? 2 : 0) + " ms";
  const cell = td(ms(slowest.alignment_us) + " (" + slowest.task + ")", "num");
  cell.title = tasks.map((t) => t.task + ": " + ms(t.alignment_us)).join("\n");
  return cell;
}

function renderCheckpoints(status) {
  const c = status.checkpoints;
  document.getElementById("cp-summary").textContent =
    `${c.completed} completed, ${c.failed} failed by this process` +
    (c.last_id ? `; last ${c.last_id} at ${time(c.last_completed_ms)}` : "");
  const history = (c.history || []).slice().reverse();
  fill("#checkpoints", history.map((h) => el("tr", { class: h.error ? "bad" : "" },
    td(h.id, "num"), td(time(h.trigger_ms)), td(duration(h.duration_ms)),
    td(bytes(h.full_size_bytes ?? h.size_bytes), "num"), td(bytes(h.incremental_bytes ?? h.size_bytes), "num"),
    alignmentCell(h.alignment || []),
    td(h.error ? "failed: " + h.error : "completed"))));
}

function renderRetained(job) {
  document.getElementById("cp-restored").textContent =
    "latest restored: " + (job.latest_restored || "none (the job started empty or from its savepoint only)");
  fill("#retained", (job.retained_checkpoints || []).map((c) => el("tr", { "data-checkpoint": c.id },
    td(c.id, "num"), td(time(c.timestamp_ms)), td(bytes(c.full_size_bytes || c.size_bytes), "num"),
    td(c.restored_by.length ? c.restored_by.join(", ") : "-"))));
}

function renderSavepoints(job) {
  const sps = job.savepoints || [];
  fill("#savepoints", sps.map((p, i) => el("tr", { "data-savepoint": p }, td(i + 1, "num"), td(p))).reverse());
  document.getElementById("savepoints-empty").hidden = sps.length > 0;
}

function renderAttempts(job) {
  fill("#attempts", job.attempt_history.slice().reverse().map((a) => el("tr", {},
    td(a.number, "num"), td(time(a.started_ms)), td(a.ended_ms ? time(a.ended_ms) : "running"),
    td(a.outcome || ""), td(a.restored_from || ""),
    el("td", {}, a.stderr_tail ? el("pre", {}, a.stderr_tail) : ""))));
}

function renderJob(view) {
  renderSummary(view);
  renderActions(view.job);
  renderAttempts(view.job);
  renderRetained(view.job);
  renderSavepoints(view.job);
  const status = view.job.status;
  if (!status) return;
  const opRate = status.operators.map((_, i) => opRates(status, i));
  renderGraph(status, opRate);
  renderOperators(status, opRate);
  renderHotKeys(status);
  renderWatermarks(view);
  renderCheckpoints(status);
}

// ---- Topics and groups page ----

// The lag chart's time axis: the last 10 minutes, ending at the newest point (the
// server keeps this much; fewer points after a restart leave the left part empty).
const LAG_SPAN_MS = 10 * 60 * 1000;

// A group's total lag over the last minutes as a small SVG line, its largest and
// latest values in data attributes (and the tooltip).
function lagChart(points) {
  const W = 160, H = 36;
  if (!points || !points.length) return td("-");
  const t1 = points[points.length - 1].t_ms, t0 = t1 - LAG_SPAN_MS;
  const max = Math.max(...points.map((p) => p.lag));
  const last = points[points.length - 1].lag;
  const x = (t) => (Math.max(t, t0) - t0) / LAG_SPAN_MS * (W - 4) + 2;
  const y = (v) => H - 2 - (max > 0 ? (v / max) * (H - 4) : 0);
  const svg = el("svg:svg", {
    class: "lagchart", width: W, height: H, viewBox: `0 0 ${W} ${H}`,
    "data-lag-max": max, "data-lag-last": last, "data-points": points.length,
  },
    el("svg:title", {}, `lag over the last ${duration(t1 - points[0].t_ms)} (of 10 min): max ${num(max)}, now ${num(last)}`),
    el("svg:polyline", { points: points.map((p) => x(p.t_ms).toFixed(1) + "," + y(p.lag).toFixed(1)).join(" ") }));
  return el("td", {}, svg, el("span", { class: "note" }, " max " + num(max) + ", now " + num(last)));
}

function renderTopics(view) {
  document.getElementById("nolog").hidden = view.log;
  const topics = [];
  for (const t of view.topics) {
    const retention = (t.retention_ms === null ? "no time limit" : duration(t.retention_ms)) +
      (t.retention_bytes === null ? "" : ", " + bytes(t.retention_bytes) + " per partition") + " (" + t.cleanup_policy + ")";
    t.partitions.forEach((p, i) => topics.push(el("tr", { "data-topic": t.name, "data-partition": p.partition },
      td(i === 0 ? t.name : ""), td(p.partition, "num"), td(num(p.start), "num"), td(num(p.end), "num"),
      td(num(p.stable), "num"), td(bytes(p.size_bytes), "num"), td(p.segments, "num"), td(i === 0 ? retention : ""))));
  }
  fill("#topics", topics);
  const groups = [];
  for (const g of view.groups) {
    const members = g.members.map((m) => m.client_id + " (" + m.partitions.join(", ") + ")").join("; ") || "none";
    const rows = g.partitions.length ? g.partitions : [null];
    rows.forEach((p, i) => groups.push(el("tr", { "data-group": g.group },
      td(i === 0 ? g.group : ""), td(i === 0 ? g.state : ""), td(i === 0 ? members : ""),
      i === 0 ? lagChart(g.lag_history) : td(""),
      td(p ? p.topic + "/" + p.partition : "-"), td(p ? num(p.committed) : "-", "num"), td(p ? num(p.end) : "-", "num"),
      td(p ? (p.out_of_range ? "out of range" : num(p.lag)) : "-", p && p.lag ? "num hot" : "num"),
      td(p && p.member ? p.member : ""))));
  }
  fill("#groups", groups);
}

// The job page's last report time (ms), for the long poll.
let lastReport = null;

async function tick() {
  try {
    if (page === "jobs") renderJobs(await getJson("/ui/api/jobs"));
    else if (page === "topics") renderTopics(await getJson("/ui/api/topics"));
    else if (page === "job") {
      // Long poll: the server answers when a report newer than the last one lands.
      const view = await getJson("/ui/api/jobs/" + encodeURIComponent(jobId) + (lastReport === null ? "" : "?after=" + lastReport));
      // Only a job with a process writes new reports: the others are polled.
      const live = view.job.state === "RUNNING" || view.job.state === "RESTARTING";
      lastReport = live && view.job.status ? view.job.status.updated_ms : null;
      renderJob(view);
    }
    live(true);
  } catch (e) {
    live(false, String(e.message || e));
  }
  if (!sessionEnded) setTimeout(tick, POLL_MS);
}

tick();
