// Breakout: keep the ball in play with the paddle (ArrowLeft / ArrowRight) and break the bricks above.
// Each press slides the paddle STEP pixels. The ball is served downward from below the bricks at a
// seeded angle, toward a point the paddle is NOT at (so a player who does nothing scores 0); where it
// meets the paddle sets its new angle (further from the centre, steeper sideways). A ball that gets past
// the paddle costs a life; the game ends with the last life, the last brick or after TIME_LIMIT ticks.
// Score: bricks broken.
// Physics is in whole pixels per tick so the reference player (agent_core/suites/games/breakout.py)
// can simulate it exactly: each tick the ball first tries its vertical step, then its horizontal one; a
// step that would overlap a wall or a brick is not taken and reverses that speed (and breaks the
// bricks it would overlap); the paddle turns the ball when the ball's bottom would cross its top.
(function () {
  "use strict";
  const W = 400;
  const H = 400;
  const COLS = 8;
  const ROWS = 5;
  const BW = 50; // a brick's slot (the brick is drawn 2 px inside it)
  const BH = 16;
  const TOP = 40; // the top row's upper edge
  const R = 5; // the ball's half size (its box is 2*R square)
  const VY = 5; // vertical speed, pixels a tick, always
  const PW = 80; // paddle width
  const PH = 10;
  const PY = 370; // the paddle's top edge
  const STEP = 50; // pixels a key press moves the paddle
  const LIVES = 3;
  const TIME_LIMIT = 2400; // ticks (60 s)
  const SERVE_Y = 150;
  const COLORS = ["#e53935", "#fb8c00", "#fdd835", "#43a047", "#1e88e5"];

  // Where a ball at (x, y) moving (vx, down) reaches the paddle's line, bouncing off the side walls.
  function landing(x, y, vx) {
    while (!(y + R <= PY && y + VY + R > PY)) {
      y += VY;
      if (x + vx - R < 0 || x + vx + R > W) vx = -vx;
      else x += vx;
    }
    return x;
  }

  function serve(g) {
    const s = g.s;
    // A seeded angle and spot, redrawn until the ball would land 60..160 px from the paddle's centre:
    // doing nothing misses it, and a player has time to get there.
    for (let tries = 0; tries < 200; tries++) {
      const speeds = [-3, -2, -1, 1, 2, 3];
      const vx = speeds[Math.floor(g.rng() * speeds.length)];
      const x = 40 + Math.floor(g.rng() * (W - 80));
      const off = Math.abs(landing(x, SERVE_Y, vx) - s.px);
      if ((off >= 60 && off <= 160) || tries === 199) {
        s.ball = { x: x, y: SERVE_Y, vx: vx, vy: VY };
        return;
      }
    }
  }

  function hits(x, y) {
    // The bricks a ball box centred at (x, y) would overlap (indices into s.bricks).
    const found = [];
    const c0 = Math.floor((x - R) / BW);
    const c1 = Math.floor((x + R - 1) / BW);
    const r0 = Math.floor((y - R - TOP) / BH);
    const r1 = Math.floor((y + R - 1 - TOP) / BH);
    for (let r = Math.max(r0, 0); r <= Math.min(r1, ROWS - 1); r++) {
      for (let c = Math.max(c0, 0); c <= Math.min(c1, COLS - 1); c++) found.push(r * COLS + c);
    }
    return found;
  }

  function breakAt(g, x, y) {
    const s = g.s;
    const live = hits(x, y).filter((i) => s.bricks[i]);
    for (const i of live) {
      s.bricks[i] = 0;
      g.score += 1;
    }
    return live.length > 0;
  }

  FlywheelGame.define({
    name: "breakout",
    title: "Breakout",
    width: W,
    height: H,
    tickMs: 25,

    init(g) {
      g.s = { px: W / 2, bricks: new Array(ROWS * COLS).fill(1), lives: LIVES, ball: null, misses: 0 };
      serve(g);
      g.status = "Lives: " + LIVES + "   Time left: " + (TIME_LIMIT * 25) / 1000 + " s";
    },

    key(g, key) {
      const s = g.s;
      if (key === "ArrowLeft") s.px = Math.max(PW / 2, s.px - STEP);
      else if (key === "ArrowRight") s.px = Math.min(W - PW / 2, s.px + STEP);
    },

    tick(g) {
      const s = g.s;
      const b = s.ball;
      // vertical step
      const ny = b.y + b.vy;
      const onPaddle = b.vy > 0 && b.y + R <= PY && ny + R > PY && b.x + R > s.px - PW / 2 && b.x - R < s.px + PW / 2;
      if (onPaddle) {
        let vx = Math.floor((b.x - s.px + 5) / 10); // -4 .. 4 across the paddle
        vx = Math.max(-4, Math.min(4, vx));
        if (vx === 0) vx = b.vx > 0 ? 1 : -1;
        b.vx = vx;
        b.vy = -VY;
      } else if (ny - R < 0 || breakAt(g, b.x, ny)) {
        b.vy = -b.vy;
      } else {
        b.y = ny;
      }
      // horizontal step
      const nx = b.x + b.vx;
      if (nx - R < 0 || nx + R > W || breakAt(g, nx, b.y)) b.vx = -b.vx;
      else b.x = nx;

      if (b.y - R > H) {
        s.lives -= 1;
        s.misses += 1;
        if (s.lives > 0) serve(g);
      }
      const left = TIME_LIMIT - (g.tick + 1);
      g.status = "Lives: " + s.lives + "   Time left: " + ((left * 25) / 1000).toFixed(1) + " s";
      if (s.lives <= 0 || left <= 0 || !s.bricks.some((v) => v)) g.over = true;
    },

    draw(g, c) {
      const s = g.s;
      c.fillStyle = "#101820";
      c.fillRect(0, 0, W, H);
      s.bricks.forEach((alive, i) => {
        if (!alive) return;
        const r = Math.floor(i / COLS);
        c.fillStyle = COLORS[r % COLORS.length];
        c.fillRect((i % COLS) * BW + 2, TOP + r * BH + 2, BW - 4, BH - 4);
      });
      c.fillStyle = "#eceff1";
      c.fillRect(s.px - PW / 2, PY, PW, PH);
      const b = s.ball;
      if (b && b.y - R <= H) {
        c.fillStyle = "#ffffff";
        c.beginPath();
        c.arc(b.x, b.y, R, 0, Math.PI * 2);
        c.fill();
      }
    },

    view(g) {
      const s = g.s;
      return {
        width: W, height: H, cols: COLS, rows: ROWS, brick_w: BW, brick_h: BH, top: TOP, r: R, vy: VY,
        paddle_w: PW, paddle_y: PY, step: STEP, bricks: s.bricks, paddle_x: s.px, ball: s.ball,
        lives: s.lives, misses: s.misses, time_limit: TIME_LIMIT,
      };
    },
  });
})();
