/* The replay's screenshot enlarged: a click (or z) shows it over the whole window, fit to it; a click on
 * it (or z again) shows its own pixels, scrolling; Esc, the close button or a click beside it goes back.
 *
 * The image and its SVG overlay sit in one frame whose width is set here, and the overlay spans the
 * frame, so the action marks stay on the pixels they point at, at every size. Loaded after replay.js;
 * follows the shown step by its "replay:step" event. Keys never fire while typing in a field.
 */
(function () {
  "use strict";

  const root = document.querySelector("[data-replay]");
  if (!root) return;
  const shot = root.querySelector("[data-replay-shot]");
  const img = root.querySelector("[data-replay-img]");
  const frame = root.querySelector("[data-replay-frame]");
  const bar = root.querySelector("[data-zoom-bar]");
  const toggle = root.querySelector("[data-zoom-toggle]");
  if (!shot || !frame) return;

  const ZOOMS = ["", "fit", "actual"];
  let zoom = "";

  function size() {
    const step = window.Replay ? window.Replay.step() : null;
    const w = (step && step.width) || img.naturalWidth;
    const h = (step && step.height) || img.naturalHeight;
    if (!zoom || !w || !h) { frame.style.width = ""; return; }
    if (zoom === "actual") { frame.style.width = w + "px"; return; }
    const room = Math.min(window.innerWidth * 0.98, ((window.innerHeight - (bar ? bar.offsetHeight : 0)) * 0.96 * w) / h);
    frame.style.width = Math.floor(room) + "px";
  }

  function set(level) {
    zoom = ZOOMS.includes(level) ? level : "";
    shot.classList.toggle("zoomed", !!zoom);
    shot.dataset.zoom = zoom;
    if (bar) bar.hidden = !zoom;
    if (toggle) toggle.setAttribute("aria-pressed", String(!!zoom));
    root.querySelectorAll("[data-zoom-level]").forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.zoomLevel === zoom)));
    document.body.classList.toggle("replay-zoomed", !!zoom);
    size();
  }

  shot.addEventListener("click", (e) => {
    const level = e.target.closest("[data-zoom-level]");
    if (level) { set(level.dataset.zoomLevel); return; }
    if (e.target.closest("[data-zoom-bar]")) return;
    if (!zoom) set("fit");
    else if (e.target.closest("[data-replay-frame]")) set(zoom === "fit" ? "actual" : "fit");
    else set("");  // the dark backdrop around the picture closes it
  });
  if (toggle) toggle.addEventListener("click", () => set(zoom ? "" : "fit"));
  root.addEventListener("replay:step", size);
  img.addEventListener("load", size);
  window.addEventListener("resize", size);

  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const t = e.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
    if (e.key === "Escape" && zoom) { e.preventDefault(); set(""); }
    else if (e.key === "z") { e.preventDefault(); set(ZOOMS[(ZOOMS.indexOf(zoom) + 1) % ZOOMS.length]); }
  });

  window.ReplayZoom = { set, level: () => zoom };
})();
