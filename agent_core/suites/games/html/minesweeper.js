/* Minesweeper: an 8×8 field hides 10 mines. Click a cell to open it: a number tells how many of its
   eight neighbours hide a mine, and a cell with none opens its neighbours too. Opening a mine ends the
   game. The mines are laid (by the seed) when the first click comes, never on that cell, so the first
   click is always safe (it may open just one number: a player with only one number to go on guesses,
   as in the classic game; a safe zone around the first click would open half the field for free).
   Score: safe cells opened (54 opens the whole field and wins). The game also ends after MOVE_LIMIT clicks that open something, or after
   TIME_LIMIT ticks (so a player who does nothing ends too). Turn-based: a click applies at once.
   Where the mines are never leaves this closure (the view is privileged). */
(function () {
  "use strict";
  const N = 8;
  const CELL = 50;
  const MINES = 10;
  const MOVE_LIMIT = 40;
  const TIME_LIMIT = 1200; // ticks of 100 ms: two minutes
  const NUM_COLORS = ["", "#1e88e5", "#43a047", "#e53935", "#3949ab", "#8d6e63", "#00897b", "#212121", "#757575"];

  function neighbours(i) {
    const x = i % N;
    const y = Math.floor(i / N);
    const out = [];
    for (let dy = -1; dy <= 1; dy++) {
      for (let dx = -1; dx <= 1; dx++) {
        const nx = x + dx;
        const ny = y + dy;
        if ((dx || dy) && nx >= 0 && ny >= 0 && nx < N && ny < N) out.push(ny * N + nx);
      }
    }
    return out;
  }

  function lay(g, first) {
    const s = g.s;
    const free = [];
    for (let i = 0; i < N * N; i++) if (i !== first) free.push(i);
    for (let k = 0; k < MINES; k++) {
      const j = k + Math.floor(g.rng() * (free.length - k));
      [free[k], free[j]] = [free[j], free[k]];
      s.mine[free[k]] = true;
    }
    for (let i = 0; i < N * N; i++) s.count[i] = neighbours(i).filter((j) => s.mine[j]).length;
    s.laid = true;
  }

  function open(g, i) {
    const s = g.s;
    const todo = [i];
    while (todo.length) {
      const j = todo.pop();
      if (s.open[j]) continue;
      s.open[j] = true;
      g.score += 1;
      if (s.count[j] === 0) for (const k of neighbours(j)) if (!s.open[k] && !s.mine[k]) todo.push(k);
    }
  }

  function status(g) {
    const s = g.s;
    const left = Math.max(0, TIME_LIMIT - g.tick) / 10;
    g.status = "Mines: " + MINES + "   Clicks left: " + (MOVE_LIMIT - s.moves) + "   Time left: " + left.toFixed(0) + " s";
  }

  FlywheelGame.define({
    name: "minesweeper",
    title: "Minesweeper",
    width: N * CELL,
    height: N * CELL,
    tickMs: 100,
    turnBased: true,

    init(g) {
      const none = () => new Array(N * N).fill(false);
      g.s = { mine: none(), open: none(), count: new Array(N * N).fill(0), laid: false, moves: 0, boom: -1 };
      status(g);
    },

    click(g, x, y) {
      const s = g.s;
      const i = Math.floor(y / CELL) * N + Math.floor(x / CELL);
      if (s.open[i]) return; // an open cell: nothing happens, no click spent
      if (!s.laid) lay(g, i);
      s.moves += 1;
      if (s.mine[i]) {
        s.boom = i;
        g.over = true;
      } else {
        open(g, i);
        if (g.score === N * N - MINES) g.over = true;
      }
      if (s.moves >= MOVE_LIMIT) g.over = true;
      status(g);
    },

    tick(g) {
      if (g.tick + 1 >= TIME_LIMIT) g.over = true;
      if ((g.tick + 1) % 10 === 0) status(g);
    },

    draw(g, c) {
      const s = g.s;
      c.textAlign = "center";
      c.textBaseline = "middle";
      c.font = "bold 28px sans-serif";
      for (let i = 0; i < N * N; i++) {
        const x = (i % N) * CELL;
        const y = Math.floor(i / N) * CELL;
        const shown = s.open[i] || (g.over && s.mine[i]);
        c.fillStyle = shown ? (i === s.boom ? "#ef9a9a" : "#eeeeee") : "#90a4ae";
        c.fillRect(x, y, CELL, CELL);
        c.strokeStyle = "#607d8b";
        c.lineWidth = 1;
        c.strokeRect(x + 0.5, y + 0.5, CELL - 1, CELL - 1);
        if (!shown) {
          c.fillStyle = "#b0bec5";
          c.fillRect(x + 4, y + 4, CELL - 8, 4);
          c.fillRect(x + 4, y + 4, 4, CELL - 8);
        } else if (s.mine[i]) {
          c.fillStyle = "#212121";
          c.beginPath();
          c.arc(x + CELL / 2, y + CELL / 2, 12, 0, Math.PI * 2);
          c.fill();
        } else if (s.count[i] > 0) {
          c.fillStyle = NUM_COLORS[s.count[i]];
          c.fillText(String(s.count[i]), x + CELL / 2, y + CELL / 2 + 1);
        }
      }
    },

    view(g) {
      const s = g.s;
      const mines = [];
      for (let i = 0; i < N * N; i++) if (s.mine[i]) mines.push([i % N, Math.floor(i / N)]);
      return {
        grid: N, cell: CELL, mine_count: MINES, laid: s.laid, mines: mines, open: s.open,
        counts: s.count.map((n, i) => (s.open[i] ? n : -1)), moves: s.moves, move_limit: MOVE_LIMIT,
        time_limit: TIME_LIMIT, boom: s.boom,
      };
    },
  });
})();
