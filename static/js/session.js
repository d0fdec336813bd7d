// The live session page: the sandbox's screen (liveview.js), input capture (recorder.js) and the
// session socket (/ws/episodes/<id>/session/) that turns input into recorded steps.
import { mount } from "./liveview.js";
import { attach } from "./recorder.js";

const root = document.querySelector("[data-testid=session]");
const $ = (sel) => root.querySelector(sel);
const episodeId = Number(root.dataset.episode);
const notice = $("[data-testid=notice]");
const stepsList = $("[data-testid=steps]");
const SVG = "http://www.w3.org/2000/svg";

let ws = null;
let me = null;
let mayControl = false;
let control = JSON.parse(document.getElementById("control-state").textContent);
let live = null;
let recorder = null;
let paused = false;
let status = root.dataset.status;
let proposal = null;
let retry = 500;
let online = false; // the session socket is open
const RECONNECTING = "Reconnecting to the session… input is paused until it is back.";
const viewArea = JSON.parse(document.getElementById("view-area").textContent);
let zoomTo = viewArea ? "area" : "screen";

function say(text, isError = false) {
  notice.textContent = text;
  notice.classList.toggle("error", isError);
}

function send(msg) {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(msg));
}

function iHold() {
  return control.holder === "human" && control.user === me;
}

function renderControl() {
  const text = $("[data-testid=control-text]");
  const chip = $("[data-testid=control]");
  let who = "nobody";
  if (control.holder === "agent") who = "the agent";
  else if (control.holder === "human") who = iHold() ? "you" : control.username;
  chip.textContent = `control: ${who}`;
  let line = `Control: ${who}.`;
  if (control.requested_by_name) line += ` ${control.requested_by_name} asks for control.`;
  text.textContent = line;
  const running = status === "running" && root.dataset.sandbox;
  const show = (act, on) => { const b = $(`[data-act=${act}]`); if (b) b.hidden = !on; };
  show("request", running && mayControl && !iHold());
  show("release", running && iHold());
  show("force", running && mayControl && !iHold() && control.holder === "human" && root.dataset.canForce === "1");
  $("[data-testid=recorder]").hidden = !(running && iHold());
  if (running && iHold() && !toolsAsked) { toolsAsked = true; send({ type: "tools" }); }
  // Input is executed and recorded by the session's socket: while it reconnects, input is paused
  // (and the person told), never sent into a closed socket and lost. Paused, nothing is sent either:
  // the server refuses input it would not record.
  const acting = Boolean(running && iHold() && online && !paused);
  if (recorder) recorder.setEnabled(acting);
  root.dataset.input = acting ? "on" : "off";
}

function addStep(s) {
  if (stepsList.querySelector(`li[data-index="${s.index}"]`)) return;
  const li = document.createElement("li");
  li.dataset.index = s.index;
  const chip = document.createElement("span");
  chip.className = "chip";
  chip.textContent = s.actor;
  const code = document.createElement("code");
  code.textContent = s.action_text || (s.action && s.action.type) || "";
  li.append(chip, " ", code);
  if (s.thought) {
    const t = document.createElement("div");
    t.className = "muted";
    t.textContent = s.thought;
    li.append(t);
  }
  if (s.result) {
    const r = document.createElement("pre");
    r.className = "raw step-result";
    r.dataset.testid = "step-result";
    r.textContent = resultText(s.action, s.result);
    li.append(r);
  }
  stepsList.append(li);
  stepsList.scrollTop = stepsList.scrollHeight;
  $("[data-testid=step-count]").textContent = stepsList.children.length;
}

// What an SDK step gave back, as text: an MCP tool's content, a command's output.
function resultText(action, result) {
  if (!result) return "";
  if (action && action.type === "mcp_call") return (result.is_error ? "error: " : "") + String(result.content ?? "");
  if (action && action.type === "terminal") return [result.stdout, result.stderr].filter(Boolean).join("\n");
  return result.content !== undefined ? String(result.content) : JSON.stringify(result);
}

// --- tools: the MCP servers inside the sandbox, called by the person as steps ----------------------

let tools = [];
let toolsAsked = false;

// A sandbox whose tool servers cannot start keeps its screen: the panel says why, and may ask again.
function renderTools(list, error) {
  tools = list || [];
  const box = $("[data-testid=tools]");
  if (!box) return;
  box.hidden = tools.length === 0 && !error;
  const problem = $("[data-testid=tools-error]");
  problem.textContent = error || "";
  problem.hidden = !error;
  $("[data-act=tools-retry]").hidden = !error;
  for (const part of box.querySelectorAll("[data-tools-part]")) part.hidden = tools.length === 0;
  const select = $("[data-testid=tool-name]");
  select.replaceChildren(...tools.map((t, i) => {
    const o = document.createElement("option");
    o.value = String(i);
    o.textContent = `${t.server}.${t.name}`;
    return o;
  }));
  describeTool();
}

function describeTool() {
  const t = tools[Number($("[data-testid=tool-name]").value)];
  if (!t) return;
  $("[data-testid=tool-description]").textContent = t.description || "";
  const props = (t.input_schema && t.input_schema.properties) || {};
  const skeleton = Object.fromEntries(Object.keys(props).map((k) => [k, props[k].type === "integer" || props[k].type === "number" ? 0 : ""]));
  $("[data-testid=tool-arguments]").value = JSON.stringify(skeleton);
}

function callTool() {
  const t = tools[Number($("[data-testid=tool-name]").value)];
  if (!t) return;
  let args;
  try { args = JSON.parse($("[data-testid=tool-arguments]").value || "{}"); }
  catch (e) { say(`The arguments are not JSON: ${e.message}`, true); return; }
  if (!args || typeof args !== "object" || Array.isArray(args)) { say("The arguments must be a JSON object", true); return; }
  send({type: "tool_call", server: t.server, tool: t.name, arguments: args});
}

function clearOverlay() {
  if (live && live.overlay) live.overlay.querySelectorAll(".proposal-mark").forEach((n) => n.remove());
}

function drawProposal(p) {
  clearOverlay();
  if (!live || !live.overlay || !p.action) return;
  const a = p.action;
  const mark = (x, y) => {
    const c = document.createElementNS(SVG, "circle");
    c.setAttribute("cx", x); c.setAttribute("cy", y); c.setAttribute("r", 12);
    c.setAttribute("class", "proposal-mark");
    c.setAttribute("fill", "none"); c.setAttribute("stroke", "#f59e0b"); c.setAttribute("stroke-width", 4);
    c.setAttribute("stroke-dasharray", "6 4");
    live.overlay.append(c);
  };
  if (a.x !== undefined) mark(a.x, a.y);
  if (a.x1 !== undefined) {
    mark(a.x1, a.y1); mark(a.x2, a.y2);
    const l = document.createElementNS(SVG, "line");
    l.setAttribute("x1", a.x1); l.setAttribute("y1", a.y1); l.setAttribute("x2", a.x2); l.setAttribute("y2", a.y2);
    l.setAttribute("class", "proposal-mark"); l.setAttribute("stroke", "#f59e0b"); l.setAttribute("stroke-width", 3);
    live.overlay.append(l);
  }
}

function showProposal(p) {
  proposal = p;
  const box = $("[data-testid=proposal]");
  if (!box) return;
  box.textContent = p.invalid_reason
    ? `The model's output was not a valid action: ${p.invalid_reason}`
    : `${p.thought ? p.thought + " → " : ""}${p.action_text}`;
  $("[data-testid=proposal-text]").value = p.action_text || "";
  drawProposal(p);
}

// --- the outcome: once the episode ends, what the database holds (reward, checks, error, next task) ----

const ENDED = ["finished", "failed", "cancelled"];
let outcomeAsked = null;

// The server renders the outcome (the same part a reload shows), so the page and a reload agree.
function showOutcome() {
  if (outcomeAsked) return outcomeAsked;
  outcomeAsked = fetch(location.pathname, { headers: { "HX-Request": "true" }, credentials: "same-origin" })
    .then((r) => (r.ok ? r.text() : Promise.reject(new Error(`${r.status}`))))
    .then((html) => {
      const box = document.createElement("div");
      box.innerHTML = html.trim();
      const fresh = box.querySelector("#outcome");
      if (fresh) $("#outcome").replaceWith(fresh);
    })
    .catch((e) => { outcomeAsked = null; say(`Reload the page to see the result (${e.message}).`, true); });
  return outcomeAsked;
}

// The episode ended (before this socket opened, or while it was open): the chip, why, and the outcome;
// a preparation that failed leaves no "Preparing the sandbox…" behind.
function ended(m) {
  $("[data-testid=status]").textContent = m.status;
  $("[data-testid=status]").className = `status status-${m.status}`;
  $("#screen [data-testid=preparing]")?.remove();
  if (m.status === "failed" || m.status === "cancelled") say(`The episode ended: ${m.error || m.status}`, true);
  showOutcome();
}

function startLive() {
  if (live || !root.dataset.sandbox || status !== "running") return;
  const screen = $("#screen");
  screen.querySelector("[data-testid=preparing]")?.remove();
  live = mount(screen, {
    sandbox: Number(root.dataset.sandbox),
    transport: root.dataset.transport,
    // Whatever shows the screen (noVNC, WebRTC, the screencast), the page's input goes through the
    // session socket, where it is recorded with the thought typed for it: a view ticket is enough.
    mode: "view",
    // A task that draws in a corner of the screen (MiniWoB++) is zoomed to its area; the person may
    // switch to the whole screen. Clicks still map to screen pixels (live.toScreen).
    focus: zoomTo === "area" ? viewArea : null,
    ticketUrl: root.dataset.ticketUrl,
    // No WebRTC on this network: watch over a WebSocket transport instead.
    fallback: { transport: root.dataset.fallback || "screencast", mode: "view" },
    onStatus: (s) => {
      root.dataset.live = s.state;
      if (s.state === "denied") say(`Live view refused: ${s.detail}`, true);
      if (s.state === "fallback") say(s.detail);
    },
  });
  attachRecorder();
  renderControl();
}

function attachRecorder() {
  if (recorder || !live) return;
  recorder = attach(live.element, {
    toScreen: (x, y) => live.toScreen(x, y),
    send: (msg) => send(msg),
    enabled: false,
  });
  renderControl();
}

function connect() {
  const proto = location.protocol === "https:" ? "wss" : "ws";
  ws = new WebSocket(`${proto}://${location.host}${root.dataset.ws}`);
  ws.onopen = () => {
    retry = 500;
    online = true;
    if (notice.textContent === RECONNECTING) say("");
    renderControl();
  };
  ws.onmessage = (e) => {
    const m = JSON.parse(e.data);
    switch (m.type) {
      case "hello":
        me = m.me; mayControl = m.may_control; control = m.control; status = m.status;
        root.dataset.ready = "1";
        // It may have ended before this socket opened (a preparation that failed at once): say why now.
        if (ENDED.includes(m.status) && m.status !== root.dataset.status) ended(m);
        if (m.sandbox && !root.dataset.sandbox) { location.reload(); return; }
        renderControl(); startLive();
        break;
      case "control.changed":
        control = m;
        if (m.sandbox && !root.dataset.sandbox) { location.reload(); return; }
        renderControl();
        break;
      case "step.created":
        addStep(m); clearOverlay();
        break;
      case "episode.status":
        status = m.status;
        $("[data-testid=status]").textContent = m.status;
        $("[data-testid=status]").className = `status status-${m.status}`;
        if (ENDED.includes(m.status)) ended(m);
        renderControl();
        break;
      case "proposing":
        say("The model is thinking…");
        break;
      case "proposal":
        say(""); showProposal(m);
        break;
      case "paused":
        paused = m.paused;
        $("[data-testid=paused]").hidden = !paused;
        $("[data-act=pause]").textContent = paused ? "Resume" : "Pause";
        renderControl();
        break;
      case "checking":
        say("Checking the result…");
        break;
      case "submitted":
        say(m.status === "finished" ? `Submitted. Reward: ${m.reward}` : `Ended: ${m.error}`, m.status !== "finished");
        showOutcome();
        break;
      case "tools":
        renderTools(m.tools, m.error);
        break;
      case "clock":
        $("[data-testid=game-clock]").value = m.clock;
        say(`Game time: ${m.clock === "step" ? "per input" : m.clock === "half" ? "half speed" : "real time"}`);
        break;
      case "calling":
        say(`Calling ${m.server}.${m.tool}…`);
        break;
      case "tool_result":
        say("");
        $("[data-testid=tool-result]").textContent = resultText({type: "mcp_call"}, m.result);
        break;
      case "error":
        say(m.message, true);
        if (m.for === "tool_call") $("[data-testid=tool-result]").textContent = `error: ${m.message}`;
        break;
    }
  };
  ws.onclose = (e) => {
    online = false;
    renderControl();
    if (e.code === 4401) { say("Log in again to continue.", true); return; }
    if (e.code === 4403) { say("You may not open this episode.", true); return; }
    say(RECONNECTING, true);
    setTimeout(connect, retry);
    retry = Math.min(retry * 2, 8000);
  };
}

root.addEventListener("click", (e) => {
  const zoom = e.target.closest("[data-zoom]")?.dataset.zoom;
  if (zoom) {
    zoomTo = zoom;
    if (live) live.setFocus(zoom === "area" ? viewArea : null);
    root.querySelectorAll("[data-zoom]").forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.zoom === zoom)));
    return;
  }
  const act = e.target.closest("[data-act]")?.dataset.act;
  if (!act) return;
  if (act === "request" || act === "release" || act === "force") send({ type: "control", op: act });
  if (act === "pause") send({ type: paused ? "resume" : "pause" });
  if (act === "propose") send({ type: "propose" });
  if (act === "accept") send({ type: "accept" });
  if (act === "edit") send({ type: "edit", text: $("[data-testid=proposal-text]").value });
  if (act === "submit") send({ type: "submit", answer: $("[data-testid=answer]").value });
  if (act === "tool-call") callTool();
  if (act === "tools-retry") send({ type: "tools" });
});
$("[data-testid=tool-name]")?.addEventListener("change", describeTool);
$("[data-testid=game-clock]")?.addEventListener("change", (e) => send({ type: "clock", clock: e.target.value }));

let thoughtTimer = null;
$("[data-testid=thought]").addEventListener("input", (e) => {
  clearTimeout(thoughtTimer);
  thoughtTimer = setTimeout(() => send({ type: "thought", text: e.target.value }), 150);
});
// The thought belongs to the step it precedes: once recorded, the box empties for the next one.
const emptyThought = () => { $("[data-testid=thought]").value = ""; };
new MutationObserver(emptyThought).observe(stepsList, { childList: true });

connect();
