// Whack: whack-a-mole. Moles pop out of nine holes (3×3) and hide again after UP ticks (1.5 s); click a
// mole while it is out to whack it (+1). A click that whacks nothing (an empty hole, the grass) costs a
// point (-1). Score: moles whacked minus missed clicks. MOLES moles come, at seeded times and holes; the
// game ends a moment after the last one has hidden.
(function () {
  "use strict";
  const W = 300;
  const H = 320;
  const TOP = 40;
  const GAP = 90;
  const HOLE_R = 34;
  const MOLES = 12;
  const UP = 15;
  const FIRST = 6;
  const EVERY = 10;

  function holeCentre(h) {
    return [W / 2 + ((h % 3) - 1) * GAP, TOP + GAP / 2 + Math.floor(h / 3) * GAP];
  }

  function outNow(s) {
    return s.moles.filter((m) => !m.hit && m.at <= s.t && s.t < m.at + UP);
  }

  FlywheelGame.define({
    name: "whack",
    title: "Whack-a-mole",
    width: W,
    height: H,
    tickMs: 100,

    init(g) {
      const moles = [];
      for (let i = 0; i < MOLES; i++) {
        const at = FIRST + i * EVERY + Math.floor(g.rng() * 3);
        const busy = moles.filter((m) => m.at + UP > at).map((m) => m.hole);
        const free = [];
        for (let h = 0; h < 9; h++) if (!busy.includes(h)) free.push(h);
        moles.push({ at: at, hole: free[Math.floor(g.rng() * free.length)], hit: false });
      }
      const end = moles[MOLES - 1].at + UP + 5;
      g.s = { moles: moles, t: 0, end: end, hits: 0, misses: 0, last: null };
      g.score = 0;
      g.over = false;
    },

    click(g, x, y) {
      const s = g.s;
      if (g.over) return;
      let hole = -1;
      for (let h = 0; h < 9; h++) {
        const [cx, cy] = holeCentre(h);
        if ((x - cx) ** 2 + (y - cy) ** 2 <= (HOLE_R + 6) ** 2) hole = h;
      }
      const mole = outNow(s).find((m) => m.hole === hole);
      if (mole) {
        mole.hit = true;
        s.hits += 1;
        g.score += 1;
        s.last = { x: x, y: y, hit: true, t: s.t };
      } else {
        s.misses += 1;
        g.score -= 1;
        s.last = { x: x, y: y, hit: false, t: s.t };
      }
    },

    tick(g) {
      const s = g.s;
      s.t += 1;
      if (s.t >= s.end) g.over = true;
    },

    draw(g, c) {
      const s = g.s;
      c.fillStyle = "#7cc26b";
      c.fillRect(0, 0, W, H);
      c.fillStyle = "#234";
      c.font = "16px sans-serif";
      const left = s.moles.filter((m) => m.at > s.t).length;
      c.fillText("Whacked " + s.hits + "   Missed " + s.misses + "   Still to come " + left, 10, 24);
      const out = outNow(s);
      for (let h = 0; h < 9; h++) {
        const [cx, cy] = holeCentre(h);
        c.fillStyle = "#4a3222";
        c.beginPath();
        c.ellipse(cx, cy + 14, HOLE_R, HOLE_R / 2, 0, 0, 2 * Math.PI);
        c.fill();
        if (out.some((m) => m.hole === h)) {
          c.fillStyle = "#8a5a3b";
          c.beginPath();
          c.arc(cx, cy, HOLE_R - 8, Math.PI, 0);
          c.lineTo(cx + HOLE_R - 8, cy + 14);
          c.lineTo(cx - HOLE_R + 8, cy + 14);
          c.fill();
          c.fillStyle = "#111";
          c.fillRect(cx - 10, cy - 10, 5, 5);
          c.fillRect(cx + 5, cy - 10, 5, 5);
          c.fillStyle = "#f3a6b5";
          c.beginPath();
          c.arc(cx, cy + 2, 5, 0, 2 * Math.PI);
          c.fill();
        }
      }
      if (s.last && s.t - s.last.t < 3) {
        c.strokeStyle = s.last.hit ? "#ffe14d" : "#d9534f";
        c.lineWidth = 3;
        c.beginPath();
        c.arc(s.last.x, s.last.y, 12, 0, 2 * Math.PI);
        c.stroke();
      }
    },

    view(g) {
      const s = g.s;
      const coming = s.moles.filter((m) => m.at > s.t);
      return {
        holes: Array.from({ length: 9 }, (_, h) => holeCentre(h)),
        hole_radius: HOLE_R,
        out: outNow(s).map((m) => {
          const [x, y] = holeCentre(m.hole);
          return { hole: m.hole, x: x, y: y, hides_in: m.at + UP - s.t };
        }),
        next_in: coming.length ? Math.min(...coming.map((m) => m.at)) - s.t : null,
        still_to_come: coming.length,
        ends_in: s.end - s.t,
        hits: s.hits,
        misses: s.misses,
      };
    },
  });
})();
