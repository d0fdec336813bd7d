// Charts fed by a JSON endpoint: fetch it, draw or update Chart.js charts, fetch again every N s.
// Chart.js (installed from npm by scripts/setup.sh) must be loaded first as window.Chart.
//
//   import { chartsFrom, lines, bars, shortTime } from "/static/js/charts.js";
//   const feed = chartsFrom("/api/v1/dashboards/success?bucket=day", [
//     { canvas: el, build: (data) => lines(data.labels.map(shortTime), {a: [1, 2], b: [3, null]}) },
//   ], { every: 30 });
//   feed.setUrl(otherUrl); feed.refresh(); feed.stop();
//
// Each canvas gets data-state="drawn" (with data-points, the values drawn) after a draw, or
// data-state="error" with the reason in a sibling .chart-error, so people and tests can tell.

const PALETTE = ["#2f6fde", "#1e8e5a", "#c0392b", "#d97706", "#6d28d9", "#0f766e", "#db2777", "#4b5563",
  "#65a30d", "#0891b2", "#9333ea", "#b45309"];

export function color(i) {
  return PALETTE[i % PALETTE.length];
}

// "2025-01-31T14:00:00+00:00" -> "01-31 14:00" (hour buckets) or "01-31" (midnight).
export function shortTime(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  const pad = (n) => String(n).padStart(2, "0");
  const day = `${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}`;
  const hm = `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}`;
  return hm === "00:00" ? day : `${day} ${hm}`;
}

// {key: [values]} -> line datasets (null = no value there), keys in the given order.
export function lines(labels, series, { scale = 1, keys = null } = {}) {
  const names = keys || Object.keys(series);
  return {
    labels,
    datasets: names.map((name, i) => ({
      label: name,
      data: series[name].map((v) => (v === null || v === undefined ? null : v * scale)),
      borderColor: color(i),
      backgroundColor: color(i),
      // A bucket without data is skipped, not drawn as zero; the line joins its neighbours.
      spanGaps: true,
      pointRadius: labels.length > 60 ? 1 : 3,
      borderWidth: 2,
    })),
  };
}

// {key: [values]} -> bar datasets (stacked when the chart's options say so).
export function bars(labels, series, { scale = 1, keys = null } = {}) {
  const names = keys || Object.keys(series);
  return {
    labels,
    datasets: names.map((name, i) => ({
      label: name,
      data: series[name].map((v) => (v === null || v === undefined ? null : v * scale)),
      backgroundColor: color(i),
    })),
  };
}

function baseOptions(kind, extra) {
  const options = {
    animation: false,
    responsive: true,
    maintainAspectRatio: false,
    interaction: { mode: "index", intersect: false },
    plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } } },
    scales: { y: { beginAtZero: true } },
  };
  if (kind === "stacked") {
    options.scales = { x: { stacked: true }, y: { stacked: true, beginAtZero: true, ticks: { precision: 0 } } };
  }
  if (kind === "percent") {
    options.scales = { y: { beginAtZero: true, suggestedMax: 100, ticks: { callback: (v) => `${v}%` } } };
  }
  return Object.assign(options, extra || {});
}

function showError(canvas, message) {
  canvas.dataset.state = "error";
  let note = canvas.parentElement && canvas.parentElement.querySelector(".chart-error");
  if (!note && canvas.parentElement) {
    note = document.createElement("p");
    note.className = "chart-error error";
    canvas.parentElement.appendChild(note);
  }
  if (note) note.textContent = message;
}

function clearError(canvas) {
  const note = canvas.parentElement && canvas.parentElement.querySelector(".chart-error");
  if (note) note.remove();
}

// Draw `data` ({labels, datasets}) on `canvas`, updating the chart already there if any.
export function draw(canvas, { type = "line", kind = null, data, options = null }) {
  const Chart = window.Chart;
  if (!Chart) throw new Error("Chart.js is not loaded");
  let chart = Chart.getChart(canvas);
  if (chart && chart.config.type === type) {
    chart.data.labels = data.labels;
    chart.data.datasets = data.datasets;
    chart.update("none");
  } else {
    if (chart) chart.destroy();
    chart = new Chart(canvas, { type, data, options: baseOptions(kind, options) });
  }
  const points = data.datasets.reduce((n, d) => n + d.data.filter((v) => v !== null && v !== undefined).length, 0);
  canvas.dataset.points = String(points);
  canvas.dataset.state = points ? "drawn" : "empty";
  return chart;
}

// Fetch `url` now and every `every` seconds; each spec draws one chart from the JSON.
// spec: {canvas, type ("line" | "bar"), kind (null | "stacked" | "percent"), build(json) -> {labels, datasets}, options}
export function chartsFrom(url, specs, { every = 30, onData = null } = {}) {
  let current = url;
  let timer = null;
  let stopped = false;

  async function refresh() {
    let json;
    try {
      const r = await fetch(current, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (!r.ok) {
        let why = r.statusText;
        try { why = (await r.json()).detail || why; } catch (e) { /* not JSON */ }
        throw new Error(`HTTP ${r.status}: ${why}`);
      }
      json = await r.json();
    } catch (e) {
      for (const spec of specs) showError(spec.canvas, `Could not load the figures: ${e.message}`);
      return null;
    }
    for (const spec of specs) {
      try {
        draw(spec.canvas, { type: spec.type || "line", kind: spec.kind || null, data: spec.build(json),
          options: spec.options || null });
        clearError(spec.canvas);
      } catch (e) {
        showError(spec.canvas, `Could not draw: ${e.message}`);
      }
    }
    if (onData) onData(json);
    return json;
  }

  function schedule() {
    if (stopped || !every) return;
    timer = setTimeout(async () => { await refresh(); schedule(); }, every * 1000);
  }

  const first = refresh().then((json) => { schedule(); return json; });
  return {
    ready: first,
    refresh,
    setUrl(next) { current = next; return refresh(); },
    stop() { stopped = true; if (timer) clearTimeout(timer); },
  };
}

window.FlywheelCharts = { chartsFrom, draw, lines, bars, shortTime, color };
