// The flywheel page's chart: P(V=1) per round, overall and by source, from /api/flywheel/rounds.
(function () {
  "use strict";
  const canvas = document.getElementById("p-v1-chart");
  if (!canvas || typeof Chart === "undefined") return;
  const colours = { all: "#111827", human: "#2563eb", mixed: "#f59e0b", agent: "#16a34a" };
  const names = { all: "all sources", human: "human demonstrations", mixed: "interactive annotation", agent: "agent rollouts" };
  fetch(canvas.dataset.src, { credentials: "same-origin", headers: { Accept: "application/json" } })
    .then((r) => (r.ok ? r.json() : Promise.reject(new Error(r.status + " " + r.statusText))))
    .then((data) => {
      const datasets = Object.entries(data.chart.series)
        .filter(([, values]) => values.some((v) => v !== null))
        .map(([key, values]) => ({
          label: names[key] || key,
          data: values,
          borderColor: colours[key] || "#6b7280",
          backgroundColor: colours[key] || "#6b7280",
          borderWidth: key === "all" ? 3 : 1.5,
          spanGaps: true,
          tension: 0.2,
        }));
      new Chart(canvas, {
        type: "line",
        data: { labels: data.chart.labels, datasets: datasets },
        options: {
          animation: false,
          maintainAspectRatio: false,
          scales: { y: { min: 0, max: 1, title: { display: true, text: "P(V=1)" } } },
        },
      });
      canvas.dataset.drawn = "1";
    })
    .catch((err) => {
      const p = document.createElement("p");
      p.className = "error";
      p.textContent = "The chart could not load: " + err.message;
      canvas.replaceWith(p);
    });
})();
