"""Offline file transcription: VAD-cut utterances, each decoded as one window.

The file is decoded as a stream (a long recording is never loaded whole), and `Transcription`
yields each final as soon as its utterance is decoded, so a caller can print it and append it
to its files at once: an interrupted run keeps everything done so far. Each utterance goes
through the same engine and the same hallucination guard as live captions; finals are
``Caption`` events, so every writer (SRT, WebVTT, JSONL, TXT) and the terminal share one path.
Each final carries its words' times in the file (``Caption.words``, ``word_timestamps``): JSONL
writes them, SRT and WebVTT time the cues of a long final by them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from streamcap.audio import iter_audio_chunks
from streamcap.audio.vad import make_vad
from streamcap.core.captions import Caption, CaptionEvent, CaptionLog
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.decode_types import DecodeResult, DecodeStats, DecodingOptions
from streamcap.core.prompting import join_prompt_ids
from streamcap.core.segmenter import (
    Event,
    Segmenter,
    SegmenterConfig,
    SpeechEnd,
    Utterance,
    collect_utterances,
)
from streamcap.core.text import GuardConfig, describe_drop, drop_reason
from streamcap.decoding.spec import MAX_PROMPT_TOKENS
from streamcap.runtime.engine import with_words
from streamcap.runtime.engine_api import InferenceEngine

__all__ = ["TranscribeOptions", "Transcription"]

log = logging.getLogger(__name__)

#: Longest audio one decode takes (Whisper's window).
_WINDOW = 30 * SAMPLE_RATE
#: Shorter utterances are clicks, not speech: not worth a decode.
_MIN_SAMPLES = SAMPLE_RATE // 10


@dataclass(frozen=True)
class TranscribeOptions:
    """How a file is transcribed: the decoding options, the segmenter that cuts utterances,
    and the guard that drops hallucinated finals (the live pipeline's, so both drop the same)."""

    decoding: DecodingOptions = DecodingOptions()
    segmenter: SegmenterConfig = SegmenterConfig()
    condition_on_previous: bool = False  # feed the previous utterance's text as a prompt
    prompt: str = ""  # the file's own prompt (`core.prompting`), before the previous text
    guard: GuardConfig = GuardConfig()
    word_timestamps: bool = True  # time each final's words (one more decoder pass each)
    #: with no ``decoding.language``: detect it once per file, from the first kept utterance
    #: (like whisper's CLI), and keep it; False ("auto-each"): every utterance detects its own
    lock_language: bool = True


class _Utterances:
    """The segmenter's events, joined into utterances as soon as each one ends.

    An utterance's events may span several pushes, and `collect_utterances` needs whole ones:
    events after the last `SpeechEnd` wait for the next push (at most one open utterance,
    bounded by ``max_utterance_s``).
    """

    def __init__(self) -> None:
        self._open: list[Event] = []

    def add(self, events: list[Event]) -> list[Utterance]:
        self._open.extend(events)
        ends = [i for i, ev in enumerate(self._open) if isinstance(ev, SpeechEnd)]
        if not ends:
            return []
        done, self._open = self._open[: ends[-1] + 1], self._open[ends[-1] + 1 :]
        return collect_utterances(done)


class Transcription:
    """One file's offline transcription: iterate for its finals, each as soon as it is decoded.

    ``stats`` is the decoder's running total and ``position_s`` the audio read so far; both are
    current whenever a final comes out or ``on_progress`` is called (after every second of
    audio, silence included, so a progress bar moves through a long pause too). ``drops``
    counts the utterances whose decode gave no final, by reason (`text.drop_reason`); each is
    also logged at INFO level. ``last_result`` is the decode behind the final just yielded
    (its tokens, ``avg_logprob`` and ``no_speech_prob``, which a `Caption` does not carry:
    openai-whisper's JSON writes them).
    """

    def __init__(
        self,
        engine: InferenceEngine,
        path: str | os.PathLike[str],
        options: TranscribeOptions | None = None,
        *,
        on_progress: Callable[[float], None] | None = None,
        stream: str = "file",
    ) -> None:
        self.engine = engine
        self.path = path
        self.options = options or TranscribeOptions()
        self.on_progress = on_progress
        self.stats = DecodeStats()
        self.position_s = 0.0
        self._log = CaptionLog(stream)
        self._previous: tuple[int, ...] = ()  # the last final's tokens (condition_on_previous)
        self._fixed = engine.text_to_ids(self.options.prompt) if self.options.prompt else ()
        self._segment = 0
        self._stream = stream
        self.drops: dict[str, int] = {}
        self.last_result: DecodeResult | None = None
        #: the file's language: the given one, or the one detected and kept (`lock_language`)
        self.language: str | None = self.options.decoding.language

    def __iter__(self) -> Iterator[Caption]:
        segmenter = Segmenter(self.options.segmenter, make_vad(self.options.segmenter))
        joiner = _Utterances()
        chunks = iter_audio_chunks(self.path, chunk_s=1.0)
        for events in _pushes(segmenter, chunks):
            for utt in joiner.add(events):
                yield from self._utterance(utt)
            self.position_s = segmenter.time
            if self.on_progress:
                self.on_progress(self.position_s)

    def _utterance(self, utt: Utterance) -> Iterator[Caption]:
        segment, self._segment = self._segment, self._segment + 1
        if len(utt.audio) < _MIN_SAMPLES:
            return
        opts = self.options
        for offset in range(0, len(utt.audio), _WINDOW):  # max_utterance_s keeps it to one
            window = utt.audio[offset : offset + _WINDOW]
            decoding = opts.decoding
            if self.language is not None:
                decoding = replace(decoding, language=self.language)
            previous = self._previous if opts.condition_on_previous else ()
            if self._fixed or previous:
                ids = join_prompt_ids(self._fixed, previous, MAX_PROMPT_TOKENS)
                decoding = replace(decoding, prompt_ids=ids)
            encoded = self.engine.encode(window)
            result = self.engine.decode(encoded, decoding)
            if opts.word_timestamps:
                result = with_words(self.engine, encoded, decoding, result)
            self.stats = self.stats + result.stats
            text = result.text.strip()
            start = utt.start + offset / SAMPLE_RATE
            end = min(utt.end, start + len(window) / SAMPLE_RATE)
            reason = drop_reason(result, opts.guard)
            if reason is not None:
                self.drops[reason] = self.drops.get(reason, 0) + 1
                log.info(
                    "stream %s: final #%d %.2f-%.2f s dropped (%s)",
                    self._stream, segment, start, end, describe_drop(reason, result),
                )  # fmt: skip
                continue
            self._previous = result.tokens
            if opts.lock_language and self.language is None and result.language:
                self.language = result.language
            # Each offline final stands alone: it commits exactly its own text.
            words = tuple(w.shifted(start) for w in result.words)  # the file's times
            self.last_result = result
            event = CaptionEvent("final", segment, text, start, end, len(text), 0.0, words=words)
            yield self._log.add(event)


def _pushes(
    segmenter: Segmenter, chunks: Iterator[npt.NDArray[np.float32]]
) -> Iterator[list[Event]]:
    """The segmenter's events after each chunk, then those of the end of the stream."""
    for chunk in chunks:
        yield segmenter.push(chunk)
    yield segmenter.flush()
