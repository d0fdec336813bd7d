// Training run charts: a run's metric series drawn per group (live, every N s while the run is active),
// and two runs' shared metrics overlaid on the compare page. Chart.js must be loaded as window.Chart.
//
//   import { runCharts, compareCharts } from "/static/js/training.js";
//   const feed = runCharts({ url: "/api/v1/training-runs/7/series", groups, grid, empty, every: 5 });
//   compareCharts({ url: "/api/v1/training-compare?a=7&b=8", grid, every: 10 });
//   feed.stop();
//
// As in charts.js, every canvas gets data-state="drawn" (with data-points), "empty" or "error" (the
// reason in a sibling .chart-error).

import { color, draw } from "./charts.js";

const ACTIVE = new Set(["pending", "running"]);

function showError(canvas, message) {
  canvas.dataset.state = "error";
  const box = canvas.parentElement;
  let note = box && box.querySelector(".chart-error");
  if (!note && box) {
    note = document.createElement("p");
    note.className = "chart-error error";
    box.appendChild(note);
  }
  if (note) note.textContent = message;
}

function clearError(canvas) {
  const note = canvas.parentElement && canvas.parentElement.querySelector(".chart-error");
  if (note) note.remove();
}

async function getJSON(url) {
  const r = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!r.ok) {
    let why = r.statusText;
    try { why = (await r.json()).detail || why; } catch (e) { /* not JSON */ }
    throw new Error(`HTTP ${r.status}: ${why}`);
  }
  return r.json();
}

// {steps, values} -> [{x, y}] without the missing values (non-finite ones come back as null).
function points(series) {
  const out = [];
  if (!series) return out;
  for (let i = 0; i < series.steps.length; i++) {
    if (series.values[i] !== null && series.values[i] !== undefined) out.push({ x: series.steps[i], y: series.values[i] });
  }
  return out;
}

function options(rightTitle) {
  return {
    parsing: false,
    scales: {
      x: { type: "linear", title: { display: true, text: "step" }, ticks: { precision: 0 } },
      y: { type: "linear", position: "left", beginAtZero: false },
      // Shown only when a dataset uses it (a learning rate beside a loss, a fraction beside a count).
      y1: { type: "linear", position: "right", display: "auto", beginAtZero: false, grid: { drawOnChartArea: false },
        title: { display: Boolean(rightTitle), text: rightTitle || "" } },
    },
  };
}

function line(label, data, i, { right = false, dashed = false } = {}) {
  return {
    label, data, yAxisID: right ? "y1" : "y",
    borderColor: color(i), backgroundColor: color(i), borderWidth: 2, borderDash: dashed ? [5, 4] : [],
    pointRadius: data.length > 60 ? 0 : 2, spanGaps: true,
  };
}

// The names of `all` a group entry matches: "rl/success/*" takes every name under the prefix.
function matching(patterns, all) {
  const out = [];
  for (const p of patterns) {
    if (p.endsWith("/*")) out.push(...all.filter((n) => n.startsWith(p.slice(0, -1))).sort());
    else if (all.includes(p)) out.push(p);
  }
  return out;
}

function section(grid, key, title) {
  let canvas = grid.querySelector(`canvas[data-group="${CSS.escape(key)}"]`);
  if (canvas) return canvas;
  const box = document.createElement("section");
  box.className = "train-chart";
  box.dataset.group = key;
  const h = document.createElement("h3");
  h.textContent = title;
  const inner = document.createElement("div");
  inner.className = "canvas-box";
  canvas = document.createElement("canvas");
  canvas.dataset.testid = "chart";
  canvas.setAttribute("data-testid", "chart");
  canvas.dataset.group = key;
  inner.appendChild(canvas);
  box.append(h, inner);
  grid.appendChild(box);
  return canvas;
}

function poll(refresh, every) {
  let timer = null;
  let stopped = false;
  const handle = { stop() { stopped = true; if (timer) clearTimeout(timer); } };
  async function loop() {
    const keepGoing = await refresh();
    if (!stopped && every && keepGoing) timer = setTimeout(loop, every * 1000);
  }
  handle.ready = loop();
  handle.refresh = refresh;
  return handle;
}

// Appends `fresh` ({name: {steps, values}}, what came after the cursor) to `cache`; false when a point
// would go back in steps (a resumed run recorded steps again), which only a full reload draws right.
function merge(cache, fresh) {
  for (const [name, s] of Object.entries(fresh)) {
    const have = cache[name];
    if (have && have.steps.length && s.steps.length && s.steps[0] <= have.steps[have.steps.length - 1]) return false;
  }
  for (const [name, s] of Object.entries(fresh)) {
    const have = cache[name] || (cache[name] = { steps: [], values: [] });
    have.steps.push(...s.steps);
    have.values.push(...s.values);
  }
  return true;
}

// Past this many points in a series the next tick reloads everything (the server thins long series).
const RELOAD_ABOVE = 4000;

// One run: a chart per group of metrics, one per metric no group names; polls while the run is active.
// The first load takes every series; later ones only the points recorded since (the API's cursor).
export function runCharts({ url, groups, grid, empty = null, every = 5 }) {
  let cache = {};
  let cursor = 0;
  const sep = url.includes("?") ? "&" : "?";
  async function load() {
    let json = await getJSON(cursor ? `${url}${sep}after=${cursor}` : url);
    if (!cursor) {
      cache = json.series || {};
    } else if (!merge(cache, json.series || {})) {
      cursor = 0;
      json = await getJSON(url);
      cache = json.series || {};
    }
    cursor = json.cursor || 0;
    if (Object.values(cache).some((s) => s.steps.length > RELOAD_ABOVE)) cursor = 0;
    return json;
  }
  async function refresh() {
    let json;
    try {
      json = await load();
    } catch (e) {
      for (const canvas of grid.querySelectorAll("canvas")) {
        canvas.closest("section").hidden = false;
        showError(canvas, `Could not load the metrics: ${e.message}`);
      }
      return true;
    }
    const series = cache;
    const names = Object.keys(series);
    const used = new Set();
    const plans = [];
    for (const g of groups) {
      const left = matching(g.metrics, names);
      const right = matching(g.right || [], names);
      left.concat(right).forEach((n) => used.add(n));
      plans.push({ key: g.key, title: g.title, left, right });
    }
    for (const n of names.filter((m) => !used.has(m)).sort()) {
      plans.push({ key: `metric:${n}`, title: n, left: [n], right: [] });
    }
    for (const plan of plans) {
      const canvas = section(grid, plan.key, plan.title);
      const box = canvas.closest("section");
      if (!plan.left.length && !plan.right.length) {
        box.hidden = true;
        canvas.dataset.state = "empty";
        continue;
      }
      box.hidden = false;
      try {
        const datasets = [
          ...plan.left.map((n, i) => line(n, points(series[n]), i)),
          ...plan.right.map((n, i) => line(n, points(series[n]), plan.left.length + i, { right: true, dashed: true })),
        ];
        draw(canvas, { type: "line", data: { labels: [], datasets }, options: options(plan.right.join(", ")) });
        clearError(canvas);
      } catch (e) {
        showError(canvas, `Could not draw: ${e.message}`);
      }
    }
    if (empty) empty.hidden = names.length > 0;
    return ACTIVE.has(json.status);
  }
  return poll(refresh, every);
}

// Two runs: every metric both have, overlaid (run a solid, run b dashed); polls while either is active.
export function compareCharts({ url, grid, every = 10 }) {
  async function refresh() {
    let json;
    try {
      json = await getJSON(url);
    } catch (e) {
      for (const canvas of grid.querySelectorAll("canvas")) showError(canvas, `Could not load the metrics: ${e.message}`);
      if (!grid.querySelector("canvas")) {
        const p = document.createElement("p");
        p.className = "chart-error error";
        p.textContent = `Could not load the metrics: ${e.message}`;
        grid.replaceChildren(p);
      }
      return true;
    }
    const label = (run) => `#${run.id} ${run.name}`;
    for (const name of json.shared_metrics) {
      const canvas = section(grid, `metric:${name}`, name);
      try {
        const datasets = [
          line(label(json.a), points(json.series.a[name]), 0),
          line(label(json.b), points(json.series.b[name]), 1, { dashed: true }),
        ];
        draw(canvas, { type: "line", data: { labels: [], datasets }, options: options("") });
        clearError(canvas);
      } catch (e) {
        showError(canvas, `Could not draw: ${e.message}`);
      }
    }
    const none = document.getElementById("no-shared");
    if (none) none.hidden = json.shared_metrics.length > 0;
    return ACTIVE.has(json.a.status) || ACTIVE.has(json.b.status);
  }
  return poll(refresh, every);
}

window.TrainingCharts = { runCharts, compareCharts };
