// Typing: words fall from the top; type a word (its letters, in order) to clear it before it reaches the
// floor. What has been typed so far shows at the bottom; a letter that no falling word continues starts
// the typing over from that letter (Backspace takes back a letter, Escape clears). Score: words cleared.
// WORDS words fall, at seeded times, places and from a fixed list; the game ends when the last one is
// cleared or has reached the floor, or after LIMIT_TICKS ticks (60 s).
(function () {
  "use strict";
  const W = 400;
  const H = 400;
  const FLOOR = 360;
  const WORDS = 12;
  const SPEED = 4; // pixels a tick
  const FIRST = 4;
  const EVERY = 9;
  const CHAR_W = 11;
  const LIMIT_TICKS = 600;
  // no word is the beginning of another, so a word is cleared the moment its last letter is typed
  const LIST = (
    "apple brick cloud dance eagle flame grape house juice knife lemon mango night ocean piano queen " +
    "river snake tiger umbrella violin whale yellow zebra anchor bottle candle dragon forest garden " +
    "hammer island jacket kitten ladder mirror needle orange pencil rabbit silver tomato window basket"
  ).split(" ");

  function falling(s) {
    return s.words.filter((w) => w.state === "falling");
  }

  function typeLetter(g, letter) {
    const s = g.s;
    const live = falling(s);
    let next = s.typed + letter;
    if (!live.some((w) => w.text.startsWith(next))) {
      if (s.typed) s.slips += 1;
      next = live.some((w) => w.text.startsWith(letter)) ? letter : "";
    }
    s.typed = next;
    // the lowest word that the typing completes is cleared
    const done = live.filter((w) => w.text === next).sort((a, b) => b.y - a.y)[0];
    if (done) {
      done.state = "cleared";
      g.score += 1;
      s.typed = "";
    }
  }

  FlywheelGame.define({
    name: "typing",
    title: "Typing",
    width: W,
    height: H,
    tickMs: 100,

    init(g) {
      const words = [];
      for (let i = 0; i < WORDS; i++) {
        const text = LIST[Math.floor(g.rng() * LIST.length)];
        const x = 8 + Math.floor(g.rng() * (W - 16 - CHAR_W * text.length));
        const at = FIRST + i * EVERY + Math.floor(g.rng() * 4);
        words.push({ text: text, x: x, y: 0, at: at, state: "waiting" });
      }
      g.s = { words: words, typed: "", slips: 0, missed: 0, t: 0 };
      g.score = 0;
      g.over = false;
    },

    key(g, key) {
      const s = g.s;
      if (g.over) return;
      if (key === "Backspace") s.typed = s.typed.slice(0, -1);
      else if (key === "Escape") s.typed = "";
      else if (key.length === 1 && /[a-z]/i.test(key)) typeLetter(g, key.toLowerCase());
    },

    tick(g) {
      const s = g.s;
      s.t += 1;
      for (const w of s.words) {
        if (w.state === "waiting" && w.at <= s.t) {
          w.state = "falling";
          w.y = 24;
        } else if (w.state === "falling") {
          w.y += SPEED;
          if (w.y >= FLOOR) {
            w.state = "missed";
            s.missed += 1;
          }
        }
      }
      if (!falling(s).some((w) => w.text.startsWith(s.typed))) s.typed = "";
      const left = s.words.some((w) => w.state === "waiting" || w.state === "falling");
      if (!left || s.t >= LIMIT_TICKS) g.over = true;
    },

    draw(g, c) {
      const s = g.s;
      c.fillStyle = "#10151f";
      c.fillRect(0, 0, W, H);
      c.fillStyle = "#c0392b";
      c.fillRect(0, FLOOR, W, 3);
      c.font = "bold 18px monospace";
      for (const w of falling(s)) {
        const typed = s.typed && w.text.startsWith(s.typed) ? s.typed.length : 0;
        c.fillStyle = "#5dd39e";
        c.fillText(w.text.slice(0, typed), w.x, w.y);
        c.fillStyle = "#f2f2f2";
        c.fillText(w.text.slice(typed), w.x + typed * CHAR_W, w.y);
      }
      c.fillStyle = "#f2f2f2";
      c.fillText("> " + s.typed + "_", 8, FLOOR + 26);
      c.font = "14px sans-serif";
      c.fillStyle = "#9aa5b1";
      c.fillText("Cleared " + g.score + "   Missed " + s.missed, W - 170, FLOOR + 26);
    },

    view(g) {
      const s = g.s;
      const coming = s.words.filter((w) => w.state === "waiting");
      return {
        falling: falling(s).map((w) => ({
          text: w.text,
          x: w.x,
          y: w.y,
          ticks_to_floor: Math.ceil((FLOOR - w.y) / SPEED),
        })),
        typed: s.typed,
        next_in: coming.length ? Math.min(...coming.map((w) => w.at)) - s.t : null,
        still_to_come: coming.length,
        cleared: g.score,
        missed: s.missed,
        slips: s.slips,
        floor: FLOOR,
      };
    },
  });
})();
