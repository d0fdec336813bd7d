// Stacker: a small falling-block game. Pieces of four squares fall into a well 6 wide and 12 deep; move
// them (ArrowLeft / ArrowRight), turn them (ArrowUp), push them down a row (ArrowDown) or drop them at once
// (Space). A full row clears. Score: rows cleared. The game ends after PIECES pieces have landed, or when a
// new piece has no room. The next piece is shown beside the well; the order comes from a seeded bag of
// the seven shapes. Every piece turns inside its own box (3×3; 4×4 for the bar, the square does not turn)
// and a turn that hits something tries the same turn shifted 1 left, 1 right, 2 left, 2 right.
(function () {
  "use strict";
  const COLS = 6;
  const ROWS = 12;
  const CELL = 28;
  const PIECES = 10;
  const FALL = 5; // ticks per row of fall
  const KICKS = [0, -1, 1, -2, 2];
  const SHAPES = {
    I: { n: 4, cells: [[0, 1], [1, 1], [2, 1], [3, 1]], color: "#35c0e0" },
    O: { n: 2, cells: [[0, 0], [1, 0], [0, 1], [1, 1]], color: "#f0c419" },
    T: { n: 3, cells: [[1, 0], [0, 1], [1, 1], [2, 1]], color: "#9b59b6" },
    S: { n: 3, cells: [[1, 0], [2, 0], [0, 1], [1, 1]], color: "#4caf50" },
    Z: { n: 3, cells: [[0, 0], [1, 0], [1, 1], [2, 1]], color: "#e74c3c" },
    J: { n: 3, cells: [[0, 0], [0, 1], [1, 1], [2, 1]], color: "#3f6fd8" },
    L: { n: 3, cells: [[2, 0], [0, 1], [1, 1], [2, 1]], color: "#ef8a17" },
  };
  const ORDER = ["I", "O", "T", "S", "Z", "J", "L"];
  const W = COLS * CELL + 110;
  const H = ROWS * CELL + 8;

  function rotations(type) {
    const shape = SHAPES[type];
    const out = [shape.cells.map((c) => c.slice())];
    for (let r = 1; r < 4; r++) {
      const prev = out[r - 1];
      out.push(type === "O" ? prev.map((c) => c.slice()) : prev.map(([x, y]) => [shape.n - 1 - y, x]));
    }
    return out;
  }
  const ROT = {};
  for (const t of ORDER) ROT[t] = rotations(t);

  function cells(p, rot, x, y) {
    return ROT[p.type][rot].map(([cx, cy]) => [x + cx, y + cy]);
  }

  function fits(board, p, rot, x, y) {
    for (const [cx, cy] of cells(p, rot, x, y)) {
      if (cx < 0 || cx >= COLS || cy < 0 || cy >= ROWS || board[cy][cx]) return false;
    }
    return true;
  }

  function spawn(g) {
    const s = g.s;
    const type = s.queue[s.landed];
    const p = { type: type, rot: 0, x: Math.floor((COLS - SHAPES[type].n) / 2), y: 0 };
    s.fall = 0;
    if (!fits(s.board, p, 0, p.x, p.y)) {
      s.piece = null;
      s.toppedOut = true;
      g.over = true;
      return;
    }
    s.piece = p;
  }

  function lock(g) {
    const s = g.s;
    const p = s.piece;
    for (const [cx, cy] of cells(p, p.rot, p.x, p.y)) s.board[cy][cx] = p.type;
    const kept = s.board.filter((row) => row.some((v) => !v));
    const cleared = ROWS - kept.length;
    while (kept.length < ROWS) kept.unshift(new Array(COLS).fill(""));
    s.board = kept;
    g.score += cleared;
    s.landed += 1;
    s.piece = null;
    if (s.landed >= PIECES) g.over = true;
    else spawn(g);
  }

  function down(g) {
    const p = g.s.piece;
    if (fits(g.s.board, p, p.rot, p.x, p.y + 1)) p.y += 1;
    else lock(g);
  }

  FlywheelGame.define({
    name: "stacker",
    title: "Stacker",
    width: W,
    height: H,
    tickMs: 100,

    init(g) {
      const queue = [];
      while (queue.length < PIECES) {
        const bag = ORDER.slice();
        for (let i = bag.length - 1; i > 0; i--) {
          const j = Math.floor(g.rng() * (i + 1));
          [bag[i], bag[j]] = [bag[j], bag[i]];
        }
        queue.push(...bag);
      }
      const board = [];
      for (let r = 0; r < ROWS; r++) board.push(new Array(COLS).fill(""));
      g.s = { board: board, queue: queue.slice(0, PIECES), landed: 0, piece: null, fall: 0, toppedOut: false };
      g.score = 0;
      g.over = false;
      spawn(g);
    },

    key(g, key) {
      const s = g.s;
      const p = s.piece;
      if (g.over || !p) return;
      if (key === "ArrowLeft" || key === "ArrowRight") {
        const dx = key === "ArrowLeft" ? -1 : 1;
        if (fits(s.board, p, p.rot, p.x + dx, p.y)) p.x += dx;
      } else if (key === "ArrowUp") {
        const rot = (p.rot + 1) % 4;
        for (const k of KICKS) {
          if (fits(s.board, p, rot, p.x + k, p.y)) {
            p.rot = rot;
            p.x += k;
            break;
          }
        }
      } else if (key === "ArrowDown") {
        down(g);
      } else if (key === " ") {
        while (fits(s.board, p, p.rot, p.x, p.y + 1)) p.y += 1;
        lock(g);
      }
    },

    tick(g) {
      const s = g.s;
      if (!s.piece) return;
      s.fall += 1;
      if (s.fall >= FALL) {
        s.fall = 0;
        down(g);
      }
    },

    draw(g, c) {
      const s = g.s;
      c.fillStyle = "#1d1f27";
      c.fillRect(0, 0, W, H);
      c.fillStyle = "#2b2e3a";
      c.fillRect(4, 4, COLS * CELL, ROWS * CELL);
      const square = (x, y, color, px, py, size) => {
        c.fillStyle = color;
        c.fillRect(px + x * size + 1, py + y * size + 1, size - 2, size - 2);
      };
      for (let r = 0; r < ROWS; r++) {
        for (let col = 0; col < COLS; col++) {
          if (s.board[r][col]) square(col, r, SHAPES[s.board[r][col]].color, 4, 4, CELL);
        }
      }
      if (s.piece) {
        const p = s.piece;
        for (const [x, y] of cells(p, p.rot, p.x, p.y)) square(x, y, SHAPES[p.type].color, 4, 4, CELL);
      }
      const side = COLS * CELL + 16;
      c.fillStyle = "#e8e8e8";
      c.font = "15px sans-serif";
      c.fillText("Next", side, 24);
      const next = s.landed + 1 < PIECES ? s.queue[s.landed + 1] : null;
      if (next) {
        for (const [x, y] of ROT[next][0]) square(x, y, SHAPES[next].color, side, 34, 20);
      } else {
        c.fillText("(last)", side, 54);
      }
      c.fillText("Rows " + g.score, side, 130);
      c.fillText("Pieces", side, 160);
      c.fillText(Math.min(s.landed + (s.piece ? 1 : 0), PIECES) + " / " + PIECES, side, 180);
    },

    view(g) {
      const s = g.s;
      const p = s.piece;
      return {
        cols: COLS,
        rows: ROWS,
        board: s.board.map((row) => row.map((v) => v || ".").join("")),
        piece: p ? { type: p.type, rot: p.rot, x: p.x, y: p.y, cells: cells(p, p.rot, p.x, p.y) } : null,
        rotations: p ? ROT[p.type] : null,
        next: s.landed + 1 < PIECES ? s.queue[s.landed + 1] : null,
        next_rotations: s.landed + 1 < PIECES ? ROT[s.queue[s.landed + 1]] : null,
        next_x: s.landed + 1 < PIECES ? Math.floor((COLS - SHAPES[s.queue[s.landed + 1]].n) / 2) : null,
        landed: s.landed,
        pieces: PIECES,
        fall_ticks: FALL,
        fall: s.fall,
        kicks: KICKS,
        topped_out: s.toppedOut,
      };
    },
  });
})();
