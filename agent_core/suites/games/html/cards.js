// Cards: Elevens, a patience game. Nine cards lie face up (3×3); click two whose values add up to 11 (ace
// = 1) or a jack, a queen and a king to clear them: they are replaced from the deck. A choice that cannot
// make a set (two numbers not adding up to 11, a number with a picture card, two of a kind of picture
// card) costs a point and is put back. Clicking a chosen card again un-chooses it. Score: cards cleared
// minus wrong choices. The deck has two suits, 26 cards; the game ends when the table is empty, when no
// set is left on it, or after LIMIT_TICKS ticks (60 s).
// Deals are seeded shuffles; a shuffle that the plain rule below cannot clear is shuffled again, so every
// game can be cleared: take a jack-queen-king if the table has one, else the first pair (by place, top
// left to bottom right) that adds up to 11. The reference player (cards.py) plays that rule.
(function () {
  "use strict";
  const CW = 84;
  const CH = 112;
  const GAP = 16;
  const LEFT = 16;
  const TOP = 40;
  const W = LEFT * 2 + CW * 3 + GAP * 2;
  const H = TOP + CH * 3 + GAP * 2 + 12;
  const SUITS = ["♠", "♥"];
  const NAMES = ["", "A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K"];
  const LIMIT_TICKS = 600;

  function slotBox(i) {
    return [LEFT + (i % 3) * (CW + GAP), TOP + Math.floor(i / 3) * (CH + GAP)];
  }

  // the set the rule takes on `table` (slot indices), or null
  function ruleSet(table) {
    const at = (rank) => table.findIndex((c) => c && c.rank === rank);
    const faces = [at(11), at(12), at(13)];
    if (faces.every((i) => i >= 0)) return faces;
    for (let i = 0; i < 9; i++) {
      for (let j = i + 1; j < 9; j++) {
        const a = table[i];
        const b = table[j];
        if (a && b && a.rank <= 10 && b.rank <= 10 && a.rank + b.rank === 11) return [i, j];
      }
    }
    return null;
  }

  function refill(table, deck) {
    for (let i = 0; i < 9; i++) if (!table[i] && deck.length) table[i] = deck.shift();
  }

  function clearable(order) {
    const deck = order.slice();
    const table = new Array(9).fill(null);
    refill(table, deck);
    for (;;) {
      const set = ruleSet(table);
      if (!set) return table.every((c) => !c) && !deck.length;
      for (const i of set) table[i] = null;
      refill(table, deck);
    }
  }

  // "" while the choice can still grow into a set, "set" when it is one, "wrong" when it never can be
  function judge(chosen) {
    const numbers = chosen.filter((c) => c.rank <= 10);
    const faces = chosen.filter((c) => c.rank > 10);
    if (numbers.length && faces.length) return "wrong";
    if (numbers.length === 2) return numbers[0].rank + numbers[1].rank === 11 ? "set" : "wrong";
    if (new Set(faces.map((c) => c.rank)).size < faces.length) return "wrong";
    return faces.length === 3 ? "set" : "";
  }

  FlywheelGame.define({
    name: "cards",
    title: "Elevens",
    width: W,
    height: H,
    tickMs: 100,
    turnBased: true,

    init(g) {
      const fresh = [];
      for (const suit of SUITS) for (let rank = 1; rank <= 13; rank++) fresh.push({ rank: rank, suit: suit });
      let order = fresh;
      for (let tries = 0; tries < 500; tries++) {
        order = fresh.slice();
        for (let i = order.length - 1; i > 0; i--) {
          const j = Math.floor(g.rng() * (i + 1));
          [order[i], order[j]] = [order[j], order[i]];
        }
        if (clearable(order)) break;
      }
      const deck = order.slice();
      const table = new Array(9).fill(null);
      refill(table, deck);
      g.s = { table: table, deck: deck, chosen: [], cleared: 0, wrong: 0, t: 0, stuck: false };
      g.score = 0;
      g.over = false;
    },

    click(g, x, y) {
      const s = g.s;
      if (g.over) return;
      let slot = -1;
      for (let i = 0; i < 9; i++) {
        const [bx, by] = slotBox(i);
        if (x >= bx && x < bx + CW && y >= by && y < by + CH && s.table[i]) slot = i;
      }
      if (slot < 0) return;
      if (s.chosen.includes(slot)) {
        s.chosen = s.chosen.filter((i) => i !== slot);
        return;
      }
      s.chosen.push(slot);
      const verdict = judge(s.chosen.map((i) => s.table[i]));
      if (verdict === "wrong") {
        s.wrong += 1;
        g.score -= 1;
        s.chosen = [];
      } else if (verdict === "set") {
        for (const i of s.chosen) s.table[i] = null;
        s.cleared += s.chosen.length;
        g.score += s.chosen.length;
        s.chosen = [];
        refill(s.table, s.deck);
        if (s.table.every((c) => !c)) g.over = true;
        else if (!ruleSet(s.table)) {
          s.stuck = true;
          g.over = true;
        }
      }
    },

    tick(g) {
      g.s.t += 1;
      if (g.s.t >= LIMIT_TICKS) g.over = true;
    },

    draw(g, c) {
      const s = g.s;
      c.fillStyle = "#1f6b3a";
      c.fillRect(0, 0, W, H);
      c.fillStyle = "#f4f4f4";
      c.font = "15px sans-serif";
      c.fillText("Deck: " + s.deck.length + " left   Cleared: " + s.cleared + "   Wrong: " + s.wrong, LEFT, 26);
      for (let i = 0; i < 9; i++) {
        const [bx, by] = slotBox(i);
        const card = s.table[i];
        if (!card) {
          c.strokeStyle = "#2f8a4d";
          c.lineWidth = 2;
          c.strokeRect(bx, by, CW, CH);
          continue;
        }
        const chosen = s.chosen.includes(i);
        c.fillStyle = chosen ? "#fff3a8" : "#fdfdfd";
        c.fillRect(bx, by, CW, CH);
        c.strokeStyle = chosen ? "#e0a800" : "#888";
        c.lineWidth = chosen ? 4 : 1;
        c.strokeRect(bx, by, CW, CH);
        c.fillStyle = card.suit === "♥" ? "#c62828" : "#222";
        c.font = "bold 20px sans-serif";
        c.fillText(NAMES[card.rank] + card.suit, bx + 8, by + 26);
        c.font = "bold 36px sans-serif";
        c.fillText(NAMES[card.rank], bx + CW / 2 - (card.rank === 10 ? 20 : 11), by + CH / 2 + 20);
      }
    },

    view(g) {
      const s = g.s;
      return {
        table: s.table.map((card, i) => {
          if (!card) return null;
          const [bx, by] = slotBox(i);
          return { rank: card.rank, name: NAMES[card.rank] + card.suit, x: bx + CW / 2, y: by + CH / 2 };
        }),
        chosen: s.chosen.slice(),
        deck_left: s.deck.length,
        deck: s.deck.map((card) => NAMES[card.rank] + card.suit),
        cleared: s.cleared,
        wrong: s.wrong,
        stuck: s.stuck,
      };
    },
  });
})();
