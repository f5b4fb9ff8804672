"""Evaluate speaker labels from one microphone on a long recording with reference speakers.

    python scripts/eval_meeting.py --audio A.wav --reference R.json --json OUT.json \
        [--model base] [--clock simulated|real] [--png OUT.png] [--speaker-set NAME=VALUE]
    python scripts/eval_meeting.py --audio A.wav --reference R.json --json OUT.json \
        --offline              # `streamcap transcribe --speakers auto`'s path instead
    python scripts/eval_meeting.py --audio A.wav --reference R.json --json OUT.json \
        --replay RUN.json      # relabel the finals of an earlier run (no Whisper: tuning)
    ... --speaker-model campplus   # the speaker embedding (default ge2e; streamcap.speakers)

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
- partial_*, voice_changes, naming_delay_s_*, naming_lag_s_*, never_named: the names on the
  partials, defined once in `streamcap.evaluation.partial_names` (seconds on screen under a
  wrong name, unnamed, and the delay from a change of voice to its right name), as shown now
  (an unnamed partial on its own line) and before (``*_prev``: under the previous final's
  name); partial_embed_ms_*: the labeller's added time per partial.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from streamcap.audio.file import load_audio
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.speakers import SpeakerConfig, config_for
from streamcap.evaluation.live_run import warm_up
from streamcap.evaluation.meeting_metrics import COLLAR_S, finals_of, meeting_metrics
from streamcap.evaluation.meeting_runs import replay_captions, run_meeting, run_offline
from streamcap.evaluation.metrics import Segments, evaluate
from streamcap.evaluation.normalize import Normalizer, make_normalizer
from streamcap.evaluation.output import config_dict, json_default
from streamcap.evaluation.plots import plot_speakers
from streamcap.evaluation.settings import build_config, speaker_config
from streamcap.runtime.engine import Engine

SR = SAMPLE_RATE

#: the figures printed as one JSON line (the JSON file holds everything)
BRIEF = ("path", "der", "der_no_collar", "cpwer", "stream_wer", "cpwer_minus_stream_wer",
         "labels", "reference_speakers", "finals", "split_finals", "unlabelled_finals",
         "embed_ms_mean", "embed_ms_p95", "embed_ms_per_audio_s", "missed_s",
         "false_alarm_s", "confusion_s", "final_latency_p50", "final_latency_p95",
         "rtf", "partial_wrong_name_s", "partial_wrong_name_s_prev", "partial_unnamed_s",
         "partial_shown_s", "voice_changes", "naming_delay_s_p50", "naming_delay_s_p95",
         "named_within_1_5s", "never_named", "naming_lag_s_p50", "naming_lag_s_p95",
         "partial_embed_ms_mean", "partial_embed_ms_p95")  # fmt: skip


def parser() -> argparse.ArgumentParser:
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
    ap.add_argument("--speaker-model", default="ge2e", choices=("ge2e", "campplus"),
                    help="speaker embedding model (streamcap.speakers.registry)")  # fmt: skip
    ap.add_argument("--speaker-set", action="append", default=[], metavar="NAME=VALUE",
                    help="override a SpeakerConfig field (repeatable)")  # fmt: skip
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)

    from streamcap.speakers.registry import load_encoder

    # the model's calibrated thresholds, with the --speaker-set overrides on them
    given = speaker_config(args.speaker_set)
    names = {item.partition("=")[0].strip() for item in args.speaker_set}
    speakers = replace(config_for(args.speaker_model), **{n: getattr(given, n) for n in names})
    norm, norm_name = make_normalizer()
    audio = load_audio(args.audio)
    duration = len(audio) / SR
    segments: Segments = json.loads(Path(args.reference).read_text())["segments"]
    encoder = load_encoder(args.speaker_model)
    encoder.embed_partials(audio[: 2 * SR])  # first calls allocate: keep them out of the measure
    if args.replay and args.offline:
        raise SystemExit("--replay relabels an earlier run's finals: not with --offline")
    run, out = labelled_run(args, audio, segments, norm, speakers, encoder)
    labeller = run["labeller"]
    metrics = meeting_metrics(run["events"], segments, duration, norm, labeller)
    out = {**metrics, **out}
    out.update(
        audio=args.audio, reference=args.reference, model=args.model, clock=args.clock,
        duration_s=duration, normalizer=norm_name, speaker_config=config_dict(speakers),
        speaker_model=args.speaker_model,
        wall_s=run["wall_s"],
        records=[r.__dict__ for r in labeller.records],
        partial_records=[r.__dict__ for r in labeller.partial_records],
        captions=[{**cap.to_dict(), "emit_s": round(t, 3)} for t, cap in run["events"]],
    )  # fmt: skip
    Path(args.json).write_text(json.dumps(out, indent=1, default=json_default))
    png = Path(args.png) if args.png else Path(args.json).with_suffix(".png")
    title = (
        f"{Path(args.audio).name} ({out['path']})  DER {out['der']:.3f} (collar {COLLAR_S} s)  "
        f"cpWER {out['cpwer']:.3f}  stream WER {out['stream_wer']:.3f}  "
        f"labels {out['labels']} (reference {out['reference_speakers']})"
    )
    plot_speakers(png, segments, finals_of(run["events"]), out["label_map"], duration, title)
    print(json.dumps({k: out.get(k) for k in BRIEF}, default=json_default))
    print(f"wrote {args.json} and {png}", file=sys.stderr)
    return 0


def labelled_run(
    args: argparse.Namespace,
    audio: np.ndarray,
    segments: Segments,
    norm: Normalizer,
    speakers: SpeakerConfig,
    encoder: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run the command line asks for (a replay of an earlier run's captions, the offline
    path or the live pipeline) and what the report says of it beyond the speaker figures."""
    out: dict[str, Any] = {}
    if args.replay:
        earlier = json.loads(Path(args.replay).read_text())
        source = earlier.get("source_captions") or earlier["captions"]
        out["replayed"] = args.replay
        out["path"] = earlier.get("path", "live")
        return replay_captions(audio, source, speakers, encoder), out
    duration = len(audio) / SR
    config = build_config(args.language, args.set)
    engine = Engine(args.model, threads=args.threads, precision=args.precision)
    warm_up(engine, audio, config.language)
    if args.offline:
        run = run_offline(engine, args.audio, config, speakers, encoder)
        out["source_captions"] = [{**c.to_dict(), "emit_s": round(t, 3)}
                                  for t, c in run["source"]]  # fmt: skip
    else:
        run = run_meeting(engine, audio, config, speakers, encoder, args.clock, args.chunk,
                          args.timer)  # fmt: skip
        stream = evaluate(run, segments, duration, norm)
        out.update({k: stream[k] for k in ("final_latency_p50", "final_latency_p95", "flicker")})
    out["path"] = "offline" if args.offline else "live"
    out["rtf"] = run["compute_s"] / duration
    out["config"] = config_dict(config)
    return run, out


if __name__ == "__main__":
    raise SystemExit(main())
