#!/usr/bin/env python
"""Evaluate speaker labels from one microphone on a long recording with reference speakers.

    python scripts/eval_meeting.py --audio A.wav --reference R.json --json OUT.json \
        [--model base] [--clock simulated|real] [--png OUT.png] [--speaker-set NAME=VALUE]
    python scripts/eval_meeting.py --audio A.wav --reference R.json --json OUT.json \
        --offline              # `streamcap transcribe --speakers auto`'s path instead
    python scripts/eval_meeting.py --audio A.wav --reference R.json --json OUT.json \
        --replay RUN.json      # relabel the finals of an earlier run (no Whisper: tuning)

R.json holds ``segments: [{start, end, text, speaker}]``. The file goes through the live
pipeline (`LiveStream` on an `InferenceWorker`, as scripts/eval_stream.py runs it) with the
`SpeakerLabeller` stage; ``--replay`` instead feeds the labeller the audio and the captions of an
earlier eval_stream / eval_meeting JSON (each caption when it was emitted, ``emit_s``), which
measures the labelling alone on the same finals in seconds. ``--offline`` runs the file as
``streamcap transcribe --speakers auto`` does (`Transcription`'s finals, one per VAD utterance,
labelled by `FileLabeller`, i.e. the same `SpeakerLabeller`); its stream_wer is then the offline
WER, and its JSON keeps the unlabelled finals (``source_captions``) that ``--replay`` relabels.

- der: pyannote.metrics DiarizationErrorRate with a NIST collar of 0.25 s each side of every
  reference boundary (pyannote ``collar=0.5``, the collar's whole width), overlap scored.
  Hypothesis turns: each final's ``[start, end]`` (the caption's time span, as a subtitle file
  shows it; the pieces of a split final meet halfway between their words); a final without a
  label is a speaker "?" of its own. Also without collar (``der_no_collar``), with the finals'
  words' spans as turns instead (``der_words``: first word start to last word end; DTW word
  times are tighter than the reference segments, which are the source clips' extents, so
  missed speech grows), and the components (missed, false alarm, confusion, seconds).
- cpwer: meeteval's concatenated minimum-permutation WER: per reference speaker the
  concatenation of its segments' text, per label the concatenation of its finals, both after
  Whisper's English normaliser (the same as stream_wer).
- stream_wer: scripts/eval_stream.py's, on the same finals (labels ignored).
- labels: distinct labels given; label_map: the optimal label -> reference speaker mapping.
- embed_ms_*: the voice encoder's time per labelled final (mean, p50, p95, max) and per
  second of final audio.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import eval_stream as es  # noqa: E402 - the sibling script, by path

from streamcap.audio import load_audio  # noqa: E402
from streamcap.core.captions import Caption, CaptionEvent, CaptionLog  # noqa: E402
from streamcap.core.constants import SAMPLE_RATE  # noqa: E402
from streamcap.core.decode_types import WordTiming  # noqa: E402
from streamcap.core.speakers import SpeakerConfig  # noqa: E402
from streamcap.runtime.labeller import PAD_S, FileLabeller, SpeakerLabeller  # noqa: E402
from streamcap.runtime.stream import LiveConfig  # noqa: E402

SR = SAMPLE_RATE
#: NIST collar (seconds each side of a reference boundary); pyannote takes the whole width.
COLLAR_S = 0.25
UNLABELLED = "?"


# --------------------------------------------------------------------------- runs


def speaker_config(settings: list[str]) -> SpeakerConfig:
    """SpeakerConfig with ``name=value`` overrides."""
    names = {f.name for f in fields(SpeakerConfig)}
    values: dict[str, Any] = {}
    for item in settings:
        name, _, raw = item.partition("=")
        if name.strip() not in names:
            raise SystemExit(f"unknown speaker setting {name!r}")
        values[name.strip()] = es._value(raw)
    return replace(SpeakerConfig(), **values)


def run_meeting(
    engine: Any,
    audio: np.ndarray,
    config: LiveConfig,
    speakers: SpeakerConfig,
    encoder: Any,
    clock_kind: str,
    chunk_s: float,
    timer: str = "wall",
) -> dict[str, Any]:
    """The live pipeline with the labeller stage (`eval_stream.run_stream`, whose compute
    counts the segmenter and policy too)."""
    run = es.run_stream(
        engine, audio, config, clock_kind, chunk_s, timer,
        stage=lambda clock: SpeakerLabeller(encoder, speakers, clock=clock),
    )  # fmt: skip
    run["labeller"] = run["stage"]
    return run


def run_offline(
    engine: Any, path: str, config: LiveConfig, speakers: SpeakerConfig, encoder: Any
) -> dict[str, Any]:
    """`streamcap transcribe --speakers auto`: the file's offline finals (`Transcription`, the
    stream's decoding options, segmenter and guard, words timed), each labelled by
    `FileLabeller` as it comes. A caption's ``emit_s`` is the audio read when it was labelled
    (its end + `PAD_S`), so a replay feeds the labeller what it had."""
    from streamcap.runtime.transcribe import TranscribeOptions, Transcription

    opts = TranscribeOptions(
        decoding=es.options_for(engine, config.language, config.task),
        segmenter=config.segmenter,
        guard=config.policy.guard,
    )
    labeller = SpeakerLabeller(encoder, speakers)
    files = FileLabeller(path, labeller, stream="offline")
    events: list[tuple[float, Caption]] = []
    source: list[tuple[float, Caption]] = []
    t0 = time.perf_counter()
    for final in Transcription(engine, path, opts, stream="offline"):
        source.append((final.end + PAD_S, final))
        events += [(final.end + PAD_S, cap) for cap in files.label(final)]
    wall = time.perf_counter() - t0
    return {"events": events, "source": source, "labeller": labeller, "wall_s": wall,
            "compute_s": wall}  # fmt: skip


def replay_captions(
    audio: np.ndarray, captions: list[dict[str, Any]], speakers: SpeakerConfig, encoder: Any
) -> dict[str, Any]:
    """The labeller alone on an earlier run's captions: audio fed up to each caption's emit
    time, then the caption (its speaker and the stage's renumbering dropped) processed."""
    labeller = SpeakerLabeller(encoder, speakers)
    sink = CaptionLog("eval")
    events: list[tuple[float, Caption]] = []
    fed = 0
    wall0 = time.perf_counter()
    for row in sorted(captions, key=lambda c: c["seq"]):
        upto = min(len(audio), int(round(row["emit_s"] * SR)))
        if upto > fed:
            labeller.feed(audio[fed:upto])
            fed = upto
        ev = CaptionEvent(
            row["type"], row["segment"], row["text"], row["start"], row["end"],
            row["committed_chars"], row["latency_ms"],
            tuple(WordTiming(w["word"], w["start"], w["end"], w["probability"])
                  for w in row.get("words", ())),
        )  # fmt: skip
        for out in labeller.process(ev):
            events.append((row["emit_s"], sink.add(out)))
    return {"events": events, "labeller": labeller, "wall_s": time.perf_counter() - wall0}


# --------------------------------------------------------------------------- metrics


def finals_of(events: list[tuple[float, Caption]]) -> list[Caption]:
    return [c for _, c in events if c.type == "final" and c.text.strip()]


def hypothesis_turns(finals: list[Caption], span: str = "final") -> list[tuple[float, float, str]]:
    """(start, end, label) per final: its ``[start, end]`` ("final"), or its words' span
    ("words": first word start to last word end; [start, end] when it has no word times)."""
    turns = []
    for c in finals:
        a, b = (c.start, c.end)
        if span == "words" and c.words:
            a, b = c.words[0].start, c.words[-1].end
        if b > a:
            turns.append((a, b, c.speaker or UNLABELLED))
    return turns


def diarization(
    segments: list[dict[str, Any]], turns: list[tuple[float, float, str]], collar_s: float
) -> dict[str, Any]:
    """DER (pyannote.metrics) of hypothesis turns against the reference segments."""
    from pyannote.core import Annotation, Segment
    from pyannote.metrics.diarization import DiarizationErrorRate

    ref = Annotation()
    for i, s in enumerate(segments):
        ref[Segment(s["start"], s["end"]), i] = s["speaker"]
    hyp = Annotation()
    for i, (a, b, label) in enumerate(turns):
        hyp[Segment(a, b), i] = label
    metric = DiarizationErrorRate(collar=2 * collar_s, skip_overlap=False)
    detail = metric(ref, hyp, detailed=True)
    mapping = metric.optimal_mapping(ref, hyp)
    return {
        "der": float(detail["diarization error rate"]),
        "missed_s": float(detail["missed detection"]),
        "false_alarm_s": float(detail["false alarm"]),
        "confusion_s": float(detail["confusion"]),
        "scored_s": float(detail["total"]),
        "label_map": {str(k): str(v) for k, v in mapping.items()},
    }


def cp_wer(segments: list[dict[str, Any]], finals: list[Caption], norm: Any) -> dict[str, Any]:
    """meeteval cpWER: per speaker / label the concatenated normalised text."""
    import meeteval

    ref: dict[str, list[str]] = defaultdict(list)
    for s in segments:
        ref[s["speaker"]].append(norm(s["text"]))
    hyp: dict[str, list[str]] = defaultdict(list)
    for c in finals:
        hyp[c.speaker or UNLABELLED].append(norm(c.text))
    r = meeteval.wer.cp_word_error_rate(
        {k: " ".join(v) for k, v in ref.items()}, {k: " ".join(v) for k, v in hyp.items()}
    )
    return {
        "cpwer": float(r.error_rate),
        "cpwer_errors": int(r.errors),
        "cpwer_length": int(r.length),
        "cpwer_missed_speakers": int(r.missed_speaker),
        "cpwer_falarm_speakers": int(r.falarm_speaker),
        "cpwer_assignment": [list(a) for a in r.assignment],
    }


def meeting_metrics(
    events: list[tuple[float, Caption]],
    segments: list[dict[str, Any]],
    duration: float,
    norm: Any,
    labeller: SpeakerLabeller,
) -> dict[str, Any]:
    finals = finals_of(events)
    turns = hypothesis_turns(finals)
    d = diarization(segments, turns, COLLAR_S)
    d0 = diarization(segments, turns, 0.0)
    dw = diarization(segments, hypothesis_turns(finals, "words"), COLLAR_S)
    ref_text = norm(" ".join(s["text"] for s in segments))
    hyp_text = norm(" ".join(c.text for c in finals))
    embed = [r.embed_ms for r in labeller.records if r.embed_ms > 0]
    audio_s = sum(r.end - r.start for r in labeller.records if r.embed_ms > 0)
    out: dict[str, Any] = {
        **d,
        "der_no_collar": d0["der"],
        "der_words": dw["der"],
        "der_words_missed_s": dw["missed_s"],
        **cp_wer(segments, finals, norm),
        "stream_wer": es._wer(ref_text, hyp_text),
        "labels": len({c.speaker for c in finals if c.speaker}),
        "reference_speakers": len({s["speaker"] for s in segments}),
        "finals": len(finals),
        "unlabelled_finals": sum(not c.speaker for c in finals),
        "split_finals": sum(r.pieces > 1 for r in labeller.records),
        "embed_ms_mean": float(np.mean(embed)) if embed else None,
        "embed_ms_p50": es.percentile(embed, 50),
        "embed_ms_p95": es.percentile(embed, 95),
        "embed_ms_max": max(embed) if embed else None,
        "embed_ms_per_audio_s": (sum(embed) / audio_s) if audio_s > 0 else None,
    }
    out["cpwer_minus_stream_wer"] = out["cpwer"] - out["stream_wer"]
    return out


# --------------------------------------------------------------------------- plot


def plot_speakers(
    path: Path,
    segments: list[dict[str, Any]],
    finals: list[Caption],
    label_map: dict[str, str],
    duration: float,
    title: str,
) -> None:
    """Top: reference speakers (one row each) over time; bottom: the emitted labels, each
    drawn in the colour of the reference speaker it maps to (grey: mapped to none)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    speakers = list(dict.fromkeys(s["speaker"] for s in segments))
    cmap = plt.get_cmap("tab10" if len(speakers) <= 10 else "tab20")
    colour = {s: cmap(i % cmap.N) for i, s in enumerate(speakers)}
    labels = sorted({c.speaker or UNLABELLED for c in finals},
                    key=lambda x: (x == UNLABELLED, len(x), x))  # fmt: skip
    rows = len(speakers) + len(labels)
    fig, ax = plt.subplots(figsize=(min(40.0, max(14.0, duration * 0.08)), 1.5 + 0.32 * rows))
    for i, s in enumerate(speakers):
        y = rows - 1 - i
        for seg in segments:
            if seg["speaker"] == s:
                ax.barh(y, seg["end"] - seg["start"], left=seg["start"], height=0.7,
                        color=colour[s])  # fmt: skip
    for j, label in enumerate(labels):
        y = len(labels) - 1 - j
        ref = label_map.get(label)
        for a, b, lab in hypothesis_turns(finals):
            if lab == label:
                ax.barh(y, b - a, left=a, height=0.7, color=colour.get(ref or "", "0.6"),
                        edgecolor="k", linewidth=0.4)  # fmt: skip
    ax.axhline(len(labels) - 0.5, color="k", lw=0.8)
    ticks = [f"ref: {s}" for s in speakers] + [
        f"{lab} -> {label_map.get(lab, 'none')}" for lab in labels
    ]
    ax.set_yticks(range(rows - 1, -1, -1), ticks, fontsize=7)
    ax.set_xlim(0, duration + 1)
    ax.set_xlabel("stream time (s)")
    ax.set_title(title + "\nabove the line: reference speakers; below: emitted labels (each "
                 "final's [start, end]), coloured as the reference speaker they map to",
                 fontsize=8)  # fmt: skip
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--audio", required=True)
    ap.add_argument("--reference", required=True, help="JSON with segments[].speaker")
    ap.add_argument("--json", required=True, help="output JSON")
    ap.add_argument("--png", help="speaker timeline PNG (default: the JSON path with .png)")
    ap.add_argument("--replay", help="relabel the captions of an earlier run's JSON (no ASR)")
    ap.add_argument("--offline", action="store_true",
                    help="the offline path: transcribe --speakers auto")  # fmt: skip
    ap.add_argument("--clock", choices=("simulated", "real"), default="simulated")
    ap.add_argument("--model", default="base")
    ap.add_argument("--language", default="en")
    ap.add_argument("--chunk", type=float, default=0.1, help="seconds of audio per feed")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16", "fp16"))
    ap.add_argument("--timer", choices=("wall", "thread"), default="wall")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override a LiveConfig/PolicyConfig field (repeatable)")  # fmt: skip
    ap.add_argument("--speaker-set", action="append", default=[], metavar="NAME=VALUE",
                    help="override a SpeakerConfig field (repeatable)")  # fmt: skip
    args = ap.parse_args(argv)

    from streamcap.speakers.voice_encoder import VoiceEncoder

    speakers = speaker_config(args.speaker_set)
    norm, norm_name = es.make_normalizer()
    audio = load_audio(args.audio)
    duration = len(audio) / SR
    segments: list[dict[str, Any]] = json.loads(Path(args.reference).read_text())["segments"]
    encoder = VoiceEncoder()
    encoder.embed(audio[: 2 * SR])  # first calls allocate: keep them out of the measure
    out: dict[str, Any] = {}
    if args.replay and args.offline:
        raise SystemExit("--replay relabels an earlier run's finals: not with --offline")
    if args.replay:
        earlier = json.loads(Path(args.replay).read_text())
        source = earlier.get("source_captions") or earlier["captions"]
        run = replay_captions(audio, source, speakers, encoder)
        out["replayed"] = args.replay
        out["path"] = earlier.get("path", "live")
    else:
        from streamcap.runtime.engine import Engine

        config = es.build_config(args.language, args.set)
        engine = Engine(args.model, threads=args.threads, precision=args.precision)
        es.warm_up(engine, audio, config.language)
        if args.offline:
            run = run_offline(engine, args.audio, config, speakers, encoder)
            out["source_captions"] = [{**c.to_dict(), "emit_s": round(t, 3)}
                                      for t, c in run["source"]]  # fmt: skip
        else:
            run = run_meeting(engine, audio, config, speakers, encoder, args.clock, args.chunk,
                              args.timer)  # fmt: skip
            stream = es.evaluate(run, segments, duration, norm)
            out.update({k: stream[k] for k in ("final_latency_p50", "final_latency_p95",
                                               "flicker")})  # fmt: skip
        out["path"] = "offline" if args.offline else "live"
        out["rtf"] = run["compute_s"] / duration
        out["config"] = es._config_dict(config)
    labeller: SpeakerLabeller = run["labeller"]
    metrics = meeting_metrics(run["events"], segments, duration, norm, labeller)
    out = {**metrics, **out}
    out.update(
        audio=args.audio, reference=args.reference, model=args.model, clock=args.clock,
        duration_s=duration, normalizer=norm_name, speaker_config=es._config_dict(speakers),
        wall_s=run["wall_s"],
        records=[r.__dict__ for r in labeller.records],
        captions=[{**cap.to_dict(), "emit_s": round(t, 3)} for t, cap in run["events"]],
    )  # fmt: skip
    Path(args.json).write_text(json.dumps(out, indent=1, default=es._json_default))
    png = Path(args.png) if args.png else Path(args.json).with_suffix(".png")
    title = (
        f"{Path(args.audio).name} ({out['path']})  DER {out['der']:.3f} (collar {COLLAR_S} s)  "
        f"cpWER {out['cpwer']:.3f}  stream WER {out['stream_wer']:.3f}  "
        f"labels {out['labels']} (reference {out['reference_speakers']})"
    )
    plot_speakers(png, segments, finals_of(run["events"]), out["label_map"], duration, title)
    keys = ("path", "der", "der_no_collar", "cpwer", "stream_wer", "cpwer_minus_stream_wer",
            "labels", "reference_speakers", "finals", "split_finals", "unlabelled_finals",
            "embed_ms_mean", "embed_ms_p95", "embed_ms_per_audio_s", "missed_s",
            "false_alarm_s", "confusion_s", "final_latency_p50", "final_latency_p95",
            "rtf")  # fmt: skip
    print(json.dumps({k: out.get(k) for k in keys}, default=es._json_default))
    print(f"wrote {args.json} and {png}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
