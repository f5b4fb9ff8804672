"""The runs scripts/eval_meeting.py scores: live, offline, or the labeller alone on a replay.

- `run_meeting`: the live pipeline (`live_run.run_stream`) with the `SpeakerLabeller` stage;
- `run_offline`: ``streamcap transcribe --speakers auto``'s path (`Transcription`'s finals,
  each labelled by `FileLabeller`);
- `replay_captions`: the labeller alone on an earlier run's captions, each fed when it was
  emitted (tuning the labeller on the same finals in seconds, no Whisper).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from streamcap.core.captions import Caption, CaptionEvent, CaptionLog
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.decode_types import WordTiming
from streamcap.core.live_config import LiveConfig
from streamcap.core.speakers import SpeakerConfig
from streamcap.evaluation.live_run import run_stream
from streamcap.runtime.engine import Engine, options_for
from streamcap.runtime.file_labeller import FileLabeller
from streamcap.runtime.labeller import PAD_S, SpeakerLabeller

SR = SAMPLE_RATE


def run_meeting(
    engine: Engine,
    audio: np.ndarray,
    config: LiveConfig,
    speakers: SpeakerConfig,
    encoder: Any,
    clock_kind: str,
    chunk_s: float,
    timer: str = "wall",
) -> dict[str, Any]:
    """The live pipeline with the labeller stage (`live_run.run_stream`, whose compute
    counts the segmenter and policy too)."""
    run = run_stream(
        engine, audio, config, clock_kind, chunk_s, timer,
        stage=lambda clock: SpeakerLabeller(encoder, speakers, clock=clock),
    )  # fmt: skip
    run["labeller"] = run["stage"]
    return run


def run_offline(
    engine: Engine, path: str, config: LiveConfig, speakers: SpeakerConfig, encoder: Any
) -> dict[str, Any]:
    """`streamcap transcribe --speakers auto`: the file's offline finals (`Transcription`, the
    stream's decoding options, segmenter and guard, words timed), each labelled by
    `FileLabeller` as it comes. A caption's ``emit_s`` is the audio read when it was labelled
    (its end + `PAD_S`), so a replay feeds the labeller what it had."""
    from streamcap.runtime.transcribe import TranscribeOptions, Transcription

    opts = TranscribeOptions(
        decoding=options_for(engine, config.language, config.task),
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


def caption_of(row: dict[str, Any]) -> CaptionEvent:
    """A caption of a run's JSON as the event the labeller saw (its speaker and the stage's
    renumbering dropped)."""
    return CaptionEvent(
        row["type"], row["segment"], row["text"], row["start"], row["end"],
        row["committed_chars"], row["latency_ms"],
        tuple(WordTiming(w["word"], w["start"], w["end"], w["probability"])
              for w in row.get("words", ())),
    )  # fmt: skip


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
        for out in labeller.process(caption_of(row)):
            events.append((row["emit_s"], sink.add(out)))
    return {"events": events, "labeller": labeller, "wall_s": time.perf_counter() - wall0}
