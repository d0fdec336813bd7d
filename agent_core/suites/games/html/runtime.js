/* The runtime every game of the games suite uses (agent_core/suites/games/html).

   A game file calls FlywheelGame.define({...}) once (see the suite's contract, notes/games-contract.md):
   name, width, height, tickMs, init(g), tick(g), key(g, key), click(g, x, y), draw(g, c), view(g),
   and optionally turnBased: true (inputs apply at once instead of at the next tick boundary).

   Why it is shaped this way:
   - Game time is ticks. Running, a tick comes every tickMs of page time (chained setTimeouts), so the
     browser sandbox's CDP virtual clock drives it (accelerated = faster, half rate = slowed for a
     person). Stepped (_start({stepped: true}), or _clock), ticks run only when the provider calls
     _advance(n): an agent's action costs the game a fixed number of ticks however long it thinks,
     while the page itself (rendering, input, screenshots) runs on its ordinary clock. Nothing here
     reads Date, performance.now, requestAnimationFrame or Math.random for game logic.
   - Determinism: the outcome is a function of the seed and the (tick, input) sequence. Inputs are
     queued and applied at the next tick boundary (before that tick runs), each logged with the number
     of ticks done when it applied; a replay feeds the same log back and gets the same game, at any
     clock rate.
   - Privileged state (the view, the input log) is reachable only through FlywheelGame._state(), which
     the sandbox provider calls; nothing of it is ever written into the DOM (the agent may read the
     page's HTML). The canvas and the score line are what a player sees.
   - The loop does not run until the provider calls FlywheelGame._start(opts), so no game time passes
     while the page loads. ?autostart=1 starts at once (a person
     opening the page by hand).

   g (what a game's functions get): g.s (the game's own state), g.score, g.over, g.tick (ticks done),
   g.seed, g.rng() (seeded PRNG in [0, 1)), g.width, g.height, g.status (optional text the runtime
   shows beside the score, e.g. "Moves left: 12").
*/
(function () {
  "use strict";

  const params = new URLSearchParams(window.location.search);
  const NAME_RE = /^[a-z0-9_-]{1,40}$/;
  const KEY_MAX = 32;

  // --- seeded PRNG (xmur3 string hash → mulberry32) ---------------------------------------------
  function hashSeed(text) {
    let h = 1779033703 ^ text.length;
    for (let i = 0; i < text.length; i++) {
      h = Math.imul(h ^ text.charCodeAt(i), 3432918353);
      h = (h << 13) | (h >>> 19);
    }
    h = Math.imul(h ^ (h >>> 16), 2246822507);
    h = Math.imul(h ^ (h >>> 13), 3266489909);
    return (h ^= h >>> 16) >>> 0;
  }

  function mulberry32(a) {
    return function () {
      a |= 0;
      a = (a + 0x6d2b79f5) | 0;
      let t = Math.imul(a ^ (a >>> 15), 1 | a);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  // --- page state (closure: never on window, never in the DOM) ----------------------------------
  let def = null;
  let g = null;
  let ctx = null;
  let canvas = null;
  let statusEl = null;
  let started = false;
  let timer = null;
  let queue = [];
  let log = [];
  let replay = null; // [[tick, kind, payload], ...] sorted by tick, or null
  let replayAt = 0;
  let stopAt = null; // a replay stops after this many ticks (to compare with the game it recorded)
  let stepped = false; // ticks run only when the provider asks (_advance), not on page timers
  let error = "";

  function fail(message) {
    error = message;
    const el = document.getElementById("status");
    if (el) el.textContent = "Error: " + message;
  }

  function render() {
    if (!g) return;
    ctx.save();
    try {
      def.draw(g, ctx);
    } finally {
      ctx.restore();
    }
    if (g.over) {
      ctx.save();
      ctx.fillStyle = "rgba(0, 0, 0, 0.55)";
      ctx.fillRect(0, g.height / 2 - 30, g.width, 60);
      ctx.fillStyle = "#ffffff";
      ctx.font = "bold 28px sans-serif";
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillText("Game over", g.width / 2, g.height / 2);
      ctx.restore();
    }
    let text = "Score: " + formatScore(g.score);
    if (g.status) text += "   " + String(g.status);
    if (g.over) text += "   Game over";
    statusEl.textContent = text;
  }

  function formatScore(v) {
    const n = Number(v) || 0;
    return Number.isInteger(n) ? String(n) : n.toFixed(1);
  }

  function apply(kind, payload) {
    if (g.over) return false;
    log.push([g.tick, kind, payload]);
    if (kind === "key") {
      if (def.key) def.key(g, payload);
    } else if (def.click) {
      def.click(g, payload[0], payload[1]);
    }
    return true;
  }

  function input(kind, payload) {
    if (!started || g.over || replay) return; // a replay owns the inputs
    if (def.turnBased) {
      if (apply(kind, payload)) render();
    } else {
      queue.push([kind, payload]);
    }
  }

  // One tick boundary: the inputs due, then the tick; whether the game goes on ticking after it.
  function runTick() {
    if (replay) {
      while (replayAt < replay.length && replay[replayAt][0] <= g.tick) {
        const [, kind, payload] = replay[replayAt++];
        apply(kind, payload);
      }
    } else {
      const pending = queue;
      queue = [];
      for (const [kind, payload] of pending) apply(kind, payload);
    }
    const running = stopAt === null || g.tick < stopAt;
    if (!g.over && running) {
      def.tick(g);
      g.tick += 1;
    }
    render();
    // A replay stopped at stop_at still applies the inputs recorded at that tick (one more boundary).
    const more = stopAt === null || g.tick < stopAt || (replay && replayAt < replay.length && running);
    return !g.over && Boolean(more);
  }

  function step() {
    timer = null;
    if (g.over || stepped) return;
    if (runTick()) timer = setTimeout(step, def.tickMs);
  }

  function checkReplay(list) {
    if (!Array.isArray(list)) throw new Error("replay must be a list of [tick, kind, payload]");
    let last = 0;
    return list.map(function (item, i) {
      const ok =
        Array.isArray(item) &&
        item.length === 3 &&
        Number.isInteger(item[0]) &&
        item[0] >= last &&
        ((item[1] === "key" && typeof item[2] === "string") ||
          (item[1] === "click" && Array.isArray(item[2]) && item[2].length === 2));
      if (!ok) throw new Error("replay[" + i + "] is not [tick (not decreasing), key|click, payload]");
      last = item[0];
      return [item[0], item[1], item[1] === "key" ? item[2] : [Number(item[2][0]), Number(item[2][1])]];
    });
  }

  function onKey(e) {
    if (!started) return;
    const k = String(e.key || "");
    if (!k || k.length > KEY_MAX || e.ctrlKey || e.altKey || e.metaKey) return;
    if (k.startsWith("Arrow") || k === " " || k === "Enter" || k === "Tab") e.preventDefault();
    input("key", k);
  }

  function onMouse(e) {
    if (!started || e.button !== 0) return;
    const r = canvas.getBoundingClientRect();
    const x = Math.round(e.clientX - r.left);
    const y = Math.round(e.clientY - r.top);
    if (x < 0 || y < 0 || x >= g.width || y >= g.height) return;
    e.preventDefault();
    input("click", [x, y]);
  }

  const api = {
    /** Called once by a game file. */
    define(spec) {
      if (def) return fail("FlywheelGame.define was called twice");
      for (const f of ["name", "width", "height", "tickMs", "init", "tick", "draw", "view"]) {
        if (spec[f] === undefined) return fail("the game's definition has no " + f);
      }
      def = spec;
      const seedText = params.get("seed") || "0";
      const seed = Number.isFinite(Number(seedText)) ? Number(seedText) : 0;
      const rng = mulberry32(hashSeed(spec.name + ":" + seed));
      g = {
        name: spec.name,
        seed: seed,
        width: spec.width,
        height: spec.height,
        tick: 0,
        score: 0,
        over: false,
        status: "",
        s: {},
        rng: rng,
      };
      canvas = document.getElementById("game");
      canvas.width = spec.width;
      canvas.height = spec.height;
      canvas.style.width = spec.width + "px";
      canvas.style.height = spec.height + "px";
      statusEl = document.getElementById("status");
      statusEl.style.top = spec.height + 6 + "px";
      ctx = canvas.getContext("2d");
      document.title = spec.title || spec.name;
      spec.init(g);
      render();
      window.addEventListener("keydown", onKey, true);
      canvas.addEventListener("mousedown", onMouse);
      canvas.addEventListener("contextmenu", function (e) {
        e.preventDefault();
      });
      if (params.get("autostart") === "1") api._start({});
    },

    /** PRIVILEGED (the sandbox provider): start the loop; opts.replay feeds a recorded input log,
        opts.stop_at stops the loop after that many ticks. */
    _start(opts) {
      if (error) throw new Error(error);
      if (!def) throw new Error("the game has not loaded");
      if (started) throw new Error("the game has already started");
      replay = opts && opts.replay ? checkReplay(opts.replay) : null;
      stopAt = opts && Number.isInteger(opts.stop_at) ? opts.stop_at : null;
      stepped = Boolean(opts && opts.stepped);
      started = true;
      if (!stepped) timer = setTimeout(step, def.tickMs);
      return api._info();
    },

    /** PRIVILEGED: on a stepped game, run `n` ticks now (fewer if it ends); how many ran. */
    _advance(n) {
      if (!started) throw new Error("the game has not started");
      if (!stepped) throw new Error("the game runs on the page clock, not stepped");
      let done = 0;
      while (done < n && !g.over) {
        done += 1;
        if (!runTick()) break;
      }
      return done;
    },

    /** PRIVILEGED: stepped (ticks only through _advance) or running on the page's timers. */
    _clock(opts) {
      if (!started) throw new Error("the game has not started");
      const want = Boolean(opts && opts.stepped);
      if (want === stepped) return { stepped: stepped };
      stepped = want;
      if (stepped && timer !== null) {
        clearTimeout(timer);
        timer = null;
      } else if (!stepped && timer === null && !g.over) {
        timer = setTimeout(step, def.tickMs);
      }
      return { stepped: stepped };
    },

    /** PRIVILEGED: what the game is (no state). */
    _info() {
      return {
        ready: Boolean(def),
        error: error,
        game: def ? def.name : null,
        seed: g ? g.seed : null,
        width: def ? def.width : null,
        height: def ? def.height : null,
        tick_ms: def ? def.tickMs : null,
        started: started,
      };
    },

    /** PRIVILEGED: the game's state for checkers and reference players. */
    _state() {
      if (!def) throw new Error(error || "the game has not loaded");
      return JSON.parse(
        JSON.stringify({
          game: def.name,
          seed: g.seed,
          score: g.score,
          over: g.over,
          tick: g.tick,
          started: started,
          view: def.view(g),
          inputs: log,
        })
      );
    },
  };
  Object.freeze(api);
  Object.defineProperty(window, "FlywheelGame", { value: api, writable: false, configurable: false });

  function load() {
    const name = params.get("game") || "";
    if (!NAME_RE.test(name)) return fail("no game named " + JSON.stringify(name.slice(0, 40)));
    const script = document.createElement("script");
    script.src = name + ".js";
    script.onerror = function () {
      fail("no game named " + name);
    };
    document.head.appendChild(script);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", load);
  else load();
})();
