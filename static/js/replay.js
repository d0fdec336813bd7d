/* Trajectory replay: one screenshot at a time with its action drawn over it, a timeline, keys.
 *
 * The page renders every step's metadata once as JSON (#replay-data) and the timeline as plain links
 * (?step=i), so it works without this script; the script swaps the one big image, redraws the SVG
 * overlay in screen coordinates and fills in the step's details. Nothing here fetches more than the
 * shown screenshot and the next one, however long the episode.
 *
 * Public: window.Replay = {show(pos), current() -> pos, step() -> step object, steps() -> array};
 * the section fires "replay:step" (detail: {pos, step}) whenever the shown step changes.
 *
 * Keys (never while typing in a field): ← → j k Home End move; on a review page 1 2 3 label the shown
 * step correct / redundant / wrong, 0 clears its label and f marks it the first error. Enlarging the
 * screenshot (click, z, Esc) is replay_zoom.js.
 */
(function () {
  "use strict";

  const SVG = "http://www.w3.org/2000/svg";
  const root = document.querySelector("[data-replay]");
  if (!root) return;

  const img = root.querySelector("[data-replay-img]");
  const overlay = root.querySelector("[data-replay-overlay]");
  const shot = root.querySelector("[data-replay-shot]");
  const empty = root.querySelector("[data-replay-empty]");
  const info = root.querySelector("[data-replay-info]");
  const indexOut = root.querySelector("[data-replay-index]");
  const countOut = root.querySelector("[data-replay-count]");
  const follow = root.querySelector("[data-replay-follow]");
  let preload = root.querySelector("[data-replay-preload]");

  let steps = [];
  let pos = 0;
  let labels = {labels: {}, first_error_step: null};

  // --- data --------------------------------------------------------------------------------------

  function readJSON(id, fallback) {
    const node = document.getElementById(id);
    if (!node) return fallback;
    try { return JSON.parse(node.textContent); } catch (e) { return fallback; }
  }

  function loadSteps() {
    steps = (readJSON("replay-data", {steps: []}).steps) || [];
    // The last frame may be the result (`final`): the screen after the last step, itself no step.
    countOut.textContent = String(steps.filter((s) => !s.final).length);
  }

  function loadLabels() {
    labels = readJSON("review-labels-data", labels) || labels;
  }

  // --- small DOM helpers -------------------------------------------------------------------------

  function svg(name, attrs, parent) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (parent) parent.appendChild(node);
    return node;
  }

  function html(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v; else node.setAttribute(k, String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : String(c));
    }
    return node;
  }

  function num(v) { return typeof v === "number" && isFinite(v); }

  function ms(v) {
    if (!num(v)) return "–";
    if (v < 1000) return v + " ms";
    if (v < 60000) return (v / 1000).toFixed(1) + " s";
    return Math.floor(v / 60000) + " min " + Math.round((v % 60000) / 1000) + " s";
  }

  // --- the overlay ---------------------------------------------------------------------------------

  function defs(root) {
    const d = svg("defs", {}, root);
    for (const kind of ["final", "proposed"]) {
      const m = svg("marker", {
        id: "replay-arrow-" + kind, viewBox: "0 0 10 10", refX: 8, refY: 5,
        markerWidth: 5, markerHeight: 5, orient: "auto-start-reverse", markerUnits: "strokeWidth",
      }, d);
      svg("path", {d: "M0,0 L10,5 L0,10 z", class: "ov-arrowhead"}, m);
    }
  }

  // A chip's width, estimated from its characters in a monospace font (no layout pass needed).
  function chipWidth(text, size) { return Math.max(size, String(text).length * size * 0.62) + size * 1.2; }

  function label(g, x, y, text, u, cls) {
    const size = u * 2;
    const t = String(text);
    const w = chipWidth(t, size);
    const box = svg("g", {class: "ov-chip " + (cls || "")}, g);
    svg("rect", {x: x, y: y - size * 1.1, width: w, height: size * 1.5, rx: size * 0.35}, box);
    const node = svg("text", {x: x + size / 2, y: y, "font-size": size}, box);
    node.textContent = t;
    return w;
  }

  function chips(g, keys, w, h, u, row, cls) {
    const size = u * 2;
    const widths = keys.map((k) => chipWidth(k, size));
    const total = widths.reduce((a, b) => a + b, 0) + (keys.length - 1) * size * 0.6;
    let x = Math.max(u, (w - total) / 2);
    const y = h - u * 3 - row * size * 2;
    keys.forEach((k, i) => { label(g, x, y, k, u, "ov-key " + (cls || "")); x += widths[i] + size * 0.6; });
  }

  function badge(g, text, w, u, row, cls) {
    const size = u * 2;
    const t = String(text).length > 90 ? String(text).slice(0, 89) + "…" : String(text);
    const bw = chipWidth(t, size);
    label(g, Math.max(u, w - bw - u), u * 3.5 + row * size * 2, t, u, "ov-badge " + (cls || ""));
  }

  function dot(g, x, y, u) {
    svg("circle", {cx: x, cy: y, r: u * 1.6, class: "ov-ring"}, g);
    svg("circle", {cx: x, cy: y, r: u * 0.5, class: "ov-dot"}, g);
  }

  function arrow(g, x1, y1, x2, y2, u, kind) {
    svg("line", {x1, y1, x2, y2, class: "ov-line", "stroke-width": u * 0.5, "marker-end": "url(#replay-arrow-" + kind + ")"}, g);
  }

  const SCROLL_VECTORS = {up: [0, -1], down: [0, 1], left: [-1, 0], right: [1, 0]};

  function drawAction(root, a, w, h, kind, row) {
    if (!a || typeof a !== "object") return;
    const u = Math.max(w, h) / 100;
    const g = svg("g", {class: "ov ov-" + kind, "data-action": a.type}, root);
    const at = num(a.x) && num(a.y);
    const tag = kind === "proposed" ? "proposed " : "";
    switch (a.type) {
      case "click":
        if (at) dot(g, a.x, a.y, u);
        break;
      case "left_double":
        if (at) { dot(g, a.x, a.y, u); svg("circle", {cx: a.x, cy: a.y, r: u * 2.6, class: "ov-ring"}, g); }
        break;
      case "right_single":
        if (at) { dot(g, a.x, a.y, u); label(g, a.x + u * 2, a.y - u, "right", u, "ov-tag"); }
        break;
      case "middle_single":
        if (at) { dot(g, a.x, a.y, u); label(g, a.x + u * 2, a.y - u, "middle", u, "ov-tag"); }
        break;
      case "hover":
        if (at) svg("circle", {cx: a.x, cy: a.y, r: u * 1.6, class: "ov-ring ov-hollow"}, g);
        break;
      case "long_press":
        if (at) {
          dot(g, a.x, a.y, u);
          svg("circle", {cx: a.x, cy: a.y, r: u * 2.6, class: "ov-ring ov-thick"}, g);
          label(g, a.x + u * 3, a.y - u, "hold" + (num(a.seconds) ? " " + a.seconds + " s" : ""), u, "ov-tag");
        }
        break;
      case "drag":
        if ([a.x1, a.y1, a.x2, a.y2].every(num)) {
          svg("circle", {cx: a.x1, cy: a.y1, r: u * 0.8, class: "ov-dot"}, g);
          arrow(g, a.x1, a.y1, a.x2, a.y2, u, kind);
        }
        break;
      case "scroll": {
        const [dx, dy] = SCROLL_VECTORS[a.direction] || [0, 1];
        const x = at ? a.x : w / 2;
        const y = at ? a.y : h / 2;
        const len = u * 8;
        svg("circle", {cx: x, cy: y, r: u * 0.8, class: "ov-dot"}, g);
        arrow(g, x, y, x + dx * len, y + dy * len, u, kind);
        label(g, x + u * 2, y - u * 2, "scroll " + (a.direction || "") + (num(a.amount) ? " ×" + a.amount : ""), u, "ov-tag");
        break;
      }
      case "type": {
        const text = String(a.content || "");
        const shown = text.length > 80 ? text.slice(0, 79) + "…" : text;
        label(g, u * 2, h - u * 3 - row * u * 4, tag + "⌨ " + JSON.stringify(shown), u, "ov-bubble");
        break;
      }
      case "hotkey":
        chips(g, (a.keys || []).map(String), w, h, u, row, "");
        break;
      case "press":
        chips(g, [String(a.key || "?")], w, h, u, row, "");
        break;
      case "keydown":
      case "keyup":
        chips(g, [(a.type === "keydown" ? "↓ " : "↑ ") + String(a.key || "?")], w, h, u, row, "");
        break;
      case "finished":
        badge(g, tag + "finished" + (a.content ? ": " + a.content : ""), w, u, row, "ov-finished");
        break;
      case "invalid":
        badge(g, "invalid" + (a.reason ? ": " + a.reason : ""), w, u, row, "ov-invalid");
        break;
      default:
        badge(g, tag + a.type, w, u, row, "");
    }
  }

  function sameAction(a, b) { return JSON.stringify(a) === JSON.stringify(b); }

  function drawOverlay(step) {
    while (overlay.firstChild) overlay.removeChild(overlay.firstChild);
    if (!step) return;
    const w = step.width || img.naturalWidth;
    const h = step.height || img.naturalHeight;
    if (!w || !h) return;
    overlay.setAttribute("viewBox", "0 0 " + w + " " + h);
    defs(overlay);
    const proposed = step.proposed_action;
    if (proposed && !sameAction(proposed, step.action)) drawAction(overlay, proposed, w, h, "proposed", 1);
    const corrected = (labels.labels[String(step.index)] || {}).corrected_action;
    if (corrected) drawAction(overlay, corrected, w, h, "corrected", 2);
    drawAction(overlay, step.action, w, h, "final", 0);
    if (step.invalid_reason) badge(overlay, "invalid: " + step.invalid_reason, w, Math.max(w, h) / 100, 1, "ov-invalid");
  }

  // --- the details panel -------------------------------------------------------------------------

  function codeOf(text, action) {
    return html("code", {}, text || (action ? JSON.stringify(action) : "–"));
  }

  // What an SDK action gave back: an MCP tool's result, a terminal's output, a file's content.
  function renderResult(action, result) {
    const kind = (action && action.type) || "";
    const title = kind === "mcp_call"
      ? "Tool result: " + (action.server || "?") + "." + (action.tool || "?") + (result.is_error ? " (error)" : "")
      : kind === "terminal" ? "Terminal output (exit " + result.exit_code + (result.timed_out ? ", timed out" : "") + ")"
      : "Result";
    const box = html("div", {class: "replay-result" + (result.is_error ? " error" : ""), "data-testid": "step-result"},
      html("p", {class: "muted"}, title));
    if (kind === "mcp_call" && action.arguments && Object.keys(action.arguments).length)
      box.append(html("p", {class: "muted"}, "arguments ", html("code", {}, JSON.stringify(action.arguments))));
    const text = kind === "mcp_call" ? result.content
      : kind === "terminal" ? [result.stdout, result.stderr].filter(Boolean).join("\n")
      : result.content !== undefined ? result.content : JSON.stringify(result);
    box.append(html("pre", {class: "raw", "data-testid": "step-result-text"}, text === undefined || text === "" ? "(nothing)" : String(text)));
    return box;
  }

  function renderInfo(step) {
    info.replaceChildren();
    if (!step) return;
    if (step.final) {
      info.append(html("h2", {}, "Result ", html("span", {class: "chip actor-result"}, "final screen")));
      info.append(html("p", {"data-testid": "final-info"},
        "The screen after the last step: what the episode left behind" +
        (num(step.reward) ? " (reward " + step.reward + ")." : ".")));
      return;
    }
    const head = html("h2", {},
      "Step " + step.index + " ",
      html("span", {class: "chip actor-" + step.actor, "data-testid": "step-actor"}, step.actor));
    info.append(head);
    const timing = html("p", {class: "muted replay-timing"},
      "think " + ms(step.latency_ms) + " · " +
      (num(step.since_previous_ms) ? "+" + ms(step.since_previous_ms) + " after the previous step" : "first step") + " · " +
      new Date(step.observed_at).toLocaleTimeString());
    info.append(timing);
    if (step.thought) info.append(html("p", {class: "replay-thought", "data-testid": "step-thought"}, html("em", {}, step.thought)));
    if (step.invalid_reason) {
      info.append(html("p", {class: "error", "data-testid": "invalid-reason"}, "Invalid: " + step.invalid_reason));
      if (step.raw_output) info.append(html("pre", {class: "raw"}, step.raw_output));
    } else {
      info.append(html("p", {"data-testid": "step-action"}, codeOf(step.action_text, step.action)));
    }
    if (step.result) info.append(renderResult(step.action, step.result));
    if (step.proposed_action) {
      const same = sameAction(step.proposed_action, step.action);
      const box = html("div", {class: "replay-proposal", "data-testid": "proposal"},
        html("p", {class: "muted"}, same ? "Model proposal, accepted as proposed:" : "Model proposal (dashed), changed by the annotator:"));
      if (step.proposed_thought) box.append(html("p", {}, html("em", {}, step.proposed_thought)));
      box.append(html("p", {}, codeOf(step.proposed_action_text, step.proposed_action)));
      info.append(box);
    }
    const mark = labels.labels[String(step.index)];
    if (mark) {
      if (mark.label) info.append(html("p", {class: "replay-label label-" + mark.label}, "Labelled " + mark.label + (mark.note ? ": " + mark.note : "")));
      else info.append(html("p", {class: "muted", "data-testid": "unlabelled"}, "Not labelled (corrected only)"));
      if (mark.corrected_thought) info.append(html("p", {class: "muted"}, "Corrected thought: ", html("em", {}, mark.corrected_thought)));
      if (mark.corrected_action_text) info.append(html("p", {class: "muted"}, "Corrected action (dotted): ", html("code", {}, mark.corrected_action_text)));
    }
    if (labels.first_error_step === step.index) info.append(html("p", {class: "error"}, "First error step"));
    if (num(step.reward)) info.append(html("p", {class: "muted"}, "Step reward " + step.reward));
  }

  // --- the timeline ------------------------------------------------------------------------------

  function timelineItems() {
    return document.querySelectorAll("[data-replay-timeline] > li");
  }

  function markTimeline() {
    timelineItems().forEach((li) => {
      const p = Number(li.dataset.pos);
      const step = steps[p];
      const mark = step ? labels.labels[String(step.index)] : null;
      li.classList.toggle("current", p === pos);
      if (p === pos) li.setAttribute("aria-current", "step"); else li.removeAttribute("aria-current");
      for (const l of ["correct", "redundant", "wrong"]) li.classList.toggle("label-" + l, !!mark && mark.label === l);
      li.classList.toggle("first-error", !!step && labels.first_error_step === step.index);
    });
  }

  function scrollTimeline() {
    const li = document.querySelector('[data-replay-timeline] > li[data-pos="' + pos + '"]');
    const list = li && li.parentElement;
    if (!list) return;
    // Scroll the strip only (scrollIntoView would also scroll the page under the reader).
    const left = li.offsetLeft - list.offsetLeft - (list.clientWidth - li.offsetWidth) / 2;
    list.scrollLeft = Math.max(0, left);
  }

  // --- showing a step ----------------------------------------------------------------------------

  function show(p, opts) {
    if (!steps.length) {
      shot.hidden = true;
      empty.hidden = false;
      indexOut.textContent = "–";
      renderInfo(null);
      return;
    }
    pos = Math.max(0, Math.min(steps.length - 1, p));
    const step = steps[pos];
    shot.hidden = false;
    empty.hidden = true;
    indexOut.textContent = step.final ? "result" : String(step.index);
    if (step.screenshot) {
      if (img.getAttribute("src") !== step.screenshot) img.setAttribute("src", step.screenshot);
      img.hidden = false;
    } else {
      img.removeAttribute("src");
    }
    if (step.width && step.height) { img.setAttribute("width", step.width); img.setAttribute("height", step.height); }
    img.alt = step.final ? "The screen after the last step" : "Screen before step " + step.index;
    drawOverlay(step);
    renderInfo(step);
    markTimeline();
    scrollTimeline();
    const next = steps[pos + 1];
    if (next && next.screenshot) {
      if (!preload) { preload = new Image(); }
      preload.src = next.screenshot;
    }
    if (!(opts && opts.keepUrl)) {
      const url = new URL(location.href);
      url.searchParams.set("step", String(step.index));
      history.replaceState(history.state, "", url);
    }
    root.dataset.current = String(step.index);
    root.dispatchEvent(new CustomEvent("replay:step", {detail: {pos, step}, bubbles: true}));
  }

  img.addEventListener("load", () => {
    const step = steps[pos];
    if (step && !(step.width && step.height)) drawOverlay(step);  // size known only now
  });

  // --- input -------------------------------------------------------------------------------------

  root.addEventListener("click", (e) => {
    const b = e.target.closest("[data-go]");
    if (!b) return;
    const go = b.dataset.go;
    if (follow) follow.checked = go === "last";
    show(go === "first" ? 0 : go === "last" ? steps.length - 1 : go === "prev" ? pos - 1 : pos + 1);
  });

  document.addEventListener("click", (e) => {
    const a = e.target.closest("[data-replay-timeline] > li > a");
    if (!a || e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
    e.preventDefault();
    show(Number(a.parentElement.dataset.pos));
  });

  // A review's label keys press the panel's own buttons, so a key does exactly what the click does.
  const LABEL_KEYS = {"1": "label-correct", "2": "label-redundant", "3": "label-wrong", "0": "label-clear", f: "set-first-error"};

  function pressLabel(testid) {
    const button = document.querySelector('[data-review] [data-testid="' + testid + '"]');
    if (!button || button.disabled || button.closest("[hidden]")) return false;
    button.click();
    return true;
  }

  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const t = e.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
    if (e.key in LABEL_KEYS) { if (pressLabel(LABEL_KEYS[e.key])) e.preventDefault(); return; }
    const moves = {ArrowRight: pos + 1, j: pos + 1, ArrowLeft: pos - 1, k: pos - 1, Home: 0, End: steps.length - 1};
    if (!(e.key in moves)) return;
    e.preventDefault();
    if (follow) follow.checked = moves[e.key] >= steps.length - 1;
    show(moves[e.key]);
  });

  // --- live updates and review forms (htmx) ------------------------------------------------------

  document.body.addEventListener("htmx:beforeSwap", (e) => {
    // Review forms answer 400 with the form and its error: show it rather than drop it.
    if (e.detail.xhr.status === 400 && e.detail.target && e.detail.target.closest("[data-review-swap-errors]")) {
      e.detail.shouldSwap = true;
      e.detail.isError = false;
    }
  });

  document.body.addEventListener("htmx:afterSettle", () => {
    const before = steps.length;
    const atEnd = pos >= before - 1;
    loadSteps();
    loadLabels();
    if (steps.length !== before && (follow ? follow.checked : atEnd)) {
      show(steps.length - 1);
    } else {
      const step = steps[pos];
      if (step) { drawOverlay(step); renderInfo(step); }
      markTimeline();
      if (steps.length && !before) show(0);
    }
  });

  // --- the review panel: its forms follow the shown step ----------------------------------------

  const panel = document.querySelector("[data-review]");

  function fillPanel(resetEdits) {
    if (!panel) return;
    const step = steps[pos];
    if (!step) return;
    const mark = labels.labels[String(step.index)] || null;
    // The result frame is no step: nothing there to label or correct.
    panel.querySelectorAll("[data-review-step-tools]").forEach((node) => { node.hidden = !!step.final; });
    panel.querySelectorAll("[data-review-final]").forEach((node) => { node.hidden = !step.final; });
    panel.querySelectorAll("[data-review-step]").forEach((input) => { input.value = String(step.index); });
    const idx = panel.querySelector("[data-review-index]");
    if (idx) idx.textContent = step.final ? "result" : String(step.index);
    panel.querySelectorAll("button[name=label]").forEach((b) => {
      b.setAttribute("aria-pressed", String(!!mark && mark.label === b.value));
    });
    if (!resetEdits) return;
    const note = panel.querySelector("[data-review-note]");
    if (note) note.value = mark ? mark.note : "";
    const thought = panel.querySelector("[data-review-thought]");
    if (thought) thought.value = mark && mark.corrected_thought ? mark.corrected_thought : step.thought;
    const text = panel.querySelector("[data-review-action-text]");
    if (text) text.value = mark && mark.corrected_action_text ? mark.corrected_action_text : step.action_text;
  }

  root.addEventListener("replay:step", () => fillPanel(true));
  document.body.addEventListener("htmx:afterSettle", (e) => {
    // After a failed correction keep what the reviewer typed, so they can fix it.
    fillPanel(!(e.detail && e.detail.xhr && e.detail.xhr.status >= 400));
  });
  document.addEventListener("click", (e) => {
    const a = e.target.closest("[data-step-link]");
    if (!a || e.ctrlKey || e.metaKey) return;
    const p = steps.findIndex((s) => String(s.index) === a.dataset.stepLink);
    if (p < 0) return;
    e.preventDefault();
    show(p);
  });

  loadSteps();
  loadLabels();
  const start = Number(root.dataset.current || 0);
  const first = steps.findIndex((s) => s.index === start);
  show(first < 0 ? 0 : first, {keepUrl: true});

  window.Replay = {
    show: (p) => show(p),
    current: () => pos,
    step: () => steps[pos],
    steps: () => steps,
    labels: () => labels,
  };
})();
