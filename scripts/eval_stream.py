#!/usr/bin/env python
"""Evaluate the live captioning pipeline on one long recording with reference segments.

    python scripts/eval_stream.py --audio A.wav --reference R.json --json OUT.json \
        [--clock simulated|real] [--model base] [--png OUT.png]

R.json holds ``segments: [{start, end, text}]`` (seconds). Without ``--reference`` the audio is
taken to hold no speech at all (a silence / noise clip: every captioned word is a hallucination).
The file goes through exactly the live pipeline (`LiveStream` on an `InferenceWorker`), paced at
real time or on the computation-aware simulated clock. Definitions: docs/design.md, "Measurement".

- final_latency_*: per reference segment, the time its last word first appears in final text
  (or the caption word aligned to it; otherwise the latest final word aligned to the segment;
  segments with none are reported as missed) minus the segment's end. p50 / p95 over segments.
- first_partial_latency_*: per segment, the time of the first event (partial or final) showing
  a word of it (a word equal to one of the segment's, by alignment) minus the segment's start.
- stream_wer: jiwer WER after Whisper's English normaliser of the concatenated finals.
- offline_wer: the same WER of the project's offline long-form path on the whole file, what
  ``streamcap transcribe FILE`` prints: the same segmenter cuts utterances (no reference times,
  so a reference segment of any length works), each decoded as one window by the same model
  with the same options and hallucination guard (`streamcap.runtime.transcribe.Transcription`).
  offline_rtf: its compute seconds / audio seconds (wall clock, warm engine).
- flicker: characters erased from the screen (finals + current partials, as a viewer renders
  them; events emitted together count as one update) per 100 characters of final text.
- rtf: compute seconds (decodes + segmenter/policy) / audio seconds.
- hallucinated_words_per_min: final words not aligned to any reference word that fall in a
  reference gap longer than 1 s, per minute of such gaps.
- speculative_identical: every final's decode equals plain greedy `generate` (reference_decode)
  on the same audio and options.
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import os
import sys
import tempfile
import time
import unicodedata
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import jiwer
import numpy as np
import soundfile as sf

from streamcap.audio import load_audio
from streamcap.core.captions import Caption, CaptionLog
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.policy import PolicyConfig
from streamcap.decoding.reference import reference_decode
from streamcap.runtime.clock import RealClock, SimulatedClock
from streamcap.runtime.engine import Engine, options_for
from streamcap.runtime.stream import (
    CaptionStage,
    LiveConfig,
    LiveStream,
    replay,
    split_language,
)
from streamcap.runtime.worker import DecodeJob, InferenceWorker, JobOutcome

SR = SAMPLE_RATE
GAP_S = 1.0


# --------------------------------------------------------------------------- normaliser


def make_normalizer() -> tuple[Any, str]:
    """Whisper's English normaliser with its spelling map when one is installed."""
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    for pkg in ("whisper_normalizer", "whisper"):
        try:
            path = importlib.resources.files(pkg) / "normalizers" / "english.json"
            mapping = json.loads(path.read_text(encoding="utf-8"))
            return EnglishTextNormalizer(mapping), f"EnglishTextNormalizer ({pkg} english.json)"
        except (ModuleNotFoundError, FileNotFoundError, OSError):
            continue
    return EnglishTextNormalizer({}), "EnglishTextNormalizer (no spelling map installed)"


# --------------------------------------------------------------------------- config


def _value(text: str) -> Any:
    low = text.lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def build_config(language: str | None, settings: list[str]) -> LiveConfig:
    """LiveConfig with ``name=value`` overrides (policy fields by name or ``policy.name``)."""
    live: dict[str, Any] = {}
    policy: dict[str, Any] = {}
    policy_names = {f.name for f in fields(PolicyConfig)}
    live_names = {f.name for f in fields(LiveConfig)}
    for item in settings:
        name, _, raw = item.partition("=")
        name = name.strip().removeprefix("policy.")
        if name in policy_names:
            policy[name] = _value(raw)
        elif name in live_names:
            live[name] = _value(raw)
        else:
            raise SystemExit(f"unknown setting {name!r}")
    # "auto" (or "none"): detect once per stream and keep it; "auto-each": every utterance
    code, lock = split_language(None if language in (None, "auto", "none") else language)
    base = LiveConfig(language=code, lock_language=lock)
    return replace(base, policy=replace(base.policy, **policy), **live)


# --------------------------------------------------------------------------- run


def run_stream(
    engine: Engine,
    audio: np.ndarray,
    config: LiveConfig,
    clock_kind: str,
    chunk_s: float,
    timer: str = "wall",
    stage: Callable[[Any], CaptionStage] | None = None,
) -> dict[str, Any]:
    """Replay `audio` through one live stream; `stage(clock)` makes a caption stage for it
    (scripts/eval_meeting.py's speaker labeller), returned as ``run["stage"]``."""
    worker = InferenceWorker(engine)
    if clock_kind == "simulated":
        clock: SimulatedClock | RealClock = SimulatedClock(
            timer=time.thread_time if timer == "thread" else time.perf_counter
        )
    else:
        clock = RealClock()
    events: list[tuple[float, Caption]] = []
    decodes: list[tuple[DecodeJob, JobOutcome]] = []
    sink = CaptionLog("eval")  # the stream's one sequence
    made = stage(clock) if stage is not None else None
    stream = LiveStream("eval", worker, None, config, clock, made)
    stream.on_caption = lambda ev: events.append((stream.now(), sink.add(ev)))
    stream.decode_observer = lambda job, out: decodes.append((job, out))
    feed_s = 0.0
    plain_feed = stream.feed

    def timed_feed(samples: np.ndarray) -> None:
        nonlocal feed_s
        t0 = time.perf_counter()
        plain_feed(samples)
        feed_s += time.perf_counter() - t0

    stream.feed = timed_feed  # type: ignore[method-assign]
    wall0 = time.perf_counter()
    replay(stream, audio, chunk_s=chunk_s)
    wall = time.perf_counter() - wall0
    if worker.threaded:
        worker.stop()
    if stream.errors:
        raise RuntimeError(f"decode errors: {stream.errors[:3]}")
    stats = worker.total_stats().as_dict()
    return {
        "events": events,
        "decodes": decodes,
        "worker": stats,
        "early_finals": stream.early_finals,
        "language": stream.language,
        "finals_dropped": stream.drops,
        "stage": made,
        "feed_s": feed_s,
        "wall_s": wall,
        "compute_s": float(stats["compute_s"]) + feed_s,
    }


def foreign_script(text: str, script: str = "LATIN") -> bool:
    """True when ``text`` has a letter outside ``script`` (Unicode names: LATIN, CYRILLIC,
    HEBREW, THAI, ...): a caption in another language than the speech's."""
    return any(ch.isalpha() and not unicodedata.name(ch, "").startswith(script) for ch in text)


def foreign_script_counts(events: list[Any], script: str = "LATIN") -> dict[str, int]:
    """Partial and final events whose text has letters outside ``script``."""
    counts = {"partial": 0, "final": 0}
    for _, cap in events:
        if cap.type in counts and foreign_script(cap.text, script):
            counts[cap.type] += 1
    return counts


def warm_up(engine: Engine, audio: np.ndarray, language: str | None) -> None:
    """First calls allocate and pick kernels: keep that out of the measured stream."""
    from streamcap.runtime.worker import encode_window

    opts = options_for(engine, language, "transcribe")
    clip = audio[: 3 * SR]
    engine.decode(engine.encode(clip), opts)
    engine.decode(encode_window(engine, clip, 5.0), opts)


# --------------------------------------------------------------------------- metrics


def short_replies(
    finals: list[dict[str, Any]], segments: list[dict[str, Any]], norm: Any, slack: float = 0.3
) -> dict[str, Any]:
    """Reference segments marked ``"short": true`` (a reply of 1-3 words between sentences):
    how many have all their words in the finals' words timed within the segment (± `slack`
    seconds), and the ones that do not, with what was heard there."""
    total = captioned = 0
    missed = []
    for seg in segments:
        if not seg.get("short"):
            continue
        total += 1
        heard = " ".join(
            w["word"]
            for c in finals
            for w in c.get("words") or []
            if w["end"] > seg["start"] - slack and w["start"] < seg["end"] + slack
        )
        got = set(_words(norm, heard))
        if all(w in got for w in _words(norm, seg["text"])):
            captioned += 1
        else:
            missed.append({"start": seg["start"], "reference": seg["text"], "heard": heard})
    return {"total": total, "captioned": captioned, "missed": missed}


def _words(norm: Any, text: str) -> list[str]:
    return norm(text).split() if text.strip() else []


def align(ref: list[str], hyp: list[str]) -> tuple[dict[int, int], list[int], set[int]]:
    """(ref index -> hyp index for equal/substituted words, inserted hyp indices, equal refs)."""
    ref_to_hyp: dict[int, int] = {}
    inserted: list[int] = []
    equal: set[int] = set()
    if not hyp:
        return ref_to_hyp, inserted, equal
    if not ref:
        return ref_to_hyp, list(range(len(hyp))), equal
    out = jiwer.process_words(" ".join(ref), " ".join(hyp))
    for chunk in out.alignments[0]:
        if chunk.type in ("equal", "substitute"):
            for k in range(chunk.ref_end_idx - chunk.ref_start_idx):
                ref_to_hyp[chunk.ref_start_idx + k] = chunk.hyp_start_idx + k
                if chunk.type == "equal":
                    equal.add(chunk.ref_start_idx + k)
        elif chunk.type == "insert":
            inserted.extend(range(chunk.hyp_start_idx, chunk.hyp_end_idx))
    return ref_to_hyp, inserted, equal


def percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def flicker(events: list[tuple[float, Caption]]) -> tuple[float, int, int]:
    """(erased chars per 100 final chars, erased, final chars); simultaneous events = 1 update."""
    finals: dict[int, str] = {}
    partials: dict[int, str] = {}

    def screen() -> str:
        parts = {**partials, **finals}
        return " ".join(t for _, t in sorted(parts.items()) if t)

    erased = 0
    shown = screen()
    i = 0
    while i < len(events):
        t = events[i][0]
        while i < len(events) and events[i][0] - t < 1e-3:
            cap = events[i][1]
            if cap.type == "final":
                finals[cap.segment] = cap.text
                partials.pop(cap.segment, None)
            else:
                partials[cap.segment] = cap.text
            i += 1
        new = screen()
        lcp = 0
        while lcp < min(len(shown), len(new)) and shown[lcp] == new[lcp]:
            lcp += 1
        erased += len(shown) - lcp
        shown = new
    total = len(" ".join(t for t in finals.values() if t))
    return (100.0 * erased / total if total else 0.0), erased, total


def evaluate(
    run: dict[str, Any],
    segments: list[dict[str, Any]],
    duration: float,
    norm: Any,
) -> dict[str, Any]:
    events: list[tuple[float, Caption]] = run["events"]
    ref_words: list[str] = []
    ref_seg: list[int] = []
    for i, seg in enumerate(segments):
        w = _words(norm, seg["text"])
        ref_words += w
        ref_seg += [i] * len(w)
    hyp_words: list[str] = []
    hyp_time: list[float] = []
    hyp_final: list[int] = []
    finals = [(t, c) for t, c in events if c.type == "final" and c.text.strip()]
    for k, (t, cap) in enumerate(finals):
        w = _words(norm, cap.text)
        hyp_words += w
        hyp_time += [t] * len(w)
        hyp_final += [k] * len(w)
    ref_to_hyp, inserted, _ = align(ref_words, hyp_words)

    # final latency
    per_seg: list[dict[str, Any]] = []
    for i, seg in enumerate(segments):
        idx = [j for j, s in enumerate(ref_seg) if s == i]
        row: dict[str, Any] = {"start": seg["start"], "end": seg["end"], "text": seg["text"]}
        if not idx:
            row["final_latency"] = None
        elif idx[-1] in ref_to_hyp:
            row["final_latency"] = hyp_time[ref_to_hyp[idx[-1]]] - seg["end"]
        else:
            aligned = [hyp_time[ref_to_hyp[j]] for j in idx if j in ref_to_hyp]
            row["final_latency"] = max(aligned) - seg["end"] if aligned else None
        per_seg.append(row)

    # first event showing a word of each segment: align each event's text to nearby segments
    first: dict[int, float] = {}
    shows: list[list[int]] = []  # per event: the segments it shows a word of
    for t, cap in events:
        words = _words(norm, cap.text)
        near = [
            i
            for i, s in enumerate(segments)
            if s["start"] < cap.end + 0.5 and s["end"] > cap.start - 0.5
        ]
        cand: list[str] = []
        cand_seg: list[int] = []
        for i in near:
            w = _words(norm, segments[i]["text"])
            cand += w
            cand_seg += [i] * len(w)
        _, _, equal = align(cand, words) if words and cand else ({}, [], set())
        shown = sorted({cand_seg[j] for j in equal})
        shows.append(shown)
        for i in shown:
            first.setdefault(i, t)
    for i, row in enumerate(per_seg):
        row["first_partial_latency"] = first[i] - segments[i]["start"] if i in first else None

    # hallucinations: inserted final words inside long reference gaps
    gaps: list[tuple[float, float]] = []
    prev_end = 0.0
    for seg in segments:
        if seg["start"] - prev_end > GAP_S:
            gaps.append((prev_end, seg["start"]))
        prev_end = max(prev_end, seg["end"])
    if duration - prev_end > GAP_S:
        gaps.append((prev_end, duration))
    gap_min = sum(b - a for a, b in gaps) / 60.0
    # An inserted final word is a hallucination when its caption's audio lies in a long gap,
    # or when it stands alone between two segments across a long gap (its own caption).
    hyp_to_ref = {h: r for r, h in ref_to_hyp.items()}
    halluc: list[str] = []
    for h in inserted:
        cap = finals[hyp_final[h]][1]
        in_gap = any(a - 0.1 <= cap.start and cap.end <= b + 0.1 for a, b in gaps)
        before = max((x for x in range(h) if x in hyp_to_ref), default=None)
        after = min((x for x in range(h + 1, len(hyp_words)) if x in hyp_to_ref), default=None)
        lone = (
            before is not None
            and after is not None
            and hyp_final[before] != hyp_final[h] != hyp_final[after]
            and segments[ref_seg[hyp_to_ref[after]]]["start"]
            - segments[ref_seg[hyp_to_ref[before]]]["end"]
            > GAP_S
        )
        if in_gap or lone:
            halluc.append(hyp_words[h])

    ref_text = norm(" ".join(s["text"] for s in segments))
    hyp_text = norm(" ".join(c.text for _, c in finals))
    fl, erased, final_chars = flicker(events)
    fin = [r["final_latency"] for r in per_seg if r["final_latency"] is not None]
    fp = [r["first_partial_latency"] for r in per_seg if r["first_partial_latency"] is not None]
    return {
        "final_latency_p50": percentile(fin, 50),
        "final_latency_p95": percentile(fin, 95),
        "first_partial_latency_p50": percentile(fp, 50),
        "first_partial_latency_p95": percentile(fp, 95),
        "missed_segments": sum(r["final_latency"] is None for r in per_seg),
        "stream_wer": _wer(ref_text, hyp_text),
        "flicker": fl,
        "erased_chars": erased,
        "final_chars": final_chars,
        "hallucinated_words_per_min": (len(halluc) / gap_min) if gap_min > 0 else 0.0,
        "hallucinated_words": halluc,
        "gap_minutes": gap_min,
        "segments": per_seg,
        "event_segments": shows,
        "stream_text": " ".join(c.text for _, c in finals),
    }


def _wer(ref: str, hyp: str) -> float:
    if not ref.strip():
        return float(len(hyp.split()) > 0)
    return float(jiwer.wer(ref, hyp if hyp.strip() else "<empty>"))


def offline_wer(
    engine: Engine,
    path: str,
    audio: np.ndarray,
    gain: float,
    segments: list[dict[str, Any]],
    config: LiveConfig,
    norm: Any,
) -> tuple[float | None, list[dict[str, Any]], float, dict[str, int]]:
    """The offline baseline: ``streamcap transcribe`` on the whole file (`Transcription`: the
    segmenter cuts utterances, each decoded as one window, the hallucination guard drops
    finals), same model and decoding options as the stream. No reference times are used, so any
    segment length works. Returns (WER, its finals, compute seconds, finals dropped by reason)."""
    from streamcap.runtime.transcribe import TranscribeOptions, Transcription

    if not segments:
        return None, [], 0.0, {}
    opts = TranscribeOptions(
        decoding=options_for(engine, config.language, config.task),
        segmenter=config.segmenter,
        guard=config.policy.guard,
    )
    with tempfile.TemporaryDirectory() as tmp:
        if gain != 1.0:  # transcribe what the stream heard
            path = str(Path(tmp) / "gained.wav")
            sf.write(path, audio, SR, subtype="FLOAT")
        t0 = time.perf_counter()
        job = Transcription(engine, path, opts, stream="offline")
        finals: list[dict[str, Any]] = [
            {"start": round(c.start, 3), "end": round(c.end, 3), "text": c.text} for c in job
        ]
        compute = time.perf_counter() - t0
    ref = norm(" ".join(s["text"] for s in segments))
    return _wer(ref, norm(" ".join(f["text"] for f in finals))), finals, compute, job.drops


def check_identical(engine: Engine, decodes: list[tuple[DecodeJob, JobOutcome]]) -> dict[str, Any]:
    """Every final decode against plain greedy generate on the same audio and options."""
    checked = 0
    mismatches = []
    windows: dict[int, tuple[int, ...]] = {}  # joined windows' plain greedy tokens, by job id

    def greedy(audio: Any, options: Any) -> tuple[int, ...]:
        enc = engine.encode(audio)
        return tuple(reference_decode(engine.decoder, enc.enc, options, enc.duration_s)[0])

    for job, out in decodes:
        if job.kind != "final" or out.result is None or out.options is None:
            continue
        checked += 1
        got = tuple(out.result.tokens)
        if out.joined is not None:  # a backlog's final (`runtime.coalesce`): cut from the
            joined = out.joined  # window's tokens, or decoded again alone
            if joined.id not in windows:
                windows[joined.id] = greedy(joined.audio, out.options)
            whole = windows[joined.id]
            n = len(got)
            if any(whole[i : i + n] == got for i in range(len(whole) - n + 1)):
                continue
        if greedy(job.audio, out.options) != got:
            mismatches.append({"window": job.window, "speculative": out.result.text})
    return {"checked": checked, "mismatches": mismatches, "identical": not mismatches}


# --------------------------------------------------------------------------- plot


def plot(path: Path, events: list[tuple[float, Caption]], metrics: dict[str, Any],
         segments: list[dict[str, Any]], duration: float, title: str) -> None:  # fmt: skip
    """One row per reference segment: its audio (grey), the partials that showed its words
    (blue ticks, at emit time) and the moment its last word became final (red triangle, with
    the final's text). Below, the latencies per segment against the targets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = metrics.get("segments", [])
    shows: list[list[int]] = metrics.get("event_segments", [[] for _ in events])
    n = max(1, len(segments))
    width = min(40.0, max(14.0, duration * 0.1))
    fig, (ax, lat) = plt.subplots(
        2, 1, figsize=(width, 2.5 + 0.28 * n), sharex=True,
        gridspec_kw={"height_ratios": [0.28 * n, 2.2]},
    )  # fmt: skip
    for i, seg in enumerate(segments):
        y = n - 1 - i
        ax.barh(y, seg["end"] - seg["start"], left=seg["start"], height=0.6, color="0.8")
        lat_i = rows[i].get("final_latency") if i < len(rows) else None
        x = seg["end"] + max(0.0, lat_i or 0.0) + 3.2
        ax.text(x, y, seg["text"][:70], fontsize=6.5, va="center", color="0.25")
    for (t, cap), segs in zip(events, shows, strict=True):
        for i in segs:
            y = n - 1 - i
            if cap.type == "partial":
                ax.plot(t, y + 0.2, "|", color="tab:blue", ms=7, mew=1.2)
            else:
                ax.plot(t, y - 0.2, "|", color="tab:green", ms=7, mew=1.2)
    for i, row in enumerate(rows):
        if row.get("final_latency") is not None:
            y = n - 1 - i
            t = row["end"] + row["final_latency"]
            ax.plot(t, y, "<", color="tab:red", ms=6)
            ax.text(t + 0.25, y, f"{row['final_latency']:.2f} s", fontsize=6, va="center",
                    color="tab:red")  # fmt: skip
    noise = [(t, c) for (t, c), segs in zip(events, shows, strict=True) if not segs and c.text]
    for t, cap in noise:  # captions aligned to no reference segment (hallucination candidates)
        ax.plot(t, -0.8, "x", color="tab:purple", ms=6)
        ax.text(t, -1.3, cap.text[:30], fontsize=6, color="tab:purple", rotation=20)
    ax.set_yticks([])
    ax.set_ylim(-1.6, n)
    ax.set_title(title + "\nrows: reference segments (grey, audio time); blue |: partial "
                 "showing a word of it; green |: final; red <: its last word final (latency); "
                 "purple x: caption matching no segment", fontsize=8)  # fmt: skip
    ax.grid(axis="x", alpha=0.3)
    xs = [r["end"] for r in rows if r["final_latency"] is not None]
    ys = [r["final_latency"] for r in rows if r["final_latency"] is not None]
    lat.bar(xs, ys, width=0.8, color="tab:red", label="final latency (s, at segment end)")
    xs = [r["start"] for r in rows if r.get("first_partial_latency") is not None]
    ys = [r["first_partial_latency"] for r in rows if r.get("first_partial_latency") is not None]
    lat.bar(xs, ys, width=0.5, color="tab:blue", alpha=0.7, label="first-partial latency (s)")
    for level, style in ((1.0, ":"), (1.5, "-."), (2.0, "--")):
        lat.axhline(level, color="k", ls=style, lw=0.6)
    lat.set_xlabel("stream time (s)")
    lat.set_ylabel("seconds")
    lat.legend(fontsize=7, loc="upper right")
    lat.set_xlim(0, duration + 3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--audio", required=True)
    ap.add_argument("--reference", help="JSON with segments [{start, end, text}]; none: no speech")
    ap.add_argument("--json", required=True, help="output JSON")
    ap.add_argument("--png", help="timeline PNG (default: the JSON path with .png)")
    ap.add_argument("--clock", choices=("simulated", "real"), default="simulated")
    ap.add_argument("--model", default="base")
    ap.add_argument("--language", default="en",
                    help="a code; auto: detected once per stream; auto-each: per utterance",
                    )  # fmt: skip
    ap.add_argument("--script", default="LATIN",
                    help="the speech's script (Unicode name prefix): captions with other "
                    "letters are counted as foreign_script")  # fmt: skip
    ap.add_argument("--chunk", type=float, default=0.1, help="seconds of audio per feed")
    ap.add_argument("--gain", type=float, default=1.0,
                    help="multiply the audio (clipped): louder noise tests the guards")  # fmt: skip
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16", "fp16"))
    ap.add_argument("--timer", choices=("wall", "thread"), default="wall",
                    help="simulated clock charges wall time, or the worker thread's CPU time "
                    "(steadier on a machine shared with other jobs)")  # fmt: skip
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override a LiveConfig/PolicyConfig field (repeatable)")  # fmt: skip
    ap.add_argument("--vad", choices=("webrtc", "silero"), default="webrtc",
                    help="the segmenter's voice detector")  # fmt: skip
    ap.add_argument("--no-offline", action="store_true", help="skip the offline WER baseline")
    ap.add_argument("--no-check", action="store_true", help="skip the exactness check")
    args = ap.parse_args(argv)

    config = build_config(args.language, args.set)
    config = replace(config, segmenter=replace(config.segmenter, vad=args.vad))
    norm, norm_name = make_normalizer()
    audio = load_audio(args.audio)
    if args.gain != 1.0:
        audio = np.clip(audio * args.gain, -1.0, 1.0).astype(np.float32)
    duration = len(audio) / SR
    segments: list[dict[str, Any]] = []
    if args.reference:
        segments = json.loads(Path(args.reference).read_text())["segments"]
    engine = Engine(args.model, threads=args.threads, precision=args.precision)
    warm_up(engine, audio, config.language)
    load0 = os.getloadavg()[0]
    run = run_stream(engine, audio, config, args.clock, args.chunk, args.timer)
    metrics = evaluate(run, segments, duration, norm)
    out: dict[str, Any] = {
        k: v for k, v in metrics.items() if k not in ("segments", "event_segments")
    }
    out["rtf"] = run["compute_s"] / duration
    out["foreign_script"] = foreign_script_counts(run["events"], args.script.upper())
    finals = [cap.to_dict() for _, cap in run["events"] if cap.type == "final"]
    out["short_replies"] = short_replies(finals, segments, norm)
    out["stream_language"] = run["language"]
    out["precision"] = engine.precision
    if not args.no_offline:
        out["offline_wer"], out["offline_finals"], offline_s, out["offline_finals_dropped"] = (
            offline_wer(engine, args.audio, audio, args.gain, segments, config, norm)
        )
        out["offline_rtf"] = offline_s / duration
    if not args.no_check:
        check = check_identical(engine, run["decodes"])
        out["speculative_identical"] = check["identical"]
        out["speculative_check"] = check
    events = run["events"]
    out.update(
        audio=args.audio,
        reference=args.reference,
        model=args.model,
        clock=args.clock,
        timer=args.timer,
        chunk_s=args.chunk,
        gain=args.gain,
        duration_s=duration,
        compute_s=run["compute_s"],
        segmenter_policy_s=run["feed_s"],
        wall_s=run["wall_s"],
        load_average_at_start=load0,
        normalizer=norm_name,
        worker=run["worker"],
        early_finals=run["early_finals"],
        finals_dropped=run["finals_dropped"],
        config=_config_dict(config),
        segments=metrics["segments"],
        decodes=[_decode_row(job, o) for job, o in run["decodes"]],
        captions=[{**cap.to_dict(), "emit_s": round(t, 3)} for t, cap in events],
    )
    Path(args.json).write_text(json.dumps(out, indent=1, default=_json_default))
    png = Path(args.png) if args.png else Path(args.json).with_suffix(".png")
    title = (
        f"{Path(args.audio).name}  model={args.model} clock={args.clock}  "
        f"final p50={_f(out['final_latency_p50'])} p95={_f(out['final_latency_p95'])}  "
        f"first-partial p50={_f(out['first_partial_latency_p50'])}  "
        f"WER {_f(out['stream_wer'])} (offline {_f(out.get('offline_wer'))})  "
        f"flicker {_f(out['flicker'])}  RTF {_f(out['rtf'])}"
    )
    plot(png, events, metrics, segments, duration, title)

    keys = ("final_latency_p50", "final_latency_p95", "first_partial_latency_p50",
            "first_partial_latency_p95", "stream_wer", "offline_wer", "flicker", "rtf",
            "offline_rtf", "hallucinated_words_per_min", "speculative_identical",
            "missed_segments", "early_finals", "foreign_script", "stream_language",
            "finals_dropped", "offline_finals_dropped")  # fmt: skip
    brief = {k: out.get(k) for k in keys}
    brief["short_replies"] = {k: out["short_replies"][k] for k in ("total", "captioned")}
    print(json.dumps(brief, default=_json_default))
    print(f"wrote {args.json} and {png}", file=sys.stderr)
    return 0


def _decode_row(job: DecodeJob, out: JobOutcome) -> dict[str, Any]:
    r = out.result
    row: dict[str, Any] = {
        "kind": job.kind,
        "window": job.window,
        "audio_s": round(len(job.audio) / SR, 3),
        "context_s": out.context_s,
        "encoder_s": round(out.encoder_s, 4),
        "decoder_s": round(out.decoder_s, 4),
    }
    if r is not None:
        row.update(
            text=r.text,
            no_speech_prob=round(r.no_speech_prob, 4),
            avg_logprob=None if r.avg_logprob is None else round(r.avg_logprob, 4),
            stopped_by=r.stopped_by,
            drafted=r.stats.drafted,
            accepted=r.stats.accepted,
            forward_passes=r.stats.forward_passes,
        )
    return row


def _f(x: Any) -> str:
    return "-" if x is None else f"{x:.2f}"


def _config_dict(config: LiveConfig) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(config)


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, tuple):
        return list(o)
    return str(o)


if __name__ == "__main__":
    sys.exit(main())
