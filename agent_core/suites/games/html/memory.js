/* Memory: sixteen cards face down, eight pairs of symbols. Click a card to turn it over, then a
   second one: a pair stays face up and scores a point; two that differ stay up until the next click,
   which turns them back down (and turns over the card clicked, if it is face down). 100 px cards,
   shuffled by the seed. The game ends when every pair is found or after TURN_LIMIT turns.
   Turn-based: a click applies at once. The faces of cards that are down never leave this closure. */
(function () {
  "use strict";
  const N = 4;
  const CELL = 100;
  const TURN_LIMIT = 18;
  const SYMBOLS = ["A", "B", "C", "D", "E", "F", "G", "H"];
  const COLORS = ["#e53935", "#1e88e5", "#43a047", "#fb8c00", "#8e24aa", "#00897b", "#6d4c41", "#d81b60"];

  FlywheelGame.define({
    name: "memory",
    title: "Memory",
    width: N * CELL,
    height: N * CELL,
    tickMs: 100,
    turnBased: true,

    init(g) {
      const deck = [];
      for (let i = 0; i < SYMBOLS.length; i++) deck.push(i, i);
      for (let i = deck.length - 1; i > 0; i--) {
        const j = Math.floor(g.rng() * (i + 1));
        [deck[i], deck[j]] = [deck[j], deck[i]];
      }
      g.s = { deck: deck, matched: deck.map(() => false), up: [], turns: 0, seen: deck.map(() => false) };
      g.status = "Turns left: " + TURN_LIMIT;
    },

    click(g, x, y) {
      const s = g.s;
      const i = Math.floor(y / CELL) * N + Math.floor(x / CELL);
      if (s.up.length === 2) s.up = []; // a mismatch shown until now turns back down
      if (s.matched[i] || s.up.includes(i)) return;
      s.up.push(i);
      s.seen[i] = true;
      if (s.up.length < 2) return;
      s.turns += 1;
      const [a, b] = s.up;
      if (s.deck[a] === s.deck[b]) {
        s.matched[a] = s.matched[b] = true;
        s.up = [];
        g.score += 1;
      }
      g.status = "Turns left: " + (TURN_LIMIT - s.turns);
      if (g.score === SYMBOLS.length || s.turns >= TURN_LIMIT) g.over = true;
    },

    tick(g) {},

    draw(g, c) {
      const s = g.s;
      c.fillStyle = "#37474f";
      c.fillRect(0, 0, g.width, g.height);
      c.textAlign = "center";
      c.textBaseline = "middle";
      c.font = "bold 44px sans-serif";
      s.deck.forEach((face, i) => {
        const x = (i % N) * CELL;
        const y = Math.floor(i / N) * CELL;
        const shown = s.matched[i] || s.up.includes(i);
        c.fillStyle = shown ? (s.matched[i] ? "#c8e6c9" : "#ffffff") : "#546e7a";
        c.fillRect(x + 6, y + 6, CELL - 12, CELL - 12);
        if (shown) {
          c.fillStyle = COLORS[face];
          c.fillText(SYMBOLS[face], x + CELL / 2, y + CELL / 2 + 2);
        } else {
          c.strokeStyle = "#78909c";
          c.lineWidth = 3;
          c.strokeRect(x + 16, y + 16, CELL - 32, CELL - 32);
        }
      });
    },

    view(g) {
      const s = g.s;
      return {
        grid: N, cell: CELL, faces: s.deck.map((f) => SYMBOLS[f]), matched: s.matched, up: s.up,
        seen: s.seen, turns: s.turns, turn_limit: TURN_LIMIT,
      };
    },
  });
})();
