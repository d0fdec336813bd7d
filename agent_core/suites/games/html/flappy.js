// Flappy: a timing game. The bird falls; a tap (Space, ArrowUp or a click) flaps it up. Fly through the
// gaps of the pipes that scroll toward it; touching a pipe, the ground or the sky ends the flight.
// Score: pipes passed. The flight ends by itself once the last pipe is passed.
// Physics is in whole pixels per tick so the reference player (agent_core/suites/games/flappy.py) can
// simulate it exactly: a flap sets the vertical speed to FLAP, then every tick adds GRAVITY (capped at
// VMAX) and moves the bird by it, and the pipes move SPEED pixels left.
(function () {
  "use strict";
  const W = 288;
  const H = 400;
  const GROUND = 368; // the ground's top edge
  const BX = 64; // the bird's x (centre); it never moves sideways
  const BR = 10; // the bird's half size (its box is 2*BR square)
  const GRAVITY = 1;
  const FLAP = -8;
  const VMAX = 10;
  const SPEED = 8;
  const PIPE_W = 44;
  const GAP = 110;
  const SPACING = 160;
  const FIRST_X = 240;
  const PIPES = 5;
  const START_Y = 180;

  function flap(g) {
    if (!g.over) {
      g.s.vy = FLAP;
      g.s.flaps += 1;
    }
  }

  FlywheelGame.define({
    name: "flappy",
    title: "Flappy",
    width: W,
    height: H,
    tickMs: 100,

    init(g) {
      const pipes = [];
      for (let i = 0; i < PIPES; i++) {
        // gap tops from 70 to GROUND - GAP - 70: never against the sky or the ground
        const top = 70 + Math.floor(g.rng() * (GROUND - GAP - 139));
        pipes.push({ x: FIRST_X + i * SPACING, top: top, bottom: top + GAP, passed: false });
      }
      g.s = { y: START_Y, vy: 0, pipes: pipes, flaps: 0, crashed: "" };
      g.score = 0;
      g.over = false;
    },

    key(g, key) {
      if (key === " " || key === "ArrowUp") flap(g);
    },

    click(g) {
      flap(g);
    },

    tick(g) {
      const s = g.s;
      s.vy = Math.min(s.vy + GRAVITY, VMAX);
      s.y += s.vy;
      for (const p of s.pipes) {
        p.x -= SPEED;
        if (!p.passed && p.x + PIPE_W < BX - BR) {
          p.passed = true;
          g.score += 1;
        }
      }
      if (s.y + BR >= GROUND) {
        s.y = GROUND - BR;
        s.crashed = "ground";
      } else if (s.y - BR <= 0) {
        s.crashed = "sky";
      } else {
        for (const p of s.pipes) {
          const overlaps = p.x < BX + BR && p.x + PIPE_W > BX - BR;
          if (overlaps && (s.y - BR < p.top || s.y + BR > p.bottom)) s.crashed = "pipe";
        }
      }
      if (s.crashed || g.score === PIPES) g.over = true;
    },

    draw(g, c) {
      const s = g.s;
      c.fillStyle = "#8fd3f4";
      c.fillRect(0, 0, W, H);
      c.fillStyle = "#3c9a3c";
      for (const p of s.pipes) {
        if (p.x > W || p.x + PIPE_W < 0) continue;
        c.fillRect(p.x, 0, PIPE_W, p.top);
        c.fillRect(p.x, p.bottom, PIPE_W, GROUND - p.bottom);
        c.fillStyle = "#2d7a2d";
        c.fillRect(p.x - 3, p.top - 12, PIPE_W + 6, 12);
        c.fillRect(p.x - 3, p.bottom, PIPE_W + 6, 12);
        c.fillStyle = "#3c9a3c";
      }
      c.fillStyle = "#c9a86b";
      c.fillRect(0, GROUND, W, H - GROUND);
      c.fillStyle = s.crashed ? "#d9534f" : "#f5d33b";
      c.beginPath();
      c.arc(BX, s.y, BR, 0, 2 * Math.PI);
      c.fill();
      c.fillStyle = "#222";
      c.fillRect(BX + 3, s.y - 5, 3, 3); // the eye
      c.fillStyle = "#e8812c";
      c.fillRect(BX + BR - 2, s.y - 1, 6, 4); // the beak
      c.fillStyle = "#222";
      c.font = "16px sans-serif";
      c.fillText("Pipes " + g.score + " / " + PIPES, 8, H - 10);
    },

    view(g) {
      const s = g.s;
      return {
        bird: { x: BX, y: s.y, vy: s.vy, r: BR },
        pipes: s.pipes.map((p) => ({ x: p.x, top: p.top, bottom: p.bottom, passed: p.passed })),
        pipe_width: PIPE_W,
        ground: GROUND,
        gravity: GRAVITY,
        flap: FLAP,
        vmax: VMAX,
        speed: SPEED,
        flaps: s.flaps,
        crashed: s.crashed,
        pipes_total: PIPES,
      };
    },
  });
})();
