// The mic page's "Enrol my voice": a few seconds of the person reading a sentence, recorded
// with the page's own capture (mic-worklet.js, 16-bit PCM) and posted as a WAV file to this
// server's POST /streams/ID/voices?name=NAME (streamcap/server/voices.py), with the page's
// publish token (enrolling changes what the stream's captions say, as a rename does). The
// server embeds the voice and the stream's labeller names it from its next final on. A name the
// stream has enrolled already is refused (409); the page then offers to replace its sample:
// the button becomes "Replace", and the next recording of that name is sent with &replace=1.
// "Forget" takes a name back (DELETE, the same permission): later captions lose the name.
// Only this page's own origin is reached (the page's CSP: connect-src 'self').
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const P = new URLSearchParams(window.location.search);
  // seconds recorded: 8 by default (5-30 s of speech names a voice best, and the sentence
  // takes about 8); ?enrol_s=N for 3-30
  const SECONDS = Math.min(30, Math.max(3, Number(P.get("enrol_s")) || 8));
  let rec = null; // {media, ctx, node, chunks, timer, rate, stopAt}
  let replacing = null; // {stream, name}: the next recording of that name replaces its sample

  /** The button's word: "Replace" while a refused name may be replaced, else "Record". */
  function idle() {
    const name = $("enrol-name").value.trim(), stream = $("stream").value.trim();
    const armed = replacing && replacing.name === name && replacing.stream === stream;
    if (!armed) replacing = null;
    $("enrol-record").textContent = armed ? "Replace" : "Record";
  }

  function say(text, kind = "") {
    $("enrol-status").textContent = text;
    $("enrol-status").className = kind;
    $("enrol").dataset.state = kind || "busy";
  }

  /** 16-bit mono PCM chunks as a WAV file (RIFF header + data). */
  function wav(chunks, rate) {
    const n = chunks.reduce((a, c) => a + c.length, 0);
    const buf = new ArrayBuffer(44 + 2 * n);
    const v = new DataView(buf);
    const text = (at, s) => { for (let i = 0; i < s.length; i++) v.setUint8(at + i, s.charCodeAt(i)); };
    text(0, "RIFF"); v.setUint32(4, 36 + 2 * n, true); text(8, "WAVE");
    text(12, "fmt "); v.setUint32(16, 16, true); v.setUint16(20, 1, true); v.setUint16(22, 1, true);
    v.setUint32(24, rate, true); v.setUint32(28, 2 * rate, true); v.setUint16(32, 2, true);
    v.setUint16(34, 16, true); text(36, "data"); v.setUint32(40, 2 * n, true);
    const out = new Int16Array(buf, 44, n);
    let at = 0;
    for (const c of chunks) { out.set(c, at); at += c.length; }
    return new Blob([buf], { type: "audio/wav" });
  }

  async function record() {
    const name = $("enrol-name").value.trim();
    const stream = $("stream").value.trim();
    if (!name) { say("type the name to enrol first", "error"); $("enrol-name").focus(); return; }
    if (!stream) { say("fill in the Stream id first", "error"); return; }
    $("enrol-record").disabled = true;
    say("starting the microphone…");
    let media, ctx;
    try {
      media = await navigator.mediaDevices.getUserMedia({
        audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: false, channelCount: 1 },
      });
      try { ctx = new AudioContext({ sampleRate: 16000 }); } catch (_) { ctx = new AudioContext(); }
      await ctx.audioWorklet.addModule("/static/mic-worklet.js");
      if (ctx.state === "suspended") await ctx.resume();
    } catch (e) {
      if (media) media.getTracks().forEach((t) => t.stop());
      if (ctx) ctx.close();
      $("enrol-record").disabled = false;
      say(!window.isSecureContext
        ? "the microphone needs https or localhost: start the server with --tls-cert/--tls-key"
        : `microphone unavailable: ${e.message || e}`, "error");
      return;
    }
    const node = new AudioWorkletNode(ctx, "mic-pcm", {
      processorOptions: { frameSamples: Math.round(ctx.sampleRate / 10), format: "pcm_s16le" },
    });
    const mute = ctx.createGain();
    mute.gain.value = 0;
    ctx.createMediaStreamSource(media).connect(node).connect(mute).connect(ctx.destination);
    const replace = Boolean(replacing && replacing.name === name && replacing.stream === stream);
    replacing = null;
    const r = { media, ctx, node, chunks: [], rate: ctx.sampleRate, stopAt: performance.now() + SECONDS * 1000, stream, name, replace };
    rec = r;
    node.port.onmessage = (e) => {
      const pcm = new Int16Array(e.data);
      r.chunks.push(pcm);
      let peak = 0;
      for (let i = 0; i < pcm.length; i += 8) peak = Math.max(peak, Math.abs(pcm[i]));
      $("enrol-level").style.width = `${Math.min(100, (100 * peak) / 32768)}%`;
    };
    $("enrol-read").hidden = false;
    $("enrol-record").textContent = "Stop";
    $("enrol-record").disabled = false;
    const tick = () => {
      const left = Math.ceil((r.stopAt - performance.now()) / 1000);
      if (left <= 0) { finish(r); return; }
      say(`recording: read the sentence aloud… ${left} s`);
    };
    tick();
    r.timer = setInterval(tick, 200);
  }

  async function finish(r) {
    if (r.done) return;
    r.done = true;
    clearInterval(r.timer);
    rec = null;
    r.node.port.onmessage = null;
    r.media.getTracks().forEach((t) => t.stop());
    r.ctx.close();
    $("enrol-level").style.width = "0";
    $("enrol-read").hidden = true;
    $("enrol-record").textContent = "Record";
    $("enrol-record").disabled = true;
    say("uploading…");
    const q = new URLSearchParams({ name: r.name });
    if (r.replace) q.set("replace", "1");
    const headers = { "Content-Type": "audio/wav" };
    const token = $("token").value;
    if (token) headers.Authorization = `Bearer ${token}`;
    try {
      const res = await fetch(`/streams/${encodeURIComponent(r.stream)}/voices?${q}`, {
        method: "POST", headers, body: wav(r.chunks, r.rate), cache: "no-store",
      });
      const body = await res.text();
      if (res.status === 409 && body.includes("&replace=1")) {
        // the name is enrolled already: the server would replace its sample if asked
        replacing = { stream: r.stream, name: r.name };
        say(`not enrolled: ${r.name} is enrolled in ${r.stream} already. Press Replace and read ` +
          "the sentence again to replace that sample", "error");
      } else if (!res.ok) {
        say(`not enrolled: ${body.trim() || res.status}`, "error");
      } else {
        const j = JSON.parse(body);
        const was = j.was ? ` (the voice was ${j.was} so far: rename ${j.was} to name what it said)` : "";
        const what = r.replace ? `${j.name}'s sample replaced in` : `${j.name} enrolled in`;
        say(`${what} ${j.stream}: ${Number(j.speech_s).toFixed(1)} s of speech${was}`, "done");
      }
    } catch (e) {
      say(`not enrolled: ${e.message || e}`, "error");
    } finally {
      $("enrol-record").disabled = false;
      idle();
    }
  }

  /** Takes the typed name back from the stream (DELETE /streams/ID/voices?name=NAME). */
  async function forget() {
    const name = $("enrol-name").value.trim(), stream = $("stream").value.trim();
    if (!name) { say("type the name to forget first", "error"); $("enrol-name").focus(); return; }
    if (!stream) { say("fill in the Stream id first", "error"); return; }
    $("enrol-forget").disabled = true;
    const headers = {};
    const token = $("token").value;
    if (token) headers.Authorization = `Bearer ${token}`;
    try {
      const q = new URLSearchParams({ name });
      const res = await fetch(`/streams/${encodeURIComponent(stream)}/voices?${q}`, {
        method: "DELETE", headers, cache: "no-store",
      });
      const body = await res.text();
      if (!res.ok) {
        say(`not forgotten: ${body.trim() || res.status}`, "error");
      } else {
        const j = JSON.parse(body);
        const now = j.now ? `: the voice is ${j.now} again` : ": the voice is not named any more";
        say(`${j.name} forgotten in ${j.stream}${now} (captions already shown keep the name)`, "done");
        replacing = null;
        idle();
      }
    } catch (e) {
      say(`not forgotten: ${e.message || e}`, "error");
    } finally {
      $("enrol-forget").disabled = false;
    }
  }

  $("enrol-forget").addEventListener("click", () => { if (!rec) forget(); });
  $("enrol-record").addEventListener("click", () => {
    if (rec) {
      // stopped early: what was read is sent (the server says if it is too little)
      finish(rec);
    } else {
      record();
    }
  });
  $("enrol-name").addEventListener("input", idle); // another name: nothing to replace
  $("stream").addEventListener("input", idle);
  $("enrol-name").addEventListener("keydown", (e) => {
    if (e.key === "Enter") { e.preventDefault(); if (!rec) record(); }
  });
})();
