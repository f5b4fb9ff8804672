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
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

# the sibling modules (scripts/); the metrics' names stay importable from here for
# scripts/eval_meeting.py, scripts/eval_vocabulary.py and scripts/policy_replay.py
from eval_plot import plot
from reference_alignment import percentile as percentile
from stream_metrics import (
    _wer,
    evaluate,
    foreign_script_counts,
    make_normalizer,
    short_replies,
)

from streamcap.audio import load_audio
from streamcap.core.captions import Caption, CaptionLog
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.policy import PolicyConfig
from streamcap.core.segmenter import SegmenterConfig
from streamcap.decoding.reference import reference_decode
from streamcap.runtime.caption_stage import CaptionStage
from streamcap.runtime.clock import RealClock, SimulatedClock
from streamcap.runtime.engine import Engine, options_for
from streamcap.runtime.live_config import LiveConfig, split_language
from streamcap.runtime.replay import replay
from streamcap.runtime.stream import LiveStream
from streamcap.runtime.worker import DecodeJob, InferenceWorker, JobOutcome

SR = SAMPLE_RATE


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
    """LiveConfig with ``name=value`` overrides (policy fields by name or ``policy.name``,
    segmenter fields as ``segmenter.name``)."""
    live: dict[str, Any] = {}
    policy: dict[str, Any] = {}
    segmenter: dict[str, Any] = {}
    policy_names = {f.name for f in fields(PolicyConfig)}
    live_names = {f.name for f in fields(LiveConfig)}
    segmenter_names = {f.name for f in fields(SegmenterConfig)}
    for item in settings:
        name, _, raw = item.partition("=")
        name = name.strip().removeprefix("policy.")
        field = name.removeprefix("segmenter.")
        if field != name and field in segmenter_names:
            segmenter[field] = _value(raw)
        elif name in policy_names:
            policy[name] = _value(raw)
        elif name in live_names:
            live[name] = _value(raw)
        else:
            raise SystemExit(f"unknown setting {name!r}")
    # "auto" (or "none"): detect once per stream and keep it; "auto-each": every utterance
    code, lock = split_language(None if language in (None, "auto", "none") else language)
    base = LiveConfig(language=code, lock_language=lock)
    return replace(
        base,
        policy=replace(base.policy, **policy),
        segmenter=replace(base.segmenter, **segmenter),
        **live,
    )


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


def warm_up(engine: Engine, audio: np.ndarray, language: str | None) -> None:
    """First calls allocate and pick kernels: keep that out of the measured stream."""
    from streamcap.runtime.worker import encode_window

    opts = options_for(engine, language, "transcribe")
    clip = audio[: 3 * SR]
    engine.decode(engine.encode(clip), opts)
    engine.decode(encode_window(engine, clip, 5.0), opts)


# --------------------------------------------------------------------------- metrics


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
                    help="override a LiveConfig/PolicyConfig field, or segmenter.NAME "
                    "(repeatable)")  # fmt: skip
    ap.add_argument("--vad", choices=("webrtc", "silero"), default=None,
                    help="the segmenter's voice detector (default webrtc; the same as "
                    "--set segmenter.vad=NAME)")  # fmt: skip
    ap.add_argument("--no-offline", action="store_true", help="skip the offline WER baseline")
    ap.add_argument("--no-check", action="store_true", help="skip the exactness check")
    args = ap.parse_args(argv)

    vad = [f"segmenter.vad={args.vad}"] if args.vad else []
    config = build_config(args.language, args.set + vad)
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
