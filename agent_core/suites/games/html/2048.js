/* 2048: slide the tiles with the arrow keys; two equal tiles that meet merge into their sum.
   A 4×4 board of 100 px cells. After each move that changes the board a new tile appears (a 2, or a
   4 one time in ten) in a random empty cell. Score: the sum of the tiles made by merging (the
   classic scoring). The game ends when no move is left or after MOVE_LIMIT moves. Turn-based: a move
   applies at once. */
(function () {
  "use strict";
  const N = 4;
  const CELL = 100;
  const MOVE_LIMIT = 60;
  const DIRS = { ArrowUp: [0, -1], ArrowDown: [0, 1], ArrowLeft: [-1, 0], ArrowRight: [1, 0] };
  const COLORS = {
    0: "#cdc1b4", 2: "#eee4da", 4: "#ede0c8", 8: "#f2b179", 16: "#f59563", 32: "#f67c5f",
    64: "#f65e3b", 128: "#edcf72", 256: "#edcc61", 512: "#edc850", 1024: "#edc53f", 2048: "#edc22e",
  };

  function spawn(g) {
    const empty = [];
    for (let y = 0; y < N; y++) for (let x = 0; x < N; x++) if (!g.s.board[y][x]) empty.push([x, y]);
    if (!empty.length) return;
    const [x, y] = empty[Math.floor(g.rng() * empty.length)];
    g.s.board[y][x] = g.rng() < 0.1 ? 4 : 2;
  }

  // Slide one line toward its start; returns [new line, points].
  function slide(line) {
    const tiles = line.filter((v) => v);
    const out = [];
    let points = 0;
    for (let i = 0; i < tiles.length; i++) {
      if (i + 1 < tiles.length && tiles[i] === tiles[i + 1]) {
        out.push(tiles[i] * 2);
        points += tiles[i] * 2;
        i++;
      } else {
        out.push(tiles[i]);
      }
    }
    while (out.length < N) out.push(0);
    return [out, points];
  }

  function move(board, d) {
    const next = board.map((r) => r.slice());
    let points = 0;
    for (let i = 0; i < N; i++) {
      const cells = [];
      for (let j = 0; j < N; j++) {
        // j = 0 is the cell the tiles slide toward.
        if (d[0] === -1) cells.push([j, i]);
        else if (d[0] === 1) cells.push([N - 1 - j, i]);
        else if (d[1] === -1) cells.push([i, j]);
        else cells.push([i, N - 1 - j]);
      }
      const [line, p] = slide(cells.map(([x, y]) => board[y][x]));
      cells.forEach(([x, y], k) => (next[y][x] = line[k]));
      points += p;
    }
    const changed = next.some((r, y) => r.some((v, x) => v !== board[y][x]));
    return { next, points, changed };
  }

  function movesLeft(board) {
    return Object.values(DIRS).some((d) => move(board, d).changed);
  }

  FlywheelGame.define({
    name: "2048",
    title: "2048",
    width: N * CELL,
    height: N * CELL,
    tickMs: 100,
    turnBased: true,

    init(g) {
      g.s = { board: [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]], moves: 0 };
      spawn(g);
      spawn(g);
      g.status = "Moves left: " + MOVE_LIMIT;
    },

    key(g, key) {
      const d = DIRS[key];
      if (!d) return;
      const { next, points, changed } = move(g.s.board, d);
      if (!changed) return;
      g.s.board = next;
      g.score += points;
      g.s.moves += 1;
      spawn(g);
      g.status = "Moves left: " + (MOVE_LIMIT - g.s.moves);
      if (g.s.moves >= MOVE_LIMIT || !movesLeft(g.s.board)) g.over = true;
    },

    tick(g) {},

    draw(g, c) {
      c.fillStyle = "#bbada0";
      c.fillRect(0, 0, g.width, g.height);
      c.textAlign = "center";
      c.textBaseline = "middle";
      for (let y = 0; y < N; y++) {
        for (let x = 0; x < N; x++) {
          const v = g.s.board[y][x];
          c.fillStyle = COLORS[v] || "#3c3a32";
          c.fillRect(x * CELL + 6, y * CELL + 6, CELL - 12, CELL - 12);
          if (v) {
            c.fillStyle = v <= 4 ? "#776e65" : "#f9f6f2";
            c.font = "bold " + (v < 100 ? 40 : v < 1000 ? 34 : 26) + "px sans-serif";
            c.fillText(String(v), x * CELL + CELL / 2, y * CELL + CELL / 2 + 2);
          }
        }
      }
    },

    view(g) {
      return { board: g.s.board, moves: g.s.moves, move_limit: MOVE_LIMIT };
    },
  });
})();
