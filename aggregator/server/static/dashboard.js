// The dashboard: polls the REST API every two seconds and renders plain tables and SVG charts.
// A bearer token, when the server requires one, is given once as #token=... and kept locally.
"use strict";
const params = new URLSearchParams(location.hash.slice(1));
if (params.get("token")) localStorage.setItem("wheelfed-token", params.get("token"));
const token = localStorage.getItem("wheelfed-token");
let selectedJob = null;
//: jobs whose rows get a small chart of their steps (the newest ones)
const SPARK_JOBS = 8;
//: what one step of each algorithm is called
const UNITS = { "fedscs-xgb": ["round", "rounds"], "fedforest": ["level", "levels"],
  "fedga-tree": ["generation", "generations"] };

async function api(path) {
  const response = await fetch(path, { headers: token ? { Authorization: "Bearer " + token } : {} });
  if (!response.ok) throw new Error(path + ": " + response.status);
  return response.json();
}

function cell(value, className) {
  const td = document.createElement("td");
  td.textContent = value === null || value === undefined || value === "" ? "–" : String(value);
  if (className) td.className = className;
  return td;
}

function fill(tableId, rows, toCells, onClick, isSelected) {
  const body = document.querySelector("#" + tableId + " tbody");
  body.replaceChildren(...rows.map((row) => {
    const tr = document.createElement("tr");
    toCells(row).forEach((value) => tr.appendChild(value instanceof Node ? value : cell(value)));
    if (onClick) tr.addEventListener("click", () => onClick(row));
    if (isSelected && isSelected(row)) tr.className = "selected";
    return tr;
  }));
}

function age(seconds) {
  if (seconds < 1) return "now";
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["min", 60]]) {
    if (seconds >= size) return Math.floor(seconds / size) + " " + unit + " ago";
  }
  return Math.floor(seconds) + " s ago";
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return null;
  if (seconds < 60) return seconds.toFixed(seconds < 10 ? 1 : 0) + " s";
  if (seconds < 3600) return Math.floor(seconds / 60) + " min " + Math.round(seconds % 60) + " s";
  return Math.floor(seconds / 3600) + " h " + Math.round((seconds % 3600) / 60) + " min";
}

function bytes(n) {
  if (n === null || n === undefined) return null;
  for (const [unit, size] of [["GB", 1e9], ["MB", 1e6], ["kB", 1e3]]) if (n >= size) return (n / size).toFixed(1) + " " + unit;
  return n + " B";
}

function clock(seconds) {
  if (!seconds) return null;
  return new Date(seconds * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function fmt(x) { return typeof x === "number" ? x.toFixed(3) : x; }

function isoUs(us) { return new Date(us / 1000).toISOString().replace(/\.\d+Z$/, "Z"); }

function units(algorithm) { return UNITS[algorithm] || ["step", "steps"]; }

// A gateway's health: red offline; amber when something needs a look (the sensor link is not up,
// no status for longer than the server's stale limit, statuses it could not read, a model it
// refused); green otherwise. The colour always comes with the words.
function health(g, now) {
  if (!g.online) return { level: "bad", text: "offline", detail: [] };
  const detail = [];
  if (g.stale) detail.push("stale: no status for " + age(g.silent_s).replace(" ago", "") +
    " (counts may be out of date)");
  if (g.link && g.link !== "up") detail.push("sensor link " + g.link);
  if (g.faults) detail.push(g.faults + " unreadable status" + (g.faults > 1 ? "es" : ""));
  if (g.model_error) detail.push("model refused: " + g.model_error);
  return { level: detail.length ? "warn" : "ok", text: detail.length ? "online, needs a look" : "online", detail };
}

function healthCell(g, now) {
  const h = health(g, now);
  const td = cell(h.text, h.level);
  td.dataset.health = h.level;
  h.detail.forEach((line) => {
    const span = document.createElement("span");
    span.className = "health-detail";
    span.textContent = line;
    td.appendChild(span);
  });
  return td;
}

function linkCell(g) {
  if (!g.online || !g.link) return cell(g.link);
  return cell(g.link, g.link === "up" ? "ok" : "warn");
}

// The privacy ledger: per gateway the lifetime epsilon of its most-used window and what is left.
function showPrivacy(privacy) {
  document.getElementById("privacy-cap").textContent = "cap: ε " + privacy.epsilon_cap + " per window over its " +
    "lifetime (δ " + privacy.delta + "), every private job that used it together";
  fill("privacy", privacy.gateways, (g) => [g.gateway, g.spent_epsilon.toFixed(2), g.remaining_epsilon.toFixed(2),
    g.jobs,
    g.running.length ? "running: " + g.running.join(", ")
      : g.fresh_since_us === null ? "the beginning" : isoUs(g.fresh_since_us)]);
}

const SVG = "http://www.w3.org/2000/svg";
function svgNode(name, attrs, text) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

// What a job's chart shows per step: FedSCS-XGB its training loss (a private job: the epsilon
// spent so far), FedForest the splits it made per level (bars), FedGA-Tree the best fitness of
// each generation; any other numbers it reported, else the seconds each step took.
function series(job) {
  const rounds = job.rounds || [];
  const has = (key) => rounds.length && rounds.every((r) => typeof r.metrics[key] === "number");
  const preferred = { "fedscs-xgb": ["train_loss", "epsilon"], "fedforest": ["splits", "nodes", "epsilon"],
    "fedga-tree": ["best_fitness"] }[job.algorithm] || [];
  const named = { train_loss: "training loss", epsilon: "ε spent so far", splits: "splits made",
    nodes: "nodes grown", best_fitness: "best fitness" };
  for (const key of preferred) if (has(key)) return { key, label: named[key] || key, bars: job.algorithm === "fedforest",
    values: rounds.map((r) => r.metrics[key]) };
  const other = rounds.length ? Object.keys(rounds[0].metrics).find((k) => has(k)) : undefined;
  if (other) return { key: other, label: named[other] || other, bars: false, values: rounds.map((r) => r.metrics[other]) };
  return { key: "elapsed_s", label: "seconds per step", bars: true, values: rounds.map((r) => r.elapsed_s) };
}

function drawCurve(job) {
  const svg = document.getElementById("curve");
  svg.replaceChildren();
  const [one, many] = units(job.algorithm);
  const rounds = job.rounds || [];
  const caption = document.getElementById("curve-caption");
  if (!rounds.length) {
    caption.textContent = job.job_id + " (" + job.algorithm + "): " + (job.state === "queued" ? "queued, not started"
      : job.state === "running" ? "running, no " + one + " completed yet"
        : job.state + " with no " + one + " stored" + (job.error ? " (" + job.error + ")" : ""));
    return;
  }
  const s = series(job);
  caption.textContent = job.job_id + " (" + job.algorithm + ", " + job.state + "): " + s.label + " per " + one +
    ", " + job.completed + " of " + job.total + " " + many;
  const W = 640, H = 200, left = 56, right = 12, top = 12, bottom = 36;
  const low = Math.min(0, ...s.values), high = Math.max(...s.values);
  const lo = s.bars ? Math.min(0, low) : Math.min(...s.values), span = (high - lo) || 1;
  const n = s.values.length, plotW = W - left - right, plotH = H - top - bottom;
  const x = (i) => left + (s.bars ? (i + 0.5) * plotW / n : (n === 1 ? plotW / 2 : (i * plotW) / (n - 1)));
  const y = (v) => top + plotH - ((v - lo) / span) * plotH;
  // axes, ticks and their labels
  svg.appendChild(svgNode("line", { x1: left, y1: top, x2: left, y2: top + plotH, stroke: "#555" }));
  svg.appendChild(svgNode("line", { x1: left, y1: top + plotH, x2: W - right, y2: top + plotH, stroke: "#555" }));
  [lo, lo + span / 2, lo + span].forEach((v) => {
    svg.appendChild(svgNode("text", { x: left - 4, y: y(v) + 3, "font-size": 10, "text-anchor": "end",
      class: "y-tick" }, Number(v.toPrecision(3)).toString()));
    svg.appendChild(svgNode("line", { x1: left - 3, y1: y(v), x2: left, y2: y(v), stroke: "#555" }));
  });
  const every = Math.max(1, Math.ceil(n / 12));
  rounds.forEach((r, i) => {
    if (i % every === 0 || i === n - 1) {
      svg.appendChild(svgNode("text", { x: x(i), y: top + plotH + 13, "font-size": 10, "text-anchor": "middle",
        class: "x-tick" }, String(r.step)));
    }
  });
  svg.appendChild(svgNode("text", { x: left + plotW / 2, y: H - 4, "font-size": 11, "text-anchor": "middle",
    class: "x-title" }, one));
  svg.appendChild(svgNode("text", { x: 12, y: top + plotH / 2, "font-size": 11, "text-anchor": "middle",
    class: "y-title", transform: "rotate(-90 12 " + (top + plotH / 2) + ")" }, s.label));
  if (s.bars) {
    const w = Math.max(2, plotW / n - 4);
    s.values.forEach((v, i) => svg.appendChild(svgNode("rect", { class: "bar", x: x(i) - w / 2, y: y(Math.max(v, lo)),
      width: w, height: Math.max(0, y(lo) - y(v)) }, undefined)));
  } else {
    svg.appendChild(svgNode("polyline", { points: s.values.map((v, i) => x(i) + "," + y(v)).join(" "),
      fill: "none", stroke: "#3b78b5", "stroke-width": 2 }));
    s.values.forEach((v, i) => svg.appendChild(svgNode("circle", { cx: x(i), cy: y(v), r: 3, fill: "#24415f" })));
  }
}

// A job's steps in its row: a small line (or bars, for a forest's levels) of its chart's series.
function sparkCell(job) {
  const td = document.createElement("td");
  if (!job || !job.rounds || !job.rounds.length) {
    td.textContent = "–";
    return td;
  }
  const s = series(job);
  const low = Math.min(...s.values, s.bars ? 0 : Infinity), high = Math.max(...s.values), span = (high - low) || 1;
  const n = s.values.length;
  const svg = svgNode("svg", { class: "spark", viewBox: "0 0 90 22", role: "img",
    "aria-label": s.label + " per " + units(job.algorithm)[0] });
  if (s.bars) {
    s.values.forEach((v, i) => svg.appendChild(svgNode("rect", { class: "bar", x: i * 90 / n + 1, width: Math.max(1, 90 / n - 2),
      y: 21 - ((v - low) / span) * 19, height: ((v - low) / span) * 19 })));
  } else {
    svg.appendChild(svgNode("polyline", { fill: "none", stroke: "#3b78b5", "stroke-width": 1.5, points: s.values.map(
      (v, i) => (n === 1 ? 45 : i * 88 / (n - 1) + 1) + "," + (21 - ((v - low) / span) * 19)).join(" ") }));
  }
  td.appendChild(svg);
  return td;
}

function stepsText(j) {
  const many = units(j.algorithm)[1];
  if (j.state === "completed" && j.completed < j.total) {
    return j.completed + " of up to " + j.total + " " + many + " (ended early)";
  }
  return j.completed + " / " + j.total + " " + many;
}

function attemptsCell(j) {
  if (!j.attempt) return cell(null);
  if (j.attempt === 1) return cell("1");
  const from = (j.resumed_from || []).join(", ");
  return cell(j.attempt + " (resumed " + (j.attempt - 1) + "×" + (from ? ", from step " + from : "") + ")", "warn");
}

function stateCell(j) {
  const level = { completed: "ok", failed: "bad", cancelled: "warn" }[j.state];
  return cell(j.state, level);
}

// Per gateway: its accuracy on its own held-out windows, a small bar, how many windows, and its
// local-only accuracy when the job recorded it.
function perGatewayCell(heldOut) {
  const td = document.createElement("td");
  const entries = heldOut ? Object.entries(heldOut.per_gateway || {}) : [];
  if (!entries.length) {
    td.textContent = "–";
    return td;
  }
  entries.forEach(([gateway, m]) => {
    const span = document.createElement("span");
    span.className = "gw";
    const value = typeof m.accuracy === "number" ? m.accuracy : null;
    span.appendChild(document.createTextNode(gateway + " "));
    if (value !== null) {
      const svg = svgNode("svg", { viewBox: "0 0 40 8", "aria-hidden": "true" });
      svg.appendChild(svgNode("rect", { x: 0, y: 0, width: 40, height: 8, fill: "#e3e6ea" }));
      svg.appendChild(svgNode("rect", { class: "bar", x: 0, y: 0, width: 40 * value, height: 8 }));
      span.appendChild(svg);
    }
    const alone = typeof m.local_only === "number" ? ", alone " + m.local_only.toFixed(3) : "";
    span.appendChild(document.createTextNode(" " + (value === null ? "–" : value.toFixed(3)) +
      (m.windows === null || m.windows === undefined ? "" : " (" + m.windows + alone + ")")));
    td.appendChild(span);
  });
  return td;
}

function accuracyCell(m) {
  const value = m.metrics.accuracy, h = m.held_out;
  if (typeof value !== "number") return cell(m.metrics.rmse !== undefined ? "rmse " + fmt(m.metrics.rmse) : null);
  const poor = h && ((typeof h.chance === "number" && value <= h.chance) ||
    (typeof h.local_only === "number" && value <= h.local_only));
  const td = cell(value.toFixed(3) + (poor ? (value <= (h.chance ?? -1) ? " (≤ chance)" : " (≤ local-only)") : ""),
    poor ? "warn" : undefined);
  return td;
}

async function showEvaluation(model) {
  const box = document.getElementById("evaluation");
  box.replaceChildren();
  if (!model.job_id) return;
  const job = await api("/api/jobs/" + encodeURIComponent(model.job_id));
  const evaluation = job.evaluation || {};
  const title = document.createElement("h3");
  title.textContent = model.label + ": confusion matrix on the held-out windows";
  box.appendChild(title);
  if (!evaluation.confusion) {
    box.appendChild(document.createTextNode(evaluation.skipped ? JSON.stringify(evaluation.skipped)
      : evaluation.failed || "no confusion matrix (not evaluated, or one model per gateway)"));
    return;
  }
  const table = document.createElement("table");
  table.id = "confusion";
  const head = document.createElement("tr");
  ["true \\ predicted", ...evaluation.classes].forEach((c) => head.appendChild(cell(c)));
  table.appendChild(head);
  evaluation.confusion.forEach((row, i) => {
    const tr = document.createElement("tr");
    [evaluation.classes[i], ...row].forEach((c) => tr.appendChild(cell(c)));
    table.appendChild(tr);
  });
  box.appendChild(table);
}

async function refresh() {
  try {
    const now = Date.now() / 1000;
    const [gateways, jobs, models, deployments, schedules, promotions, privacy] = await Promise.all([
      api("/api/gateways"), api("/api/jobs"), api("/api/models"), api("/api/deployments?limit=50"),
      api("/api/schedules"), api("/api/promotions"), api("/api/privacy")]);
    const details = await Promise.all(jobs.slice(0, SPARK_JOBS).map(
      (j) => api("/api/jobs/" + encodeURIComponent(j.job_id))));
    const byId = Object.fromEntries(details.map((d) => [d.job_id, d]));
    showPrivacy(privacy);
    fill("fleet", gateways, (g) => [g.gateway, healthCell(g, now), linkCell(g), age(now - g.last_seen), g.model,
      g.windows === null ? null : g.labelled + " / " + g.windows,
      g.labels ? Object.entries(g.labels).map(([k, v]) => k + "=" + v).join(" ") : null,
      cell(g.feature_set, "fs"), g.predicted, g.alerts]);
    fill("jobs", jobs, (j) => [cell(j.job_id, "long"), j.algorithm, j.result || j.model_id, stateCell(j), stepsText(j),
      sparkCell(byId[j.job_id]), attemptsCell(j), clock(j.started), duration(j.duration_s), bytes(j.bytes),
      j.participants.join(", "), cell(j.error, "long")],
    (j) => { selectedJob = j.job_id; refresh(); }, (j) => j.job_id === (selectedJob || (jobs[0] && jobs[0].job_id)));
    fill("models", models.slice().reverse(), (m) => [m.label, m.algorithm, accuracyCell(m),
      m.held_out ? m.held_out.windows : null, m.held_out ? fmt(m.held_out.chance) : null,
      m.held_out && typeof m.held_out.local_only === "number" ? fmt(m.held_out.local_only) : "not recorded",
      perGatewayCell(m.held_out), fmt(m.metrics.macro_f1), m.n_trees, m.job_id],
    (m) => showEvaluation(m));
    fill("deployments", deployments, (d) => [d.model_id + ":v" + d.version, d.client, d.state, cell(d.detail, "long")]);
    fill("schedules", schedules, (s) => [s.schedule_id, s.model_id,
      [s.every_s ? "every " + s.every_s + " s" : "", s.cron ? "cron " + s.cron : "",
       s.min_new_windows ? "≥ " + s.min_new_windows + " new windows" : ""].filter(Boolean).join(", "),
      s.threshold, s.canary_share + (s.canary_windows ? ", live: " + s.canary_windows + " windows, drop ≤ " +
        s.canary_max_drop : ""), s.last_run ? age(now - s.last_run) : null, cell(s.note, "long")]);
    fill("promotions", promotions, (p) => [p.model_id + ":v" + p.candidate,
      p.baseline === null ? null : p.model_id + ":v" + p.baseline, p.metric, p.decision, cell(p.detail, "long")]);
    const jobId = selectedJob || (jobs[0] && jobs[0].job_id);
    if (jobId) drawCurve(byId[jobId] || await api("/api/jobs/" + encodeURIComponent(jobId)));
    const online = gateways.filter((g) => g.online).length;
    const attention = gateways.filter((g) => health(g, now).level !== "ok").length;
    document.getElementById("status").textContent =
      online + " of " + gateways.length + " gateways online · updated " + new Date().toLocaleTimeString();
    document.getElementById("summary").textContent = attention ? attention + " gateway" + (attention > 1 ? "s" : "") +
      " need" + (attention > 1 ? "" : "s") + " a look" : "";
  } catch (error) {
    document.getElementById("status").textContent = "cannot reach the server: " + error.message;
  }
}

refresh();
setInterval(refresh, 2000);
