// Input capture for a live view: turns pointer, wheel and key events on one element into the raw
// events the server merges into actions (agent_core/data/recording.py, RawEvent.from_json), in screen
// pixels of the sandbox. An ES module with no build step; also on window.FlywheelRecorder.
//
//   const rec = attach(el, {toScreen: (clientX, clientY) => ({x, y}) | null,
//                           send: (msg) => …, enabled: true});
//   rec.setEnabled(false); rec.button("home"); rec.detach();
//
// send() gets {type: "input", events: [...]}: down, up and key events go out at once (with anything
// queued before them); moves (only while a button is held, at most ~30 a second) and wheel notches
// go out in batches at most every 30 ms.

const BATCH_MS = 30;
const MOVE_MS = 33;
const PX_PER_NOTCH = 100; // Chromium reports 100 px for one notch of a mouse wheel
const WHEEL_GESTURE_MS = 250;
const BUTTONS = ["left", "middle", "right"];
const MODS = ["ctrl", "alt", "shift", "meta"];

// KeyboardEvent.key → the key names the sandboxes use (sandbox_workers/display/keys.py KEY_ALIASES).
const NAMED = {
  Enter: "enter",
  Escape: "esc",
  Esc: "esc",
  Backspace: "backspace",
  Tab: "tab",
  Delete: "delete",
  Del: "delete",
  Insert: "insert",
  " ": "space",
  Spacebar: "space",
  ArrowUp: "up",
  ArrowDown: "down",
  ArrowLeft: "left",
  ArrowRight: "right",
  Up: "up",
  Down: "down",
  Left: "left",
  Right: "right",
  Home: "home",
  End: "end",
  PageUp: "pageup",
  PageDown: "pagedown",
  CapsLock: "capslock",
  NumLock: "numlock",
  ScrollLock: "scrolllock",
  PrintScreen: "printscreen",
  Pause: "pause",
  ContextMenu: "menu",
  Control: "ctrl",
  Alt: "alt",
  AltGraph: "alt",
  Shift: "shift",
  Meta: "meta",
  OS: "meta",
};

const now = () => Math.round(performance.now()) / 1000;
const isChar = (s) => typeof s === "string" && [...s].length === 1 && !/[\p{C}\u2028\u2029]/u.test(s);

/** The modifiers held during `e`, in canonical order (AltGr typing a character is no ctrl+alt). */
export function modsOf(e) {
  const altGr = typeof e.getModifierState === "function" && e.getModifierState("AltGraph");
  const held = {
    ctrl: e.ctrlKey && !altGr,
    alt: e.altKey && !altGr,
    shift: e.shiftKey,
    meta: e.metaKey,
  };
  return MODS.filter((m) => held[m]);
}

/** {key, text, mods} for a KeyboardEvent, or null for keys the sandboxes have no name for. */
export function keyOf(e) {
  const mods = modsOf(e);
  const chord = mods.some((m) => m !== "shift");
  let key = NAMED[e.key];
  const m = /^F([1-9]|1[0-9]|2[0-4])$/.exec(e.key);
  if (m) key = `f${m[1]}`;
  if (key === undefined && isChar(e.key)) {
    key = e.key.toLowerCase();
    if (chord && !/^[a-z0-9]$/.test(key)) {
      // ctrl+shift+1 reports "!": a hotkey names the key, so use its position when it has one.
      const code = /^(?:Key([A-Z])|Digit([0-9]))$/.exec(e.code || "");
      if (code) key = (code[1] || code[2]).toLowerCase();
    }
    if (!isChar(key)) key = e.key; // a lower case that is longer than one character ("İ")
  }
  if (key === undefined) return null; // Dead, Process, Unidentified, media keys…
  const text = key === "space" ? " " : isChar(e.key) ? e.key : "";
  return { key, text, mods };
}

/** Pixel deltas of a WheelEvent (lines and pages turned into pixels). */
function wheelPixels(e) {
  const scale = e.deltaMode === 1 ? PX_PER_NOTCH / 3 : e.deltaMode === 2 ? PX_PER_NOTCH * 3 : 1;
  return [e.deltaX * scale, e.deltaY * scale];
}

/** Capture input on `el` and send it as raw events; returns {detach, setEnabled, button}. */
export function attach(el, { toScreen, send, enabled = true }) {
  let on = Boolean(enabled);
  let queue = [];
  let timer = null;
  let lastSent = 0;
  let held = new Map(); // pointerId → button name
  let last = null; // last screen point seen while a button is held
  let pendingMove = null;
  let lastMove = 0;
  const wheel = { x: 0, y: 0, at: 0 };

  if (!el.hasAttribute("tabindex")) el.tabIndex = 0;
  const oldTouchAction = el.style.touchAction;
  el.style.touchAction = "none"; // no browser panning or zooming: touches are input for the sandbox

  function flush() {
    if (timer !== null) {
      clearTimeout(timer);
      timer = null;
    }
    if (pendingMove) {
      queue.push(pendingMove);
      pendingMove = null;
    }
    if (!queue.length) return;
    const events = queue;
    queue = [];
    lastSent = performance.now();
    if (on) send({ type: "input", events });
  }

  function later() {
    if (timer === null) timer = setTimeout(flush, Math.max(0, BATCH_MS - (performance.now() - lastSent)));
  }

  function push(ev, { urgent = false } = {}) {
    if (!on) return;
    if (pendingMove) {
      queue.push(pendingMove); // keep time order: the move happened before this event
      pendingMove = null;
    }
    queue.push(ev);
    if (urgent) flush();
    else later();
  }

  function point(e) {
    const p = toScreen(e.clientX, e.clientY);
    return p ? { x: Math.round(p.x), y: Math.round(p.y) } : null;
  }

  function onPointerDown(e) {
    e.preventDefault();
    el.focus({ preventScroll: true });
    const button = BUTTONS[e.button];
    const p = point(e);
    if (!button || !p) return;
    try {
      el.setPointerCapture(e.pointerId); // the up arrives even when released outside the element
    } catch {
      // synthetic events have no active pointer to capture
    }
    held.set(e.pointerId, button);
    last = p;
    push({ kind: "down", t: now(), x: p.x, y: p.y, button }, { urgent: true });
  }

  function onPointerUp(e) {
    const button = held.get(e.pointerId);
    if (button === undefined) return;
    e.preventDefault();
    held.delete(e.pointerId);
    const p = point(e) || last; // released outside the screen: where it was last seen on it
    push({ kind: "up", t: now(), x: p.x, y: p.y, button }, { urgent: true });
  }

  function onPointerCancel(e) {
    // The browser took the pointer back: no up is sent, so the server drops the press.
    held.delete(e.pointerId);
  }

  function onPointerMove(e) {
    if (!held.has(e.pointerId)) return; // moves matter only while a button is held
    const p = point(e);
    if (!p) return;
    last = p;
    const ev = { kind: "move", t: now(), x: p.x, y: p.y };
    if (!on) return;
    if (performance.now() - lastMove >= MOVE_MS) {
      lastMove = performance.now();
      push(ev);
    } else {
      pendingMove = ev; // the latest move of the interval goes out with the next batch
      later();
    }
  }

  function onWheel(e) {
    e.preventDefault();
    const p = point(e);
    if (!p) return;
    const t = performance.now();
    const [px, py] = wheelPixels(e);
    const fresh = t - wheel.at > WHEEL_GESTURE_MS;
    wheel.at = t;
    // A notch is PX_PER_NOTCH pixels; a turn of direction drops what was left of the other way.
    const turned = (d, acc) => d !== 0 && Math.sign(d) !== Math.sign(acc);
    wheel.x = fresh || turned(px, wheel.x) ? px : wheel.x + px;
    wheel.y = fresh || turned(py, wheel.y) ? py : wheel.y + py;
    // Whole notches go out; the rest waits for more. A small first delta of a gesture (from a
    // high-resolution wheel) still scrolls one notch, and leaves nothing over.
    const take = (v) => {
      const n = Math.trunc(v / PX_PER_NOTCH);
      if (n === 0 && fresh && Math.abs(v) >= PX_PER_NOTCH / 2) return [Math.sign(v), 0];
      return [n, v - n * PX_PER_NOTCH];
    };
    let dx, dy;
    [dx, wheel.x] = take(wheel.x);
    [dy, wheel.y] = take(wheel.y);
    if (dx || dy) push({ kind: "wheel", t: now(), x: p.x, y: p.y, dx, dy });
  }

  function onKeyDown(e) {
    if (e.isComposing) return; // an input method is composing; its keys are not the text
    e.preventDefault(); // no page scrolling, no browser shortcuts while the sandbox has the keys
    const k = keyOf(e);
    if (k) push({ kind: "key", t: now(), key: k.key, text: k.text, mods: k.mods }, { urgent: true });
  }

  const prevent = (e) => e.preventDefault();
  const listeners = [
    ["pointerdown", onPointerDown],
    ["pointerup", onPointerUp],
    ["pointercancel", onPointerCancel],
    ["pointermove", onPointerMove],
    ["wheel", onWheel],
    ["keydown", onKeyDown],
    ["contextmenu", prevent],
    ["dragstart", prevent],
  ];
  for (const [type, fn] of listeners) el.addEventListener(type, fn, { passive: false });

  return {
    /** Stop listening and drop what is queued. */
    detach() {
      for (const [type, fn] of listeners) el.removeEventListener(type, fn, { passive: false });
      el.style.touchAction = oldTouchAction;
      queue = [];
      pendingMove = null;
      if (timer !== null) clearTimeout(timer);
      timer = null;
    },
    /** Send events or not (disabled: events are still kept from the page, and dropped). */
    setEnabled(value) {
      if (on && !value) flush();
      on = Boolean(value);
      if (!on) {
        queue = [];
        pendingMove = null;
      }
    },
    /** A phone button ("home" or "back") pressed outside the screen, e.g. on a toolbar. */
    button(name) {
      push({ kind: "button", t: now(), key: name }, { urgent: true });
    },
  };
}

window.FlywheelRecorder = { attach, keyOf, modsOf };
