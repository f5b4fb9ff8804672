"""Evaluate the live captioning pipeline on one long recording with reference segments.

    python scripts/eval_stream.py --audio A.wav --reference R.json --json OUT.json \
        [--clock simulated|real] [--model base] [--png OUT.png]

R.json holds ``segments: [{start, end, text}]`` (seconds). Without ``--reference`` the audio is
taken to hold no speech at all (a silence / noise clip: every captioned word is a hallucination).
The file goes through exactly the live pipeline (`LiveStream` on an `InferenceWorker`:
`live_run`), paced at real time or on the computation-aware simulated clock. Definitions:
docs/design.md, "Measurement" (computed in `metrics`).

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
  on the same audio and options (`exactness`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from streamcap.audio.file import load_audio
from streamcap.audio.vad import vad_names
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.live_config import LiveConfig
from streamcap.evaluation.busy import busy_processes
from streamcap.evaluation.exactness import check_identical
from streamcap.evaluation.live_run import run_stream, warm_up
from streamcap.evaluation.metrics import (
    Segments,
    evaluate,
    foreign_script_counts,
    short_replies,
    wer,
)
from streamcap.evaluation.normalize import Normalizer, make_normalizer
from streamcap.evaluation.output import config_dict, fmt, json_default
from streamcap.evaluation.plots import plot
from streamcap.evaluation.settings import build_config
from streamcap.runtime.decoder_threads import DecoderChoice
from streamcap.runtime.engine import Engine, options_for
from streamcap.runtime.jobs import DecodeJob, JobOutcome

SR = SAMPLE_RATE

#: the figures printed as one JSON line (the JSON file holds everything)
BRIEF = ("final_latency_p50", "final_latency_p95", "first_partial_latency_p50",
         "first_partial_latency_p95", "stream_wer", "offline_wer", "flicker", "rtf",
         "offline_rtf", "hallucinated_words_per_min", "speculative_identical",
         "missed_segments", "early_finals", "foreign_script", "stream_language",
         "finals_dropped", "offline_finals_dropped", "final_latency_max",
         "final_latency_max_last_third", "load_shed")  # fmt: skip

#: ``--thread-strategy`` -> the decoder's (`Engine.adapt_threads`); the others follow the load
DECODER_OF: dict[str, DecoderChoice] = {"draft": "draft", "encoder": "fixed"}


def parser() -> argparse.ArgumentParser:
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
    ap.add_argument("--vad", choices=vad_names(), default=None,
                    help="the segmenter's voice detector (default webrtc; the same as "
                    "--set segmenter.vad=NAME)")  # fmt: skip
    ap.add_argument("--busy", type=int, default=0, metavar="N",
                    help="N other processes keep one core busy each while the stream runs "
                    "(the machine shared with other work: `busy`)")  # fmt: skip
    ap.add_argument("--thread-strategy", default="adaptive",
                    choices=("adaptive", "measured", "encoder", "draft", "fixed"),
                    help="adaptive: the thread counts follow the load as a live worker's do "
                    "(the cores the kernel counts free, `runtime.free_cores`, the decoder's "
                    "with the encoder's, `runtime.decoder_threads`); measured: the count the "
                    "encoder measured cheaper instead (`runtime.encoder_threads`); encoder: "
                    "the encoder's measured count only, the decoder on all threads (before "
                    "issue 38's second stop); draft: as adaptive, but the decoder drafts on "
                    "one thread and verifies on all; fixed: neither")  # fmt: skip
    ap.add_argument("--no-offline", action="store_true", help="skip the offline WER baseline")
    ap.add_argument("--no-check", action="store_true", help="skip the exactness check")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    vad = [f"segmenter.vad={args.vad}"] if args.vad else []
    config = build_config(args.language, args.set + vad)
    norm, norm_name = make_normalizer()
    audio, segments = load_inputs(args.audio, args.reference, args.gain)
    duration = len(audio) / SR
    engine = Engine(args.model, threads=args.threads, precision=args.precision)
    if args.thread_strategy != "fixed":
        how = args.thread_strategy
        decoder = DECODER_OF.get(how, "follow")
        engine.adapt_threads(free_cores=how in ("adaptive", "draft"), decoder=decoder)
    warm_up(engine, audio, config.language)
    with busy_processes(args.busy):
        load0 = os.getloadavg()[0]
        run = run_stream(engine, audio, config, args.clock, args.chunk, args.timer)
    metrics = evaluate(run, segments, duration, norm)
    out = figures(args, engine, audio, run, metrics, segments, config, norm)
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
        busy_processes=args.busy,
        normalizer=norm_name,
        worker=run["worker"],
        early_finals=run["early_finals"],
        finals_dropped=run["finals_dropped"],
        load_shed=run["load_shed"],
        encoder_threads=engine.encoder_threads.figures(),
        decoder_threads=engine.decoder_threads.figures(),
        config=config_dict(config),
        segments=metrics["segments"],
        decodes=[decode_row(job, o) for job, o in run["decodes"]],
        captions=[{**cap.to_dict(), "emit_s": round(t, 3)} for t, cap in run["events"]],
    )
    png = write(args, out, run, metrics, segments, duration)
    brief = {k: out.get(k) for k in BRIEF}
    brief["short_replies"] = {k: out["short_replies"][k] for k in ("total", "captioned")}
    print(json.dumps(brief, default=json_default))
    print(f"wrote {args.json} and {png}", file=sys.stderr)
    return 0


def load_inputs(path: str, reference: str | None, gain: float) -> tuple[np.ndarray, Segments]:
    """The audio (times ``gain``, clipped) and the reference segments (none: no speech)."""
    audio = load_audio(path)
    if gain != 1.0:
        audio = np.clip(audio * gain, -1.0, 1.0).astype(np.float32)
    segments: Segments = []
    if reference:
        segments = json.loads(Path(reference).read_text())["segments"]
    return audio, segments


def figures(
    args: argparse.Namespace,
    engine: Engine,
    audio: np.ndarray,
    run: dict[str, Any],
    metrics: dict[str, Any],
    segments: Segments,
    config: LiveConfig,
    norm: Normalizer,
) -> dict[str, Any]:
    """The run's figures: the stream metrics, RTF, the screen checks, and unless skipped the
    offline baseline and the exactness check."""
    duration = len(audio) / SR
    out = {k: v for k, v in metrics.items() if k not in ("segments", "event_segments")}
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
    return out


def write(
    args: argparse.Namespace,
    out: dict[str, Any],
    run: dict[str, Any],
    metrics: dict[str, Any],
    segments: Segments,
    duration: float,
) -> Path:
    """The JSON file and the timeline PNG (returned: its path)."""
    Path(args.json).write_text(json.dumps(out, indent=1, default=json_default))
    png = Path(args.png) if args.png else Path(args.json).with_suffix(".png")
    title = (
        f"{Path(args.audio).name}  model={args.model} clock={args.clock}  "
        f"final p50={fmt(out['final_latency_p50'])} p95={fmt(out['final_latency_p95'])}  "
        f"first-partial p50={fmt(out['first_partial_latency_p50'])}  "
        f"WER {fmt(out['stream_wer'])} (offline {fmt(out.get('offline_wer'))})  "
        f"flicker {fmt(out['flicker'])}  RTF {fmt(out['rtf'])}"
    )
    plot(png, run["events"], metrics, segments, duration, title)
    return png


def offline_wer(
    engine: Engine,
    path: str,
    audio: np.ndarray,
    gain: float,
    segments: Segments,
    config: LiveConfig,
    norm: Normalizer,
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
    return wer(ref, norm(" ".join(f["text"] for f in finals))), finals, compute, job.drops


def decode_row(job: DecodeJob, out: JobOutcome) -> dict[str, Any]:
    """One decode of the run, as the JSON file lists it."""
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


if __name__ == "__main__":
    raise SystemExit(main())
