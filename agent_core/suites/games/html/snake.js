/* Snake: steer the snake to the apples with the arrow keys; it grows with each one eaten.
   A 10×10 grid of 40 px cells. The game ends when the snake hits a wall or itself, or after
   TIME_LIMIT ticks (so a player who does nothing ends too). Score: apples eaten. */
(function () {
  "use strict";
  const N = 10;
  const CELL = 40;
  const TIME_LIMIT = 300; // ticks
  const DIRS = { ArrowUp: [0, -1], ArrowDown: [0, 1], ArrowLeft: [-1, 0], ArrowRight: [1, 0] };

  function placeApple(g) {
    const s = g.s;
    const free = [];
    for (let y = 0; y < N; y++) {
      for (let x = 0; x < N; x++) {
        // Never in the start row ahead of the snake: doing nothing must not eat one by chance.
        if (y === 4 && g.tick === 0) continue;
        if (!s.body.some((p) => p[0] === x && p[1] === y)) free.push([x, y]);
      }
    }
    s.apple = free.length ? free[Math.floor(g.rng() * free.length)] : null;
  }

  FlywheelGame.define({
    name: "snake",
    title: "Snake",
    width: N * CELL,
    height: N * CELL,
    tickMs: 100,

    init(g) {
      g.s = { body: [[3, 4], [2, 4], [1, 4]], dir: [1, 0], next: [1, 0], apple: null };
      placeApple(g);
      g.status = "Time left: " + TIME_LIMIT / 10 + " s";
    },

    key(g, key) {
      const d = DIRS[key];
      if (!d) return;
      const cur = g.s.dir;
      if (d[0] === -cur[0] && d[1] === -cur[1]) return; // no reversing into the neck
      g.s.next = d;
    },

    tick(g) {
      const s = g.s;
      s.dir = s.next;
      const head = [s.body[0][0] + s.dir[0], s.body[0][1] + s.dir[1]];
      const eats = s.apple && head[0] === s.apple[0] && head[1] === s.apple[1];
      const body = eats ? s.body : s.body.slice(0, -1);
      const hit =
        head[0] < 0 || head[1] < 0 || head[0] >= N || head[1] >= N ||
        body.some((p) => p[0] === head[0] && p[1] === head[1]);
      if (hit) {
        g.over = true;
        s.crashed = true;
        return;
      }
      s.body = [head, ...body];
      if (eats) {
        g.score += 1;
        placeApple(g);
      }
      const left = TIME_LIMIT - (g.tick + 1);
      g.status = "Time left: " + (left / 10).toFixed(1) + " s";
      if (left <= 0 || !s.apple) g.over = true;
    },

    draw(g, c) {
      const s = g.s;
      c.fillStyle = "#1d3b1d";
      c.fillRect(0, 0, g.width, g.height);
      c.strokeStyle = "#2a512a";
      for (let i = 1; i < N; i++) {
        c.beginPath();
        c.moveTo(i * CELL, 0);
        c.lineTo(i * CELL, g.height);
        c.moveTo(0, i * CELL);
        c.lineTo(g.width, i * CELL);
        c.stroke();
      }
      if (s.apple) {
        c.fillStyle = "#e53935";
        c.beginPath();
        c.arc(s.apple[0] * CELL + CELL / 2, s.apple[1] * CELL + CELL / 2, CELL / 2 - 6, 0, Math.PI * 2);
        c.fill();
      }
      s.body.forEach((p, i) => {
        c.fillStyle = i === 0 ? "#ffeb3b" : "#8bc34a";
        c.fillRect(p[0] * CELL + 3, p[1] * CELL + 3, CELL - 6, CELL - 6);
      });
    },

    view(g) {
      const s = g.s;
      return { grid: N, cell: CELL, snake: s.body, dir: s.dir, apple: s.apple, time_limit: TIME_LIMIT };
    },
  });
})();
