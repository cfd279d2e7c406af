// The dashboard: polls the REST API every two seconds and renders plain tables and SVG charts.
// A bearer token, when the server requires one, is given once as #token=... and kept locally.
"use strict";
const params = new URLSearchParams(location.hash.slice(1));
if (params.get("token")) localStorage.setItem("wheelfed-token", params.get("token"));
const token = localStorage.getItem("wheelfed-token");
let selectedJob = null;

async function api(path) {
  const response = await fetch(path, { headers: token ? { Authorization: "Bearer " + token } : {} });
  if (!response.ok) throw new Error(path + ": " + response.status);
  return response.json();
}

function cell(value) {
  const td = document.createElement("td");
  td.textContent = value === null || value === undefined || value === "" ? "–" : String(value);
  return td;
}

function fill(tableId, rows, toCells, onClick) {
  const body = document.querySelector("#" + tableId + " tbody");
  body.replaceChildren(...rows.map((row) => {
    const tr = document.createElement("tr");
    toCells(row).forEach((value) => tr.appendChild(value instanceof Node ? value : cell(value)));
    if (onClick) tr.addEventListener("click", () => onClick(row));
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

function stateCell(online) {
  const td = cell(online ? "online" : "offline");
  td.className = online ? "online" : "offline";
  return td;
}

function fmt(x) { return typeof x === "number" ? x.toFixed(3) : x; }

function isoUs(us) { return new Date(us / 1000).toISOString().replace(/\.\d+Z$/, "Z"); }

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

function drawCurve(job) {
  const svg = document.getElementById("curve");
  const points = job.rounds.filter((r) => typeof r.metrics.train_loss === "number");
  svg.replaceChildren();
  document.getElementById("curve-caption").textContent = points.length
    ? job.job_id + ": train loss per round (" + job.completed + "/" + job.total + ")"
    : job.job_id + ": no rounds yet";
  if (!points.length) return;
  const losses = points.map((r) => r.metrics.train_loss);
  const low = Math.min(...losses), high = Math.max(...losses), span = high - low || 1;
  const x = (i) => 30 + (points.length === 1 ? 0 : (i * 360) / (points.length - 1));
  const y = (v) => 140 - ((v - low) / span) * 120;
  svg.appendChild(svgNode("polyline", { points: losses.map((v, i) => x(i) + "," + y(v)).join(" "),
    fill: "none", stroke: "#3b78b5", "stroke-width": 2 }));
  losses.forEach((v, i) => svg.appendChild(svgNode("circle", { cx: x(i), cy: y(v), r: 3, fill: "#24415f" })));
  svg.appendChild(svgNode("text", { x: 2, y: 20, "font-size": 10 }, high.toPrecision(3)));
  svg.appendChild(svgNode("text", { x: 2, y: 144, "font-size": 10 }, low.toPrecision(3)));
}

async function showEvaluation(model) {
  const box = document.getElementById("evaluation");
  box.replaceChildren();
  if (!model.job_id) return;
  const job = await api("/api/jobs/" + encodeURIComponent(model.job_id));
  const evaluation = job.evaluation || {};
  const title = document.createElement("h3");
  title.textContent = model.label + ": federated evaluation";
  box.appendChild(title);
  if (!evaluation.per_client) {
    box.appendChild(document.createTextNode(evaluation.skipped || evaluation.failed || "not evaluated"));
    return;
  }
  const clients = Object.entries(evaluation.per_client);
  const svg = svgNode("svg", { viewBox: "0 0 400 " + (20 * clients.length + 10), role: "img",
    "aria-label": "accuracy per gateway" });
  clients.forEach(([client, metrics], i) => {
    const value = metrics.accuracy || 0;
    svg.appendChild(svgNode("text", { x: 0, y: 20 * i + 18, "font-size": 11 }, client));
    svg.appendChild(svgNode("rect", { class: "bar", x: 80, y: 20 * i + 6, height: 14, width: 280 * value }));
    svg.appendChild(svgNode("text", { x: 84 + 280 * value, y: 20 * i + 18, "font-size": 11 }, fmt(value)));
  });
  box.appendChild(svg);
  if (evaluation.confusion) {
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
}

async function refresh() {
  try {
    const now = Date.now() / 1000;
    const [gateways, jobs, models, deployments, schedules, promotions, privacy] = await Promise.all([
      api("/api/gateways"), api("/api/jobs"), api("/api/models"), api("/api/deployments?limit=50"),
      api("/api/schedules"), api("/api/promotions"), api("/api/privacy")]);
    showPrivacy(privacy);
    fill("fleet", gateways, (g) => [g.gateway, stateCell(g.online), age(now - g.last_seen), g.model,
      g.windows === null ? null : g.labelled + " / " + g.windows,
      g.labels ? Object.entries(g.labels).map(([k, v]) => k + "=" + v).join(" ") : null,
      g.feature_set, g.link, g.predicted, g.alerts]);
    fill("jobs", jobs, (j) => [j.job_id, j.algorithm, j.model_id, j.state, j.completed + "/" + j.total,
      j.participants.join(", "), j.result, j.error], (j) => { selectedJob = j.job_id; refresh(); });
    fill("models", models.slice().reverse(), (m) => [m.label, m.algorithm, m.feature_set_version, m.n_trees,
      m.parent, fmt(m.metrics.accuracy), fmt(m.metrics.macro_f1), m.job_id],
      (m) => showEvaluation(m));
    fill("deployments", deployments, (d) => [d.model_id + ":v" + d.version, d.client, d.state, d.detail]);
    fill("schedules", schedules, (s) => [s.schedule_id, s.model_id,
      [s.every_s ? "every " + s.every_s + " s" : "", s.cron ? "cron " + s.cron : "",
       s.min_new_windows ? "≥ " + s.min_new_windows + " new windows" : ""].filter(Boolean).join(", "),
      s.threshold, s.canary_share + (s.canary_windows ? ", live: " + s.canary_windows + " windows, drop ≤ " +
        s.canary_max_drop : ""), s.last_run ? age(now - s.last_run) : null, s.note]);
    fill("promotions", promotions, (p) => [p.model_id + ":v" + p.candidate,
      p.baseline === null ? null : p.model_id + ":v" + p.baseline, p.metric, p.decision, p.detail]);
    const jobId = selectedJob || (jobs[0] && jobs[0].job_id);
    if (jobId) drawCurve(await api("/api/jobs/" + encodeURIComponent(jobId)));
    const online = gateways.filter((g) => g.online).length;
    document.getElementById("status").textContent =
      online + " of " + gateways.length + " gateways online · updated " + new Date().toLocaleTimeString();
  } catch (error) {
    document.getElementById("status").textContent = "cannot reach the server: " + error.message;
  }
}

refresh();
setInterval(refresh, 2000);
