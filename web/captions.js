// Shared by the mic page and the overlay: caption state, a self-healing viewer connection,
// and a line layout that never moves a committed word. Plain ES2020, no build step.
"use strict";

/** Caption text without explicit bidi embeddings, overrides and isolates (U+202A-U+202E,
 *  U+2066-U+2069). Text can come from the model, a recording or another server, and a U+202E
 *  in it would reverse every word after it on the line. Implicit direction is untouched:
 *  Arabic and Hebrew words still read right to left (isolating each word would not keep that). */
function withoutBidiControls(text) {
  return typeof text === "string" ? text.replace(/[\u202a-\u202e\u2066-\u2069]/g, "") : text;
}

/** The same event with its text cleaned (`withoutBidiControls`); `committed_chars` still
 *  counts the locked prefix of the cleaned text. */
function cleanEvent(ev) {
  if (typeof ev.text !== "string" || !/[\u202a-\u202e\u2066-\u2069]/.test(ev.text)) return ev;
  const locked = withoutBidiControls(ev.text.slice(0, Math.max(0, ev.committed_chars || 0)));
  return { ...ev, text: withoutBidiControls(ev.text), committed_chars: locked.length };
}

/** What a viewer has on screen: committed finals (append-only) and the current partials, one
 *  per speaker (in a room several people may talk at once; `ev.speaker`, "" when unnamed). */
class CaptionModel {
  constructor(maxFinals = 200) {
    this.maxFinals = maxFinals;
    this.reset();
  }

  reset() {
    this.lastSeq = 0;
    this.epoch = ""; // the server log's identity: a seq means something only within it
    this.finals = []; // {segment, text, speaker, times, start, end}
    this.partials = new Map(); // speaker -> latest partial event not yet superseded by a final
    this.generation = (this.generation || 0) + 1; // bumps when the stream restarts
  }

  /** Apply one wire event; returns "final", "partial", "reset+…" or "" (ignored). */
  apply(ev) {
    if (!ev || (ev.type !== "partial" && ev.type !== "final") || !Number.isInteger(ev.seq)) {
      return "";
    }
    ev = cleanEvent(ev);
    let tag = "";
    const epoch = typeof ev.epoch === "string" ? ev.epoch : "";
    if (epoch && this.epoch && epoch !== this.epoch) {
      // Another log (the server restarted without a recording, or the stream was recreated):
      // the server replays that log from its start, so start the screen over.
      this.reset();
      tag = "reset+";
    } else if (ev.seq <= this.lastSeq) {
      if (epoch && epoch === this.epoch) return ""; // already shown
      // A server without epochs: seq going back means the stream began anew.
      this.reset();
      tag = "reset+";
    }
    if (epoch) this.epoch = epoch;
    this.lastSeq = ev.seq;
    const who = typeof ev.speaker === "string" ? ev.speaker : "";
    if (ev.type === "final") {
      const text = (ev.text || "").trim();
      if (text) {
        this.finals.push({
          segment: ev.segment, text, speaker: who, times: wordTimes(text, ev.words), start: ev.start, end: ev.end,
          label: labelOf(ev), // the voice label under a rename (`applyNames`)
        });
      }
      if (this.finals.length > this.maxFinals) this.finals.splice(0, this.finals.length - this.maxFinals);
      // the final replaces its segment's partial, and its speaker's older ones
      for (const [k, p] of this.partials) {
        if (p.segment === ev.segment || (k === who && p.segment <= ev.segment)) this.partials.delete(k);
      }
      return tag + "final";
    }
    const old = this.partials.get(who);
    if (!old || ev.segment >= old.segment) {
      // A segment has one partial, whoever it is filed under: a partial the voice labeller
      // names once it knows the voice (or stops naming) replaces the segment's earlier one.
      for (const [k, p] of this.partials) if (k !== who && p.segment === ev.segment) this.partials.delete(k);
      this.partials.set(who, ev);
    }
    return tag + "partial";
  }

  /** A stream's names map (the server's `names` message, label -> name, after a rename):
   *  every caption held is shown with its label's name, or its label when the map has none.
   *  Captions keep their label (a renamed one arrives with `label`; another's is its speaker).
   *  Returns whether any name changed. */
  applyNames(names) {
    const map = names && typeof names === "object" ? names : {};
    const show = (label) => (label && Object.prototype.hasOwnProperty.call(map, label) &&
      typeof map[label] === "string" && map[label] ? withoutBidiControls(map[label]) : label);
    let changed = false;
    for (const f of this.finals) {
      const name = show(f.label);
      if (name !== f.speaker) { f.speaker = name; changed = true; }
    }
    const partials = new Map();
    for (const p of [...this.partials.values()].sort((a, b) => a.seq - b.seq)) {
      const label = labelOf(p);
      const name = show(label);
      if (name !== (p.speaker || "")) changed = true;
      partials.set(name, { ...p, speaker: name, label });
    }
    this.partials = partials;
    return changed;
  }

  /** The latest partial of anyone (null when none is open). */
  get partial() {
    let latest = null;
    for (const p of this.partials.values()) if (!latest || p.seq > latest.seq) latest = p;
    return latest;
  }

  /** Open partials, oldest first: one line per speaker talking now. */
  activePartials() {
    return [...this.partials.values()].sort((a, b) => a.seq - b.seq);
  }

  /** Whether any caption so far names its speaker (a room, or voice labels). */
  hasSpeakers() {
    return this.finals.some((f) => f.speaker) || [...this.partials.keys()].some(Boolean);
  }

  /** The current partial as [stable, rest]: its first `committed_chars` characters are
   *  locked words that will not change (they come back in a final); the rest may. */
  partialParts(p = this.partial) {
    if (!p || !p.text) return ["", ""];
    const n = Math.max(0, Math.min(p.text.length, p.committed_chars || 0));
    return [p.text.slice(0, n).trim(), p.text.slice(n).trim()];
  }

  /** The words partial `p` heard after its text and does not show yet (`tentative`: they may
   *  still change), cleaned like its text; "" when none. */
  tentativeText(p = this.partial) {
    return p && typeof p.tentative === "string" ? withoutBidiControls(p.tentative).trim() : "";
  }

  partialText() {
    const open = this.activePartials().filter((p) => (p.text || "").trim());
    if (open.length === 1 && !open[0].speaker) return open[0].text.trim();
    return open.map((p) => (p.speaker ? `${p.speaker}: ` : "") + p.text.trim()).join(" / ");
  }

  /** Final text; in a room each change of speaker starts with "Name:". */
  committedText() {
    let last = "";
    return this.finals.map((f) => {
      const name = f.speaker && f.speaker !== last ? `${f.speaker}: ` : "";
      last = f.speaker || last;
      return name + f.text;
    }).join(" ");
  }
}

/** A wire caption's voice label: `label` when the server renamed it, else its speaker. */
function labelOf(ev) {
  if (typeof ev.label === "string" && ev.label) return ev.label;
  return typeof ev.speaker === "string" ? ev.speaker : "";
}

/** A final's word times as [start, until] per word of `text` (split at spaces, as the wire
 *  protocol numbers them), `until` being the next word's start (the last word's end): a word
 *  stays highlighted through the pause after it. null when the final has no usable times (no
 *  `words`, or another word count: then nothing is highlighted rather than the wrong word). */
function wordTimes(text, words) {
  const n = text.split(/\s+/).filter(Boolean).length;
  if (!Array.isArray(words) || words.length !== n) return null;
  const ok = words.every((w) => w && Number.isFinite(w.start) && Number.isFinite(w.end));
  if (!ok) return null;
  return words.map((w, i) => [w.start, i + 1 < n ? Math.max(w.start, words[i + 1].start) : w.end]);
}

/** Where the read-along of each speaker is, in that speaker's audio seconds. A final arrives
 *  after its speech ended, so its words cannot light up while they are said; instead they are
 *  played back from the moment they appear, at the pace they were spoken. The playhead then
 *  stops at the last word heard; the next final continues from there (a pause is skipped), and
 *  when it lags more than `maxLag` s behind what has arrived (a backlog, a replay on connect)
 *  it jumps to the newest final. One clock per speaker: each publisher of a room has its own
 *  audio time. */
class WordClock {
  constructor(maxLag = 8) {
    this.maxLag = maxLag;
    this.voices = new Map(); // who -> {audio, wall, end}
  }

  /** A final of `who` with `times` ([start, until] per word) arrived at `now` (ms). */
  add(who, times, now) {
    if (!times || !times.length) return;
    const first = times[0][0];
    const last = times[times.length - 1][1];
    const at = this.at(who, now);
    const v = this.voices.get(who);
    const jump = !v || last - at > this.maxLag;
    this.voices.set(who, {
      audio: jump ? first : Math.max(first, at), wall: now, end: jump ? last : Math.max(last, v.end),
    });
  }

  /** The playhead of `who` at `now` (ms): -Infinity before any timed final. */
  at(who, now) {
    const v = this.voices.get(who);
    return v ? Math.min(v.end, v.audio + (now - v.wall) / 1000) : -Infinity;
  }

  /** Seconds of read-along still to play, the longest over all speakers (0 when idle). */
  remaining(now) {
    let most = 0;
    for (const [who, v] of this.voices) most = Math.max(most, v.end - this.at(who, now));
    return most;
  }
}

/** Keeps one /captions connection alive: reconnects with backoff and resumes from the last
 *  seq it saw, so nothing is missed. `onEvent(ev)`, `onStatus(state, detail, retryMs, opened)`
 *  (`retryMs`: when the next attempt starts, on a drop; `opened`: whether the connection that
 *  ended had opened at all: a server that never answered is not one that went away), and
 *  `onPresence(publishing)`: whether anyone publishes on the stream, from the server's status
 *  messages (asked for with `status=1`), on connect and whenever it changes (its second
 *  argument, the whole message, also says when the stream's captions fall behind: `behind`,
 *  `behind_s`, `partials`); `onNames(names,
 *  changed)`: the stream's speakers were renamed (a `names` message, asked for with
 *  `names=1`), already applied to `model` (`changed`: a caption it holds shows another name). */
class CaptionConnection {
  constructor({ server, stream, token, model, onEvent, onStatus, onPresence, onNames }) {
    this.server = server;
    this.stream = stream;
    this.token = token;
    this.model = model;
    this.onEvent = onEvent || (() => {});
    this.onStatus = onStatus || (() => {});
    this.onPresence = onPresence || (() => {});
    this.onNames = onNames || (() => {});
    this.delay = 500;
    this.closed = false;
    this.ws = null;
    this.timer = null;
    this.notYet = false; // the last refusal was "unknown stream": it may exist soon
  }

  url() {
    // Resume after the last event seen, in the log it came from (the server replays the
    // whole current log when the epoch is another one or the seq lies beyond its end).
    const q = new URLSearchParams({ stream: this.stream, since: String(this.model.lastSeq) });
    if (this.model.epoch) q.set("epoch", this.model.epoch);
    if (this.token) q.set("token", this.token);
    q.set("status", "1"); // say whether anyone publishes (a `status` message), not only captions
    q.set("names", "1"); // and the names map when speakers are renamed (a `names` message)
    return `${this.server}/captions?${q}`;
  }

  open() {
    if (this.closed) return;
    let ws;
    try {
      ws = new WebSocket(this.url());
    } catch (e) {
      this.onStatus("error", String(e), this.retry());
      return;
    }
    this.ws = ws;
    let opened = false;
    ws.onopen = () => {
      opened = true;
      this.onStatus("live", "");
    };
    ws.onmessage = (e) => {
      let ev;
      try {
        ev = JSON.parse(e.data);
      } catch (_) {
        return;
      }
      if (ev.type === "error") {
        this.notYet = ev.code === 1008 && /^unknown stream/.test(String(ev.reason || ""));
        this.onStatus("error", describeError(ev, "view"));
        return;
      }
      this.notYet = false;
      this.delay = 500; // data flows: the next drop reconnects quickly again
      if (ev.type === "status") {
        if (typeof ev.publishing === "boolean") this.onPresence(ev.publishing, ev);
        return;
      }
      if (ev.type === "names") {
        if (ev.names && typeof ev.names === "object") this.onNames(ev.names, this.model.applyNames(ev.names));
        return;
      }
      this.onEvent(ev);
    };
    ws.onclose = (e) => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (this.closed) return;
      const wait = this.retry();
      this.onStatus("reconnecting", e.code ? `${e.code} ${e.reason || ""}`.trim() : "", wait, opened);
    };
  }

  /** Reconnect after a backoff; returns the wait in ms. A stream that does not exist yet
   *  (`--unknown-stream reject`) is asked for again within 3 s: it appears when its publisher
   *  starts, and a viewer should not wait 15 s for it; anything else backs off to 15 s. */
  retry() {
    const cap = this.notYet ? 3000 : 15000;
    const wait = Math.min(this.delay, cap) * (0.75 + Math.random() * 0.5);
    this.delay = Math.min(this.delay * 2, cap);
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.open(), wait);
    return wait;
  }

  close() {
    this.closed = true;
    clearTimeout(this.timer);
    if (this.ws) this.ws.close(1000);
    this.ws = null;
  }
}

/** Greedy word wrap done incrementally: committed words are placed once and never move
 *  (a greedy line depends only on the words before it), partial words flow after them.
 *
 *  `measure(word, cls)` is a word's width in px as drawn in its class (a speaker's name is
 *  bolder than the words). With `names`, every line that starts with a named speaker's words
 *  (not with the name itself) keeps room at its start for "Name:": the overlay shows the name
 *  before the first line on screen of a speaker's caption, also when the line that had it
 *  has rolled away, and that line must still fit its box (a name put before a line laid out
 *  without it ran past the box and was cut). Reserving the room when the line is laid out
 *  keeps every committed word where it was placed. */
class LineLayout {
  constructor(measure, maxWidth, keepLines = 40, { names = true } = {}) {
    this.measure = measure; // (word, cls) -> px
    this.maxWidth = maxWidth;
    this.keepLines = keepLines;
    this.names = names;
    this.space = measure(" ", "committed");
    this.leads = new Map(); // speaker -> px of "Name: " before a line of theirs
    this.clear();
  }

  clear() {
    this.frozen = []; // finished lines: arrays of words
    this.base = 0; // absolute index of frozen[0]
    this.open = []; // committed words of the last, unfinished line
    this.openWidth = 0;
  }

  /** The room a line starting with `who`'s word of class `cls` keeps for the name. */
  _lead(who, cls) {
    if (!this.names || !who || cls === "speaker") return 0;
    if (!this.leads.has(who)) this.leads.set(who, this.measure(who + ":", "speaker") + this.space);
    return this.leads.get(who);
  }

  _place(lines, state, word, cls, color, who, live, time) {
    const w = this.measure(word, cls);
    if (state.line.length && state.width + this.space + w > this.maxWidth) {
      lines.push(state.line);
      state.line = [];
      state.width = 0;
    }
    const w2 = color ? { text: word, cls, color } : { text: word, cls };
    if (who) w2.who = who; // whose words (a name prefixes a speaker's first line on screen)
    if (live) w2.live = true; // a partial's word, laid out after the committed ones
    if (time) w2.time = time; // [start, until] in the speaker's audio seconds (read-along)
    state.width += state.line.length ? this.space + w : this._lead(who, cls) + w;
    state.line.push(w2);
  }

  /** Place final words (`cls` "speaker" for a name, with its `color`; `who` spoke them;
   *  `times`: [start, until] per word, or null). */
  commit(text, cls = "committed", color = "", who = "", times = null) {
    const state = { line: this.open, width: this.openWidth };
    const done = [];
    words(text, cls).forEach((word, i) => {
      this._place(done, state, word, cls, color, who, false, times && times[i]);
    });
    this.frozen.push(...done);
    this.open = state.line;
    this.openWidth = state.width;
    const extra = this.frozen.length - this.keepLines;
    if (extra > 0) {
      this.frozen.splice(0, extra);
      this.base += extra;
    }
  }

  /** End the open line (the next word starts a new one); returns the next line's index. */
  breakLine() {
    if (this.open.length) {
      this.frozen.push(this.open);
      this.open = [];
      this.openWidth = 0;
    }
    return this.base + this.frozen.length;
  }

  /** All kept lines with the partials appended (`parts`: [[text, cls, color, who, times],
   *  ...]; cls "break" ends the line; `times`, optional: [start, until] per word; their words
   *  are marked `live`), and the absolute index of the first. */
  lines(parts) {
    const out = this.frozen.slice();
    const state = { line: this.open.slice(), width: this.openWidth };
    for (const [text, cls, color, who, times] of parts || []) {
      if (cls === "break") {
        if (state.line.length) out.push(state.line);
        state.line = [];
        state.width = 0;
        continue;
      }
      words(text, cls).forEach((word, i) => {
        this._place(out, state, word, cls, color, who, true, times && times[i]);
      });
    }
    if (state.line.length) out.push(state.line);
    return { lines: out, base: this.base };
  }
}

/** The words of a layout part: a name ("Speaker 2:") is one, never broken across lines. */
function words(text, cls) {
  if (cls === "speaker") return text ? [text] : [];
  return (text || "").split(/\s+/).filter(Boolean);
}

/** A server error frame as a person should read it: token refusals say which token, and a
 *  stream nobody publishes yet (`--unknown-stream reject`) says so in words. */
function describeError(ev, side) {
  const reason = String(ev.reason || "");
  if (ev.code === 1008 && /token/.test(reason)) {
    const which = /publish/.test(reason) ? "publish" : /view/.test(reason) ? "view" : side;
    return `${which} token missing or wrong (${reason})`;
  }
  const unknown = ev.code === 1008 && /^unknown stream '(.*)'$/.exec(reason);
  if (unknown) return waitingFor(unknown[1]);
  return `${reason || "error"} (${ev.code})`;
}

/** What a viewer of a stream nobody has published on says. */
function waitingFor(stream) {
  return `waiting for stream '${stream}': no one is publishing on it yet ` +
    `(on the mic page: Stream id ${stream}, then Start)`;
}

/** Page helpers. */
function captionParams() {
  return new URLSearchParams(window.location.search);
}

function defaultServer() {
  const proto = window.location.protocol === "https:" ? "wss:" : "ws:";
  return `${proto}//${window.location.host}`;
}

/** A colour per speaker, in the order they first appear (stable for the page's life). Each
 *  keeps WCAG AA (4.5:1) on the overlay's default box over a white scene as over a black one. */
class SpeakerColors {
  constructor(palette) {
    this.palette = palette || ["#ffd54f", "#4fc3f7", "#aed581", "#f8bbd0", "#ffb74d", "#e1bee7", "#80cbc4", "#e0e0e0"];
    this.seen = new Map();
  }

  of(name) {
    if (!name) return "";
    if (!this.seen.has(name)) this.seen.set(name, this.palette[this.seen.size % this.palette.length]);
    return this.seen.get(name);
  }
}

window.Streamcap = Object.assign(window.Streamcap || {}, {
  CaptionModel, CaptionConnection, LineLayout, SpeakerColors, WordClock, captionParams,
  defaultServer, describeError, waitingFor, withoutBidiControls, wordTimes,
});
