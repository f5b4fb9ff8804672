// The overlay's word highlight (`highlight=words`) that follows the voice: where each speaker's
// voice is now in stream time, when the words on screen were said, and which one is lit.
// Pure logic (no DOM), tested in real Chromium (tests/web/test_overlay_highlight.py).
"use strict";
(() => {
  /** Where each speaker's voice is, in stream seconds, as a viewer can know it. An event about
   *  the audio up to `end` (stream seconds) is sent `latency_ms` after that audio reached the
   *  server, so that speaker's stream time 0 was at wall time `now - latency_ms - end * 1000`.
   *  The earliest such zero seen is kept: no event arrives before the audio it covers, so the
   *  voice is then never placed behind a word already on screen (a late event, network jitter
   *  or a slow decode only make the zero later, never earlier). Each speaker has their own
   *  zero: the publishers of a room each have their own audio clock. */
  class VoiceClock {
    constructor() {
      this.zeros = new Map(); // who -> wall ms of that speaker's stream time 0
      this.last = null; // the latest zero learnt, for a speaker not seen yet (a renamed label)
    }

    /** A wire event of `who` arrived at wall time `now` (ms, `performance.now()`). */
    observe(who, ev, now) {
      const end = Number(ev && ev.end);
      if (!Number.isFinite(end) || !Number.isFinite(now)) return;
      const late = Math.max(0, Number(ev.latency_ms) || 0);
      const zero = now - late - end * 1000;
      const had = this.zeros.get(who);
      if (had === undefined || zero < had) this.zeros.set(who, zero);
      this.last = this.zeros.get(who);
    }

    /** `who`'s voice at wall time `now` (ms), in stream seconds; -Infinity before any event. */
    at(who, now) {
      const zero = this.zeros.has(who) ? this.zeros.get(who) : this.last;
      return zero === null || zero === undefined ? -Infinity : (now - zero) / 1000;
    }

    /** Stream seconds `t` of `who` as wall ms (Infinity when unknown). */
    wall(who, t) {
      const zero = this.zeros.has(who) ? this.zeros.get(who) : this.last;
      return zero === null || zero === undefined ? Infinity : zero + t * 1000;
    }

    clear() {
      this.zeros.clear();
      this.last = null;
    }
  }

  /** Words of a partial that are not shown yet, as a share of the text: a partial holds back
   *  the last words it heard (they may still change; the server's `holdback_words`, 2), so its
   *  shown words end about two words before its `end`. */
  const HELD_BACK_WORDS = 2;
  /** ... and with its `tentative` words shown too, the one word they leave out (the server's
   *  `tentative_holdback_words`, 1: the last word of a cut window may be unfinished). */
  const HELD_BACK_TENTATIVE = 1;

  /** Estimated [start, until] (stream seconds) per word of `text`, said from `start` to `end`
   *  (an event's span): each word gets a share of the time in proportion to its letters (and a
   *  space), the last `heldBack` words' worth at the end left unshown. Only an estimate: a
   *  partial carries no word times (docs/protocol.md); its words are all said by the time it
   *  arrives, so the estimate only orders them, and a final brings the real times. */
  function estimateTimes(text, start, end, heldBack = HELD_BACK_WORDS) {
    const ws = String(text || "").split(/\s+/).filter(Boolean);
    const a = Number(start), b = Number(end);
    if (!ws.length || !Number.isFinite(a) || !Number.isFinite(b)) return null;
    const sizes = ws.map((w) => w.length + 1);
    const total = sizes.reduce((x, y) => x + y, 0);
    const mean = total / ws.length;
    const span = Math.max(0, b - a);
    const per = span / (total + heldBack * mean);
    const out = [];
    let t = a;
    for (const s of sizes) {
      out.push([t, t + s * per]);
      t += s * per;
    }
    return out;
  }

  /** The word to light among `words` (in the order shown, oldest first, each `{start, who}`):
   *  per speaker, the last word whose time has come at that speaker's voice `at(who)` (stream
   *  seconds; `slack` seconds early still counts). Returns a Map who -> index into `words`. */
  function litWords(words, at, slack = 0.05) {
    const lit = new Map();
    words.forEach((w, i) => {
      const who = w.who || "";
      if (Number(w.start) <= at(who) + slack) lit.set(who, i);
    });
    return lit;
  }

  window.Streamcap = Object.assign(window.Streamcap || {}, {
    VoiceClock, estimateTimes, litWords, HELD_BACK_WORDS, HELD_BACK_TENTATIVE,
  });
})();
