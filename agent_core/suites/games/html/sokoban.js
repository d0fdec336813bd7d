/* Sokoban: push the boxes onto the goals with the arrow keys (a box can be pushed, never pulled, and
   only one at a time). A small level picked by the seed from a handful, turned or mirrored by it too;
   50 px cells. Score: boxes on goals. The game ends when every box is on a goal or after MOVE_LIMIT
   moves. Turn-based: a move applies at once. */
(function () {
  "use strict";
  const CELL = 50;
  const MOVE_LIMIT = 80;
  const DIRS = { ArrowUp: [0, -1], ArrowDown: [0, 1], ArrowLeft: [-1, 0], ArrowRight: [1, 0] };
  // # wall, . goal, $ box, @ player, space floor. Every level fits 8×8 and has two boxes.
  const LEVELS = [
    ["########", "#   #  #", "# $    #", "#  #.# #", "# .  $ #", "## #   #", "#@     #", "########"],
    ["########", "###   ##", "#. $# ##", "#    $ #", "# @ ## #", "##     #", "##  . ##", "########"],
    ["########", "#.   # #", "#  $   #", "## ## ##", "#   $  #", "# @  . #", "#      #", "########"],
    ["########", "##  . ##", "#  $   #", "# #  # #", "#  $   #", "#@ #  .#", "##    ##", "########"],
    ["########", "#   #  #", "#.$    #", "### #  #", "#    $ #", "# @#  .#", "#      #", "########"],
  ];

  function transform(rows, t) {
    // t in 0..7: t & 3 quarter turns, t & 4 a mirror.
    let grid = rows.map((r) => r.split(""));
    for (let k = 0; k < (t & 3); k++) {
      const n = grid.length;
      grid = grid[0].map((_, x) => grid.map((row, y) => grid[n - 1 - y][x]));
    }
    if (t & 4) grid = grid.map((r) => r.slice().reverse());
    return grid;
  }

  function key(x, y) {
    return x + "," + y;
  }

  FlywheelGame.define({
    name: "sokoban",
    title: "Sokoban",
    width: 8 * CELL,
    height: 8 * CELL,
    tickMs: 100,
    turnBased: true,

    init(g) {
      const level = Math.floor(g.rng() * LEVELS.length);
      const t = Math.floor(g.rng() * 8);
      const grid = transform(LEVELS[level], t);
      const s = { walls: [], goals: [], boxes: [], player: null, moves: 0, level: level };
      grid.forEach((row, y) =>
        row.forEach((ch, x) => {
          if (ch === "#") s.walls.push([x, y]);
          if (ch === ".") s.goals.push([x, y]);
          if (ch === "$") s.boxes.push([x, y]);
          if (ch === "@") s.player = [x, y];
        })
      );
      s.size = grid.length;
      g.s = s;
      g.status = "Moves left: " + MOVE_LIMIT;
    },

    key(g, k) {
      const d = DIRS[k];
      if (!d) return;
      const s = g.s;
      const walls = new Set(s.walls.map((p) => key(p[0], p[1])));
      const nx = s.player[0] + d[0];
      const ny = s.player[1] + d[1];
      if (walls.has(key(nx, ny))) return;
      const bi = s.boxes.findIndex((b) => b[0] === nx && b[1] === ny);
      if (bi >= 0) {
        const bx = nx + d[0];
        const by = ny + d[1];
        if (walls.has(key(bx, by)) || s.boxes.some((b) => b[0] === bx && b[1] === by)) return;
        s.boxes[bi] = [bx, by];
      }
      s.player = [nx, ny];
      s.moves += 1;
      const goals = new Set(s.goals.map((p) => key(p[0], p[1])));
      g.score = s.boxes.filter((b) => goals.has(key(b[0], b[1]))).length;
      g.status = "Moves left: " + (MOVE_LIMIT - s.moves);
      if (g.score === s.boxes.length || s.moves >= MOVE_LIMIT) g.over = true;
    },

    tick(g) {},

    draw(g, c) {
      const s = g.s;
      c.fillStyle = "#e8dcc0";
      c.fillRect(0, 0, g.width, g.height);
      c.fillStyle = "#5d4037";
      s.walls.forEach(([x, y]) => c.fillRect(x * CELL, y * CELL, CELL, CELL));
      c.strokeStyle = "#c62828";
      c.lineWidth = 4;
      s.goals.forEach(([x, y]) => {
        c.beginPath();
        c.arc(x * CELL + CELL / 2, y * CELL + CELL / 2, CELL / 4, 0, Math.PI * 2);
        c.stroke();
      });
      const goals = new Set(s.goals.map((p) => key(p[0], p[1])));
      s.boxes.forEach(([x, y]) => {
        c.fillStyle = goals.has(key(x, y)) ? "#43a047" : "#ff9800";
        c.fillRect(x * CELL + 6, y * CELL + 6, CELL - 12, CELL - 12);
        c.strokeStyle = "#4e342e";
        c.lineWidth = 2;
        c.strokeRect(x * CELL + 6, y * CELL + 6, CELL - 12, CELL - 12);
      });
      c.fillStyle = "#1565c0";
      c.beginPath();
      c.arc(s.player[0] * CELL + CELL / 2, s.player[1] * CELL + CELL / 2, CELL / 3, 0, Math.PI * 2);
      c.fill();
    },

    view(g) {
      const s = g.s;
      return {
        size: s.size, cell: CELL, walls: s.walls, goals: s.goals, boxes: s.boxes, player: s.player,
        moves: s.moves, move_limit: MOVE_LIMIT,
      };
    },
  });
})();
