// The transcript page (transcript.html): a stream's captions as turns people read, live.
//
// One block per turn: the name (a rename relabels every turn: the server's `names` message,
// applied to the captions held by captions.js), the time its first words were said, and what
// was said; consecutive finals of one speaker are one turn, as in the minutes
// (streamcap/formats/minutes.py: unnamed speech breaks at a pause of PARAGRAPH_PAUSE_S). The
// words being spoken (partials) are shown in place, distinct from final text, and replaced in
// place: at the end of the speaker's turn when they continue it, else in a block of their own;
// in a stream whose captions name their speakers, words nobody is named for yet stay in a block
// of their own (never under the previous speaker's name) until a name comes. The page follows
// the live end unless the reader scrolled up; a "Jump to live" button brings it back.
// The connection, resume (seq + epoch) and the screen's state are captions.js's, as for the
// overlay; a new epoch starts the transcript over.
"use strict";
(() => {
  const S = window.Streamcap;
  const P = S.captionParams();
  const $ = (id) => document.getElementById(id);
  const main = $("transcript");
  const jump = $("jump");
  const statusEl = $("status");
  const stream = (P.get("stream") || "").trim();
  const token = P.get("token") || "";
  // the server's stream ids (streamcap/server/request.py, STREAM_ID_RE)
  const STREAM_RE = /^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$/;
  const PARAGRAPH_PAUSE_S = 4; // formats/minutes.py
  const NEAR_END_PX = 48; // this close to the bottom counts as reading the live end
  // a turn's edge colour per speaker (borders only: the text stays the page's own colour)
  const PALETTE = ["#e0a000", "#1e88e5", "#7cb342", "#d81b60", "#f4511e", "#8e24aa", "#00897b", "#757575"];

  const model = new S.CaptionModel(Infinity); // a transcript keeps every final it was sent
  const colors = new Map();
  let turns = []; // {who, start, end, el, p, n}
  let drawn = 0; // finals of `model.finals` drawn into `turns`
  let live = []; // the partials' elements on the page (replaced at each change)
  let generation = model.generation;
  let follow = true;

  const colorOf = (who) => {
    if (!colors.has(who)) colors.set(who, PALETTE[colors.size % PALETTE.length]);
    return colors.get(who);
  };

  /** HH:MM:SS of a stream time (whole seconds, as the minutes write it). */
  function clock(t) {
    const s = Math.max(0, Math.floor(Math.round((Number(t) || 0) * 1000) / 1000));
    const two = (n) => String(n).padStart(2, "0");
    return `${two(Math.floor(s / 3600))}:${two(Math.floor(s / 60) % 60)}:${two(s % 60)}`;
  }

  /** A turn's block: who, when, and a paragraph for what was said. */
  function block(who, start, live) {
    const el = document.createElement("section");
    el.className = `turn${who ? "" : " unnamed"}${live ? " live" : ""}`;
    el.dataset.who = who; // the name shown
    if (who) el.style.setProperty("--who", colorOf(who));
    const head = document.createElement("div");
    head.className = "head";
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = who || (live && model.hasSpeakers() ? "…" : "");
    if (!who && live) name.title = "not named yet";
    const time = document.createElement("time");
    time.textContent = clock(start);
    head.append(name, time);
    const p = document.createElement("p");
    p.className = "text";
    el.append(head, p);
    return { el, p };
  }

  /** Whether words of `who` starting at `start` continue `turn`. */
  function continues(turn, who, start) {
    return !!turn && turn.who === who && (!!who || Number(start) - turn.end < PARAGRAPH_PAUSE_S);
  }

  function addFinal(f) {
    const who = f.speaker || ""; // the name shown (a renamed label's name)
    const start = Number(f.start) || 0;
    let turn = turns[turns.length - 1];
    if (!continues(turn, who, start)) {
      turn = { who, start, end: start, n: 0, ...block(who, start, false) };
      turns.push(turn);
      main.append(turn.el);
    }
    const span = document.createElement("span");
    span.className = "final";
    span.textContent = (turn.n ? " " : "") + f.text;
    turn.p.append(span);
    turn.n += 1;
    turn.end = Math.max(turn.end, Number(f.end) || start);
  }

  /** The open partials, replaced in place: at the end of the last turn when they continue
   *  it, else each in a block of its own (marked `live`: left out of print). */
  function drawPartials() {
    for (const el of live) el.remove();
    live = [];
    const open = model.activePartials().filter((p) => (p.text || "").trim());
    const labelled = model.hasSpeakers();
    const last = turns[turns.length - 1];
    let inline = false;
    for (const p of open) {
      const who = p.speaker || "";
      const span = document.createElement("span");
      span.className = "partial live";
      span.dataset.segment = String(p.segment);
      span.dataset.who = who; // whose words (the name shown; "" while nobody is named)
      const text = p.text.trim();
      if (!inline && !(labelled && !who) && continues(last, who, p.start)) {
        inline = true;
        span.textContent = " " + text;
        last.p.append(span);
        live.push(span);
      } else {
        span.textContent = text;
        const b = block(who, p.start, true);
        b.p.append(span);
        main.append(b.el);
        live.push(b.el);
      }
    }
  }

  function redraw() {
    turns = [];
    drawn = 0;
    live = [];
    main.replaceChildren();
    drawNew();
  }

  function drawNew() {
    for (; drawn < model.finals.length; drawn++) addFinal(model.finals[drawn]);
    drawPartials();
    main.dataset.lastSeq = String(model.lastSeq);
    follows();
  }

  function onEvent(ev) {
    const kind = model.apply(ev);
    if (!kind) return;
    if (refusal) { refusal = ""; showStatus(); }
    if (model.generation !== generation) { // another log: the server replays it from its start
      generation = model.generation;
      redraw();
    } else {
      drawNew();
    }
  }

  /** A rename (the server's `names` message: the whole map, on connect and at each rename),
   *  already applied by captions.js to every caption held: the turns are drawn again, under
   *  the new names (two labels given one name make one turn where they follow each other). */
  function onNames(names, changed) {
    document.body.dataset.names = JSON.stringify(names);
    if (changed) redraw();
  }

  // ------------------------------------------------------------------ following the live end

  function nearEnd() {
    const doc = document.documentElement;
    return window.innerHeight + window.scrollY >= doc.scrollHeight - NEAR_END_PX;
  }
  function setFollow(value) {
    follow = value;
    jump.hidden = follow;
    document.body.dataset.follow = String(follow);
  }
  /** After a change: keep the live end in view, unless the reader is reading further up. */
  function follows() {
    if (follow) window.scrollTo({ top: document.documentElement.scrollHeight, behavior: "instant" });
    setFollow(follow);
  }
  window.addEventListener("scroll", () => setFollow(nearEnd()), { passive: true });
  // a reader going up stops following at once (before the scroll event, which comes a frame
  // later: a caption arriving in between must not pull the page back down)
  window.addEventListener("wheel", (e) => { if (e.deltaY < 0 && window.scrollY > 0) setFollow(false); },
    { passive: true });
  window.addEventListener("keydown", (e) => {
    if (["ArrowUp", "PageUp", "Home"].includes(e.key) && window.scrollY > 0) setFollow(false);
  });
  jump.addEventListener("click", () => { setFollow(true); follows(); });

  // ------------------------------------------------------------------ status and links

  let fatal = "";
  if (!stream) fatal = "add ?stream=ID to the address (the mic page links its stream's transcript)";
  else if (!STREAM_RE.test(stream)) fatal = `'${stream.slice(0, 80)}' is not a stream id (1-64 of A-Z a-z 0-9 _ . -)`;
  let state = "connecting";
  let retryMs = 0;
  let answered = true;
  let refusal = "";
  let publishing = null;

  function onStatus(next, detail, retry, opened) {
    state = next;
    retryMs = retry || 0;
    if (next === "error") refusal = detail || "refused";
    if (next === "reconnecting") {
      answered = opened !== false;
      publishing = null;
    }
    if (next === "live") answered = true;
    showStatus();
  }

  function onPresence(value) {
    publishing = value;
    if (value) refusal = "";
    showStatus();
  }

  function showStatus() {
    const again = retryMs ? `; retrying in ${Math.max(1, Math.round(retryMs / 1000))} s` : "";
    let text = "";
    let error = false;
    if (fatal) [text, error] = [`transcript: ${fatal}`, true];
    else if (refusal) [text, error] = [`captions: ${refusal}`, refusal !== S.waitingFor(stream)];
    else if (state === "reconnecting" && !answered) [text, error] = [`the caption server is not answering${again}`, true];
    else if (state === "reconnecting") [text, error] = [`connection lost: reconnecting${again}`, true];
    else if (state === "connecting") text = "connecting…";
    else if (publishing === false) {
      text = model.finals.length ? `no one is publishing on '${stream}' now: the transcript so far`
        : S.waitingFor(stream);
    } else text = `live: '${stream}'`;
    statusEl.textContent = text;
    statusEl.className = error ? "error" : "";
    document.body.dataset.state = fatal || (refusal && error) ? "error" : state;
    document.body.dataset.publishing = publishing === null ? "" : String(publishing);
  }

  const today = () => new Date().toISOString().slice(0, 10);
  $("printed").textContent = `· ${today()}`;
  window.addEventListener("beforeprint", () => { $("printed").textContent = `· ${today()}`; });
  $("print").addEventListener("click", () => window.print());
  setFollow(true);
  if (fatal) {
    $("tools").hidden = true;
    showStatus();
    return;
  }
  document.title = `${stream} · transcript`;
  $("title").textContent = `Transcript: ${stream}`;
  const q = token ? `?token=${encodeURIComponent(token)}` : "";
  for (const kind of ["txt", "md", "srt", "vtt"]) {
    const a = $(`dl-${kind}`);
    a.href = `/streams/${encodeURIComponent(stream)}.${kind}${q}`;
    a.download = `${stream}.${kind}`;
  }
  const conn = new S.CaptionConnection({
    server: S.defaultServer(), stream, token, model, onEvent, onStatus, onPresence, onNames,
  });
  conn.open();
  showStatus();
  // `show(ev)` draws one wire event as if it had arrived (tests)
  window.streamcapTranscript = { model, conn, show: onEvent, following: () => follow };
})();
