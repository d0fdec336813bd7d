// Maze: walk from the top-left cell (the blue dot) to the exit at the bottom right (the green square) with
// the arrow keys, one cell a press; walls block. Score: 1 on reaching the exit, else 0. The game ends at the
// exit, after MOVES presses, or after LIMIT_TICKS ticks of game time (60 s).
// The maze is a perfect one (one way between any two cells), grown from the seed by the growing-tree
// algorithm (half newest cell, half random: corridors and branches); a seed whose way out is longer than MAX_PATH cells is grown again from the same generator.
(function () {
  "use strict";
  const N = 9;
  const CELL = 36;
  const PAD = 10;
  const MOVES = 60;
  const LIMIT_TICKS = 600;
  const MAX_PATH = 32;
  const NEWEST = 0.5;
  const DIRS = {
    ArrowUp: [0, -1, "n"],
    ArrowDown: [0, 1, "s"],
    ArrowLeft: [-1, 0, "w"],
    ArrowRight: [1, 0, "e"],
  };
  const OPP = { n: "s", s: "n", e: "w", w: "e" };
  const STEP = { n: [0, -1], s: [0, 1], e: [1, 0], w: [-1, 0] };

  function grow(rng) {
    // open[y][x] is the set of sides ("nsew") of cell (x, y) with no wall
    const open = [];
    for (let y = 0; y < N; y++) {
      open.push([]);
      for (let x = 0; x < N; x++) open[y].push("");
    }
    const seen = new Set(["0,0"]);
    const active = [[0, 0]];
    while (active.length) {
      // growing tree: half the time the newest cell (long corridors), else any (branches)
      const i = rng() < NEWEST ? active.length - 1 : Math.floor(rng() * active.length);
      const [x, y] = active[i];
      const sides = [];
      for (const side of "nsew") {
        const nx = x + STEP[side][0];
        const ny = y + STEP[side][1];
        if (nx >= 0 && ny >= 0 && nx < N && ny < N && !seen.has(nx + "," + ny)) sides.push(side);
      }
      if (!sides.length) {
        active.splice(i, 1);
        continue;
      }
      const side = sides[Math.floor(rng() * sides.length)];
      const nx = x + STEP[side][0];
      const ny = y + STEP[side][1];
      open[y][x] += side;
      open[ny][nx] += OPP[side];
      seen.add(nx + "," + ny);
      active.push([nx, ny]);
    }
    return open;
  }

  function pathLength(open) {
    const dist = { "0,0": 0 };
    const todo = [[0, 0]];
    while (todo.length) {
      const [x, y] = todo.shift();
      for (const side of open[y][x]) {
        const key = x + STEP[side][0] + "," + (y + STEP[side][1]);
        if (!(key in dist)) {
          dist[key] = dist[x + "," + y] + 1;
          todo.push([x + STEP[side][0], y + STEP[side][1]]);
        }
      }
    }
    return dist[N - 1 + "," + (N - 1)];
  }

  FlywheelGame.define({
    name: "maze",
    title: "Maze",
    width: N * CELL + 2 * PAD,
    height: N * CELL + 2 * PAD + 24,
    tickMs: 100,
    turnBased: true,

    init(g) {
      let open = grow(g.rng);
      for (let tries = 0; tries < 50 && pathLength(open) > MAX_PATH; tries++) open = grow(g.rng);
      g.s = { open: open, x: 0, y: 0, moves: 0, bumps: 0, trail: ["0,0"], t: 0 };
      g.score = 0;
      g.over = false;
    },

    key(g, key) {
      const s = g.s;
      const dir = DIRS[key];
      if (g.over || !dir) return;
      s.moves += 1;
      if (s.open[s.y][s.x].includes(dir[2])) {
        s.x += dir[0];
        s.y += dir[1];
        s.trail.push(s.x + "," + s.y);
      } else {
        s.bumps += 1;
      }
      if (s.x === N - 1 && s.y === N - 1) {
        g.score = 1;
        g.over = true;
      } else if (s.moves >= MOVES) {
        g.over = true;
      }
    },

    tick(g) {
      g.s.t += 1;
      if (g.s.t >= LIMIT_TICKS) g.over = true;
    },

    draw(g, c) {
      const s = g.s;
      c.fillStyle = "#fbf8ef";
      c.fillRect(0, 0, N * CELL + 2 * PAD, N * CELL + 2 * PAD + 24);
      c.fillStyle = "#8fd18f";
      c.fillRect(PAD + (N - 1) * CELL + 6, PAD + (N - 1) * CELL + 6, CELL - 12, CELL - 12);
      c.fillStyle = "#dfe8f7";
      for (const key of s.trail) {
        const [x, y] = key.split(",").map(Number);
        if (x === s.x && y === s.y) continue;
        c.fillRect(PAD + x * CELL + 14, PAD + y * CELL + 14, CELL - 28, CELL - 28);
      }
      c.strokeStyle = "#333";
      c.lineWidth = 3;
      c.beginPath();
      for (let y = 0; y < N; y++) {
        for (let x = 0; x < N; x++) {
          const px = PAD + x * CELL;
          const py = PAD + y * CELL;
          const o = s.open[y][x];
          if (!o.includes("n")) {
            c.moveTo(px, py);
            c.lineTo(px + CELL, py);
          }
          if (!o.includes("w")) {
            c.moveTo(px, py);
            c.lineTo(px, py + CELL);
          }
          if (y === N - 1 && !o.includes("s")) {
            c.moveTo(px, py + CELL);
            c.lineTo(px + CELL, py + CELL);
          }
          if (x === N - 1 && !o.includes("e")) {
            c.moveTo(px + CELL, py);
            c.lineTo(px + CELL, py + CELL);
          }
        }
      }
      c.stroke();
      c.fillStyle = "#2f6fd6";
      c.beginPath();
      c.arc(PAD + s.x * CELL + CELL / 2, PAD + s.y * CELL + CELL / 2, CELL / 3, 0, 2 * Math.PI);
      c.fill();
      c.fillStyle = "#333";
      c.font = "15px sans-serif";
      c.fillText("Moves left " + (MOVES - s.moves), PAD, N * CELL + 2 * PAD + 14);
    },

    view(g) {
      const s = g.s;
      return {
        size: N,
        cell: CELL,
        pad: PAD,
        open: s.open,
        player: [s.x, s.y],
        exit: [N - 1, N - 1],
        moves: s.moves,
        moves_left: MOVES - s.moves,
        bumps: s.bumps,
      };
    },
  });
})();
