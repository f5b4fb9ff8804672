"""Offline file transcription: VAD-cut utterances, each decoded as one window.

The file is decoded in a stream (a long recording is never loaded whole); each utterance goes
through the same engine as live captions. Finals come out as ``Caption`` events so every
writer (SRT, WebVTT, JSONL, TXT) and the terminal share one path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from streamcap.audio import iter_audio_chunks
from streamcap.core.captions import Caption, CaptionLog
from streamcap.core.segmenter import Segmenter, SegmenterConfig, SpeechAudio, SpeechEnd
from streamcap.core.text import GuardConfig, is_hallucination
from streamcap.decoding.options import DecodeStats, DecodingOptions
from streamcap.runtime.engine import Engine

SR = 16000


@dataclass(frozen=True)
class TranscribeOptions:
    decoding: DecodingOptions = DecodingOptions()
    segmenter: SegmenterConfig = SegmenterConfig()
    condition_on_previous: bool = False  # feed the previous utterance's text as a prompt
    guard: GuardConfig = GuardConfig()  # the live pipeline's guard, so both drop the same


def _utterances(
    path: str | os.PathLike[str], config: SegmenterConfig
) -> Iterator[tuple[float, float, np.ndarray, float]]:
    """(start, end, audio, audio seconds read so far) for each utterance, streaming."""
    segmenter = Segmenter(config)
    pieces: list[np.ndarray] = []
    piece_start: float | None = None

    def handle(events: list) -> Iterator[tuple[float, float, np.ndarray, float]]:
        nonlocal pieces, piece_start
        for ev in events:
            if isinstance(ev, SpeechAudio):
                if piece_start is None:
                    piece_start = ev.start
                pieces.append(ev.samples)
            elif isinstance(ev, SpeechEnd):
                audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
                start = piece_start if piece_start is not None else ev.start
                keep = max(0, int(round((ev.end - start) * SR)))
                yield ev.start, ev.end, audio[:keep], segmenter.time
                pieces, piece_start = [], None

    for chunk in iter_audio_chunks(path, chunk_s=1.0):
        yield from handle(segmenter.push(chunk))
    yield from handle(segmenter.flush())


def transcribe_file(
    engine: Engine,
    path: str | os.PathLike[str],
    options: TranscribeOptions | None = None,
    on_progress: Callable[[float], None] | None = None,
    stream: str = "file",
) -> tuple[list[Caption], DecodeStats]:
    """Transcribe a file into final captions with utterance timestamps."""
    opts = options or TranscribeOptions()
    log = CaptionLog(stream)
    stats = DecodeStats()
    previous: tuple[int, ...] = ()
    captions: list[Caption] = []
    committed = 0
    for segment, (start, end, audio, position) in enumerate(_utterances(path, opts.segmenter)):
        if on_progress:
            on_progress(position)
        if len(audio) < SR // 10:
            continue
        for offset in range(0, len(audio), 30 * SR):  # max_utterance_s keeps this to one pass
            window = audio[offset : offset + 30 * SR]
            decoding = opts.decoding
            if opts.condition_on_previous and previous:
                decoding = DecodingOptions(**{**decoding.__dict__, "prompt_ids": previous})
            result = engine.transcribe(window, decoding)
            stats.add(result.stats)
            text = result.text.strip()
            if not text or is_hallucination(result, opts.guard):
                continue
            previous = result.tokens
            committed += len(text) + (1 if committed else 0)
            w_start = start + offset / SR
            w_end = min(end, w_start + len(window) / SR)
            captions.append(log.emit("final", segment, text, w_start, w_end, committed, 0.0))
    return captions, stats
