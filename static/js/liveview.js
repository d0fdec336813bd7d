// The live screen of a sandbox in a box: noVNC, WebRTC or the JPEG screencast, behind a short-lived
// ticket. An <svg> overlay covers exactly the drawn screen with a viewBox in screen pixels, so other
// scripts draw markers (proposed clicks, cursors) in screen coordinates. Reconnects with a fresh
// ticket when the socket drops; stops when the server says no (403/404, close code 4401/4403).
//
//   import { mount } from "/static/js/liveview.js";   // or window.FlywheelLive.mount
//   const live = mount(el, { sandbox: 7, transport: "vnc", mode: "view", onStatus: console.log });
//   live.toScreen(ev.clientX, ev.clientY)  // {x, y} in screen pixels, or null outside the screen
//   live.setFocus({x: 0, y: 0, width: 330, height: 215})  // zoom to that area (null: the whole screen)
//
// A control viewer's input goes where the server decides on each use (into the sandbox's episode as
// steps of whoever holds control, raw into an idle sandbox, or nowhere); what it refuses, it says in a
// text message on the same socket, passed to `onNotice(text)` (the stream goes on).
//
// Zoom only changes how the screen is drawn: the sandbox, its screenshots and every coordinate that
// toScreen() returns stay in screen pixels. noVNC scales itself, so only the screencast and WebRTC zoom.
//
// WebRTC uses the deployment's STUN/TURN servers (the ticket carries them). A peer that has not
// connected within the ticket's connect_timeout_s (ICE failed: UDP blocked, no TURN) falls back by
// itself to `fallback` ({transport, mode}: by default noVNC to control, the screencast to watch; null:
// none) and says so with the status "fallback".

import { attach } from "./recorder.js";

const SVG_NS = "http://www.w3.org/2000/svg";
const DENIED_CODES = new Set([4401, 4403, 4400]);
const NOVNC = new URL("../vendor/novnc/core/rfb.js", import.meta.url).href;

function csrfToken() {
  try {
    const headers = JSON.parse(document.body.getAttribute("hx-headers") || "{}");
    if (headers["X-CSRFToken"]) return headers["X-CSRFToken"];
  } catch (e) { /* fall through to the cookie */ }
  const m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  return m ? decodeURIComponent(m[1]) : "";
}

function wsUrl(path) {
  return (location.protocol === "https:" ? "wss://" : "ws://") + location.host + path;
}

class Denied extends Error {}

export function mount(el, options) {
  const opts = Object.assign({ transport: "vnc", mode: "view", fps: null, width: null, onStatus: null, focus: null,
    onNotice: null }, options || {});
  const sandbox = opts.sandbox;
  const ticketUrl = opts.ticketUrl || `/sandboxes/${sandbox}/ticket/`;
  let control = opts.mode === "control";
  const fallback = opts.fallback !== undefined ? opts.fallback
    : (control ? { transport: "vnc", mode: "control" } : { transport: "screencast", mode: "view" });

  const box = document.createElement("div");
  box.className = "live-box";
  box.dataset.transport = opts.transport;
  box.dataset.mode = opts.mode;
  Object.assign(box.style, { position: "relative", overflow: "hidden", width: "100%", height: "100%",
    background: "#111" });
  const stage = document.createElement("div");
  Object.assign(stage.style, { position: "absolute", inset: "0" });
  const overlay = document.createElementNS(SVG_NS, "svg");
  overlay.setAttribute("class", "live-overlay");
  overlay.setAttribute("preserveAspectRatio", "none");
  Object.assign(overlay.style, { position: "absolute", left: "0", top: "0", width: "0", height: "0",
    pointerEvents: "none", overflow: "visible" });
  box.append(stage, overlay);
  el.appendChild(box);

  let input = null; // the recorder bound to a WebRTC data channel (control mode only)
  let inputEnabled = opts.inputEnabled !== false;
  let closed = false;
  let attempt = 0;
  let retryTimer = null;
  let session = null; // the current transport: {drawn(), size(), close()}
  let focus = opts.focus; // the screen area to fit into the box, in screen pixels; null: the whole screen
  let zoomable = opts.transport !== "vnc";

  // A text message from a live socket: the server refused input (said why), or refused a frame.
  function notice(data) {
    let msg;
    try { msg = JSON.parse(data); } catch (e) { return; }
    if (msg && msg.type === "input_refused" && opts.onNotice) opts.onNotice(String(msg.error || "input refused"));
  }

  function status(state, detail) {
    box.dataset.state = state;
    if (opts.onStatus) opts.onStatus({ state, transport: opts.transport, mode: opts.mode, detail });
  }

  async function fetchTicket() {
    const body = new URLSearchParams({ mode: opts.mode, transport: opts.transport });
    if (opts.fps) body.set("fps", String(opts.fps));
    // A thumbnail asks for the screencast scaled to its width (one shared scaling per size).
    if (opts.width && opts.transport === "screencast") body.set("width", String(opts.width));
    const r = await fetch(ticketUrl, { method: "POST", body, credentials: "same-origin",
      headers: { "X-CSRFToken": csrfToken() } });
    if (r.status === 403 || r.status === 404 || r.status === 400) {
      let why = r.statusText;
      try { why = (await r.json()).error || why; } catch (e) { /* not JSON */ }
      throw new Denied(`${r.status}: ${why}`);
    }
    if (!r.ok || r.redirected) throw new Error(`ticket: HTTP ${r.status}`);
    return r.json();
  }

  // The part of a `w`×`h` screen to show: the focus area within the screen, or all of it.
  function shown(w, h) {
    if (!focus || !zoomable) return { x: 0, y: 0, width: w, height: h };
    const x = Math.max(0, Math.min(focus.x, w - 1)), y = Math.max(0, Math.min(focus.y, h - 1));
    const width = Math.max(1, Math.min(focus.width, w - x)), height = Math.max(1, Math.min(focus.height, h - y));
    return { x, y, width, height };
  }

  // Fit a <canvas>/<video> of `w`×`h` into the box so that its shown part fills it, centred, aspect
  // kept; the rest of the screen runs past the box's edges (clipped).
  function fit(media, w, h) {
    if (!w || !h) return;
    const bw = box.clientWidth, bh = box.clientHeight;
    const part = shown(w, h);
    const s = Math.min(bw / part.width, bh / part.height);
    Object.assign(media.style, { position: "absolute", width: `${w * s}px`, height: `${h * s}px`,
      left: `${(bw - part.width * s) / 2 - part.x * s}px`, top: `${(bh - part.height * s) / 2 - part.y * s}px` });
    box.dataset.zoom = (s * Math.max(w / bw, h / bh)).toFixed(2);  // 1: the whole screen fits the box
  }

  function syncOverlay() {
    if (!session) return;
    const media = session.drawn();
    const { width, height } = session.size();
    if (!media || !width || !height) {
      overlay.style.width = "0";
      return;
    }
    session.refit && session.refit();
    const r = media.getBoundingClientRect(), b = box.getBoundingClientRect();
    Object.assign(overlay.style, { left: `${r.left - b.left}px`, top: `${r.top - b.top}px`,
      width: `${r.width}px`, height: `${r.height}px` });
    const vb = `0 0 ${width} ${height}`;
    if (overlay.getAttribute("viewBox") !== vb) overlay.setAttribute("viewBox", vb);
  }
  const resizeObserver = new ResizeObserver(syncOverlay);
  resizeObserver.observe(box);
  const syncTimer = setInterval(syncOverlay, 250);

  function toScreen(clientX, clientY) {
    if (!session) return null;
    const media = session.drawn();
    const { width, height } = session.size();
    if (!media || !width || !height) return null;
    const r = media.getBoundingClientRect();
    if (clientX < r.left || clientY < r.top || clientX >= r.right || clientY >= r.bottom) return null;
    // Zoomed, the screen runs past the box: a point outside the box is not on what the person sees.
    const b = box.getBoundingClientRect();
    if (clientX < b.left || clientY < b.top || clientX >= b.right || clientY >= b.bottom) return null;
    return {
      x: Math.min(width - 1, Math.floor(((clientX - r.left) / r.width) * width)),
      y: Math.min(height - 1, Math.floor(((clientY - r.top) / r.height) * height)),
    };
  }

  function dropped(code, why) {
    if (closed) return;
    if (session) { try { session.close(); } catch (e) { /* already gone */ } session = null; }
    if (DENIED_CODES.has(code)) { status("denied", why || `closed ${code}`); return; }
    attempt += 1;
    const delay = Math.min(10000, 500 * 2 ** Math.min(attempt, 5));
    status("reconnecting", `${why || "connection lost"}; retrying in ${Math.round(delay / 100) / 10} s`);
    retryTimer = setTimeout(connect, delay);
  }

  async function connect() {
    retryTimer = null;
    if (closed) return;
    status("connecting");
    let ticket;
    try {
      ticket = await fetchTicket();
    } catch (e) {
      if (e instanceof Denied) { status("denied", e.message); return; }
      dropped(0, e.message);
      return;
    }
    if (closed) return;
    try {
      const start = { vnc: startVnc, webrtc: startWebRtc, screencast: startScreencast }[opts.transport];
      if (!start) throw new Denied(`unknown transport ${opts.transport}`);
      session = await start(wsUrl(ticket.url), ticket);
    } catch (e) {
      if (e instanceof Denied) { status("denied", e.message); return; }
      dropped(0, e.message);
    }
  }

  function connected() {
    attempt = 0;
    status("connected");
    syncOverlay();
  }

  // WebRTC could not connect: go on over the fallback WebSocket transport (or retry, without one).
  function fallBack(why) {
    if (closed) return;
    if (!fallback || opts.transport === fallback.transport) { dropped(0, why); return; }
    if (session) { try { session.close(); } catch (e) { /* already gone */ } session = null; }
    opts.transport = fallback.transport;
    opts.mode = fallback.mode;
    control = opts.mode === "control";
    zoomable = opts.transport !== "vnc";
    box.dataset.transport = opts.transport;
    box.dataset.mode = opts.mode;
    status("fallback", `WebRTC did not connect (${why}); using ${opts.transport}`);
    connect();
  }

  // --- noVNC: raw RFB over the relay; the server filters input on view tickets anyway -------------
  async function startVnc(url) {
    const { default: RFB } = await import(NOVNC);
    // noVNC takes the socket we open, so the server's text messages (a refusal of input) reach the
    // page; noVNC itself ignores text frames (an empty message to it).
    const ws = new WebSocket(url);
    ws.addEventListener("message", (ev) => { if (typeof ev.data === "string") notice(ev.data); });
    const rfb = new RFB(stage, ws, { shared: true });
    rfb.viewOnly = !control;
    rfb.focusOnClick = control;
    rfb.scaleViewport = true;
    rfb.background = "#111";
    const canvas = () => stage.querySelector("canvas");
    rfb.addEventListener("connect", connected);
    rfb.addEventListener("disconnect", (ev) => {
      if (session && session.rfb === rfb) dropped(0, ev.detail.clean ? "closed" : "connection lost");
    });
    rfb.addEventListener("securityfailure", (ev) => dropped(4403, `security: ${ev.detail.reason || ""}`));
    return {
      rfb,
      drawn: canvas,
      size: () => { const c = canvas(); return { width: c ? c.width : 0, height: c ? c.height : 0 }; },
      close: () => { try { rfb.disconnect(); } catch (e) { /* already closed */ } stage.replaceChildren(); },
    };
  }

  // --- screencast: one JPEG per binary message, newest wins ---------------------------------------
  async function startScreencast(url, ticket) {
    // A thumbnail's frames are scaled down: it still speaks screen pixels (toScreen, the overlay).
    const screen = opts.width && ticket.screen ? ticket.screen : null;
    const canvas = document.createElement("canvas");
    canvas.className = "live-screen";
    stage.replaceChildren(canvas);
    // bitmaprenderer: the canvas shows each decoded frame itself, with no copy into a 2D canvas.
    const ctx = canvas.getContext("bitmaprenderer");
    // ack=1: this page acknowledges each frame once drawn (or dropped), and the server sends at most
    // two unacknowledged ones, the newest: a busy machine gets fewer fresh frames, never a stale queue.
    const ws = new WebSocket(url + (url.includes("?") ? "&" : "?") + "ack=1");
    ws.binaryType = "arraybuffer";
    let pending = null, busy = false, gotFirst = false;
    const ack = () => { if (ws.readyState === WebSocket.OPEN) ws.send("ack"); };
    async function paint() {
      if (busy || !pending) return;
      busy = true;
      const data = pending;
      pending = null;
      try {
        const bmp = await createImageBitmap(new Blob([data], { type: "image/jpeg" }));
        if (canvas.width !== bmp.width || canvas.height !== bmp.height) {
          canvas.width = bmp.width;
          canvas.height = bmp.height;
          fit(canvas, bmp.width, bmp.height);
        }
        ctx.transferFromImageBitmap(bmp);
        if (!gotFirst) { gotFirst = true; connected(); }
      } catch (e) { /* a bad frame: wait for the next */ }
      busy = false;
      ack();
      if (pending) paint();
    }
    ws.onmessage = (ev) => {
      if (!(ev.data instanceof ArrayBuffer)) return;
      if (pending) ack(); // replaced before it was drawn
      pending = ev.data;
      paint();
    };
    const me = {
      drawn: () => (canvas.width ? canvas : null),
      size: () => (screen && canvas.width ? { width: screen.width, height: screen.height }
        : { width: canvas.width, height: canvas.height }),
      refit: () => fit(canvas, canvas.width, canvas.height),
      close: () => { ws.onclose = null; ws.close(); stage.replaceChildren(); },
    };
    ws.onclose = (ev) => { if (session === me) dropped(ev.code, ev.reason || `closed ${ev.code}`); };
    return me;
  }

  // --- WebRTC: a recvonly video track; in control mode an "input" data channel --------------------
  async function startWebRtc(url, ticket) {
    const video = document.createElement("video");
    video.className = "live-screen";
    Object.assign(video, { autoplay: true, muted: true, playsInline: true });
    stage.replaceChildren(video);
    const pc = new RTCPeerConnection({ iceServers: ticket.ice_servers || [] });
    let peerUp = false;
    pc.addTransceiver("video", { direction: "recvonly" });
    const channel = control ? pc.createDataChannel("input", { ordered: true }) : null;
    const ws = new WebSocket(url);
    let me = null;
    const failed = (why, code) => { if (session === me) dropped(code || 0, why); };
    // Never connected in time (or ICE failed first): this network does not carry WebRTC.
    const connectTimer = setTimeout(() => {
      if (session === me && !peerUp) fallBack(`no connection in ${ticket.connect_timeout_s || 8} s`);
    }, (ticket.connect_timeout_s || 8) * 1000);
    pc.ontrack = (ev) => { video.srcObject = ev.streams[0] || new MediaStream([ev.track]); };
    // Connected once the picture is there and, to control, the input channel is open: a person who
    // starts at "connected" must not lose a first click or keys.
    const ready = () => { if (video.videoWidth && (!channel || channel.readyState === "open")) connected(); };
    video.addEventListener("loadedmetadata", () => { fit(video, video.videoWidth, video.videoHeight); ready(); });
    if (channel) channel.addEventListener("open", ready);
    video.addEventListener("resize", () => fit(video, video.videoWidth, video.videoHeight));
    pc.onconnectionstatechange = () => {
      if (pc.connectionState === "connected") { peerUp = true; clearTimeout(connectTimer); }
      if (pc.connectionState === "failed" && !peerUp) { if (session === me) fallBack("ICE failed"); }
      else if (pc.connectionState === "failed" || pc.connectionState === "closed") failed(`peer ${pc.connectionState}`);
    };
    ws.onmessage = async (ev) => {
      const msg = JSON.parse(ev.data);
      if (msg.type === "answer") await pc.setRemoteDescription({ type: "answer", sdp: msg.sdp });
      else if (msg.type === "input_refused") notice(ev.data);
      else if (msg.type === "error") failed(msg.error);
    };
    ws.onclose = (ev) => failed(ev.reason || `closed ${ev.code}`, ev.code);
    ws.onopen = async () => {
      await pc.setLocalDescription(await pc.createOffer());
      // The server's peer does not trickle; send the offer once every candidate is in it.
      if (pc.iceGatheringState !== "complete") {
        await new Promise((resolve) => {
          const done = () => { if (pc.iceGatheringState === "complete") resolve(); };
          pc.addEventListener("icegatheringstatechange", done);
          setTimeout(resolve, 2000);
        });
      }
      ws.send(JSON.stringify({ type: "offer", sdp: pc.localDescription.sdp }));
    };
    const unbind = channel ? bindInput(video, channel) : () => {};
    me = {
      drawn: () => (video.videoWidth ? video : null),
      size: () => ({ width: video.videoWidth, height: video.videoHeight }),
      refit: () => fit(video, video.videoWidth, video.videoHeight),
      close: () => {
        clearTimeout(connectTimer); unbind(); ws.onclose = null; ws.close(); pc.close(); stage.replaceChildren();
      },
    };
    return me;
  }

  // Control over WebRTC: the recorder's raw events (the same form the session socket takes), as
  // JSON on the data channel; the server merges them into actions and records them as steps.
  function bindInput(target, channel) {
    // Input from before the channel opened waits for it (in order), never dropped unsent.
    const waiting = [];
    const send = (msg) => {
      const data = JSON.stringify(msg);
      if (channel.readyState === "open") channel.send(data);
      else if (channel.readyState === "connecting" && waiting.length < 10000) waiting.push(data);
    };
    channel.addEventListener("open", () => { while (waiting.length) channel.send(waiting.shift()); });
    input = attach(target, { toScreen, send, enabled: inputEnabled });
    return () => { input.detach(); input = null; };
  }

  connect();

  return {
    element: box,
    overlay,
    screenSize: () => (session ? session.size() : { width: 0, height: 0 }),
    toScreen,
    // Zoom to a screen area ({x, y, width, height} in screen pixels), or back to the whole screen (null);
    // false where the transport cannot zoom (noVNC).
    setFocus(area) { focus = area || null; syncOverlay(); return zoomable; },
    canZoom: () => zoomable,
    // Whether input over the WebRTC data channel is sent (a page turns it off while it lacks control).
    setInputEnabled(on) { inputEnabled = Boolean(on); if (input) input.setEnabled(inputEnabled); },
    close() {
      closed = true;
      if (retryTimer) clearTimeout(retryTimer);
      clearInterval(syncTimer);
      resizeObserver.disconnect();
      if (session) { try { session.close(); } catch (e) { /* already gone */ } session = null; }
      status("closed");
      box.remove();
    },
  };
}

window.FlywheelLive = { mount };
