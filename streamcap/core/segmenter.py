"""Speech segmenter: a pure state machine that cuts a 16 kHz stream into utterances.

Frames in, events out: no threads, no clock, no I/O, so the same code serves file transcription and
live streams, and tests replay hours of audio in seconds. Times are audio seconds since the stream's
start, counted from the samples pushed.

Consumer contract: an utterance's audio is the `SpeechAudio` chunks between its `SpeechStart` and
`SpeechEnd`, cut at `SpeechEnd.end`. The cut only matters after a `max_length` split: audio past the
split point was already sent live, and is sent again as the start of the next utterance.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.segmenter_states import SegmenterEvent, SegmenterState, segmenter_machine

__all__ = [
    "Segmenter",
    "SegmenterConfig",
    "SpeechAudio",
    "SpeechEnd",
    "SpeechStart",
    "Utterance",
    "VadFn",
    "segment_audio",
]

VadFn = Callable[[bytes, int], bool]
EndReason = Literal["silence", "max_length", "flush"]
_FLOOR_DB = -120.0
_BLOCK_FRAMES = 1024  # frames analysed per numpy batch: bounds memory on hour-long pushes


@dataclass(frozen=True)
class SegmenterConfig:
    """Segmenter tuning. Durations are rounded to whole frames.

    Defaults tuned on 65 dev clips, a room-noise clip and a 3-minute meeting with hum and brown
    noise: every speech frame covered, no utterance on the noise, 34/34 meeting turns covered,
    none cut inside, no utterance across a pause over 1 s, final ~0.64 s after the last word.
    - aggressiveness: webrtcvad mode 0-3; 2 keeps quiet word onsets, the energy gate handles noise.
    - preroll_ms: audio kept before the detected onset, so soft first consonants reach Whisper.
    - start_window_ms / start_ratio: speech starts once this share of the window's frames is
      voiced; a window rather than one frame ignores clicks.
    - hangover_ms: silence that ends an utterance. Long enough to bridge commas and breaths,
      short enough that a final caption follows a sentence quickly.
    - tail_ms: silence kept after the last voiced frame; `SpeechEnd.end` is last voice + tail, not
      + hangover, so latency measured from it is honest.
    - min_speech_ms: voiced audio an utterance needs before `SpeechStart`; shorter bursts are noise.
    - max_utterance_s / split_search_s: a longer monologue is split at its quietest point within
      the last `split_search_s` before the limit (a Whisper window is 30 s).
    - min_rms_dbfs / gate_band_hz: a frame counts as voiced only if its RMS in the speech band
      reaches this level (dBFS, a full-scale sine reads -3). webrtcvad fires on near-silent room
      noise, and rumble, breath pops and mains hum sit below 300 Hz. None disables the gate.
    """

    aggressiveness: int = 2
    frame_ms: int = 30
    preroll_ms: int = 300
    start_window_ms: int = 240
    start_ratio: float = 0.5
    hangover_ms: int = 600
    tail_ms: int = 210
    min_speech_ms: int = 240
    max_utterance_s: float = 20.0
    split_search_s: float = 5.0
    min_rms_dbfs: float | None = -55.0
    gate_band_hz: tuple[float, float] = (300.0, 4000.0)
    #: the voice detector, by its name in the runtime's registry (`streamcap.audio.vad`:
    #: webrtc, silero, or one registered there); the segmenter is handed the detector itself
    vad: str = "webrtc"
    silero_threshold: float = 0.5

    def __post_init__(self) -> None:
        if self.aggressiveness not in (0, 1, 2, 3):
            raise ValueError("aggressiveness must be 0, 1, 2 or 3")
        if self.frame_ms not in (10, 20, 30):
            raise ValueError("webrtcvad takes 10, 20 or 30 ms frames")
        if not 0.0 < self.start_ratio <= 1.0:
            raise ValueError("start_ratio must be in (0, 1]")
        if min(self.preroll_ms, self.tail_ms, self.min_speech_ms) < 0:
            raise ValueError("durations must be >= 0")
        if self.start_window_ms < self.frame_ms or self.hangover_ms < self.frame_ms:
            raise ValueError("start_window_ms and hangover_ms must cover at least one frame")
        if self.tail_ms > self.hangover_ms:
            raise ValueError("tail_ms must not exceed hangover_ms")
        if not 0.0 < self.split_search_s < self.max_utterance_s:
            raise ValueError("need 0 < split_search_s < max_utterance_s")
        if self.max_utterance_s * 1000 < 4 * (self.preroll_ms + self.hangover_ms):
            raise ValueError("max_utterance_s is too short for the pre-roll and hang-over")
        lo, hi = self.gate_band_hz
        if not 0.0 <= lo < hi <= SAMPLE_RATE / 2:
            raise ValueError("gate_band_hz must be (low, high) within 0-8000 Hz")


@dataclass(frozen=True)
class SpeechStart:
    """An utterance begins at `start` (pre-roll included)."""

    start: float


@dataclass(frozen=True, eq=False)
class SpeechAudio:
    """The next piece of the open utterance's audio, sent as soon as it is known to belong to it.

    `silent_tail` is how much of its end is unvoiced (seconds; the whole piece if none of it is
    voiced): the policy sees a pause begin before the segmenter ends the utterance.
    """

    samples: np.ndarray
    start: float
    end: float
    silent_tail: float = 0.0


@dataclass(frozen=True)
class SpeechEnd:
    """The utterance that began at `start` is over; its audio stops at `end`."""

    start: float
    end: float
    reason: EndReason


Event = SpeechStart | SpeechAudio | SpeechEnd


@dataclass(frozen=True, eq=False)
class Utterance:
    """One segmented utterance for offline use: `audio` spans exactly [start, end)."""

    start: float
    end: float
    audio: np.ndarray


class _Frame:
    __slots__ = ("start", "samples", "voiced", "level")

    def __init__(self, start: int, samples: np.ndarray, voiced: bool, level: float) -> None:
        self.start = start  # sample index since the stream's start
        self.samples = samples
        self.voiced = voiced
        self.level = level  # speech-band RMS, dBFS

    @property
    def end(self) -> int:
        return self.start + len(self.samples)


class Segmenter:
    """webrtcvad + energy gate state machine: silence -> pending -> speech -> silence (the
    table: `core.segmenter_states`).

    `pending` holds a triggered candidate until it has `min_speech_ms` of voice, so noise bursts
    never reach the decoder. `vad` replaces webrtcvad (tests drive it with synthetic frames;
    `streamcap.audio.vad.make_vad` builds the one `config.vad` names).
    """

    def __init__(self, config: SegmenterConfig | None = None, vad: VadFn | None = None) -> None:
        self.config = c = config or SegmenterConfig()
        if vad is None:
            import webrtcvad

            vad = webrtcvad.Vad(c.aggressiveness).is_speech
        self._vad = vad
        self._flen = SAMPLE_RATE * c.frame_ms // 1000

        def frames(ms: float) -> int:
            return round(ms / c.frame_ms)

        self._n_window = max(1, frames(c.start_window_ms))
        self._n_trigger = max(1, math.ceil(c.start_ratio * self._n_window - 1e-9))
        self._n_preroll = frames(c.preroll_ms)
        self._n_hang = max(1, frames(c.hangover_ms))
        self._n_tail = min(frames(c.tail_ms), self._n_hang)
        self._n_min_speech = max(1, frames(c.min_speech_ms))
        self._n_max = int(c.max_utterance_s * 1000 // c.frame_ms)
        self._n_search = max(1, min(self._n_max - 1, frames(c.split_search_s * 1000)))
        self._hann = np.hanning(self._flen).astype(np.float32)
        freqs = np.fft.rfftfreq(self._flen, 1.0 / SAMPLE_RATE)
        self._band = (freqs >= c.gate_band_hz[0]) & (freqs <= c.gate_band_hz[1])
        self._norm = 2.0 / (self._flen**2 * float(np.mean(self._hann.astype(np.float64) ** 2)))
        self._leftover = np.zeros(0, dtype=np.float32)
        self._pos = 0  # sample index where the next frame starts
        self._pending_audio: list[_Frame] = []
        self._machine = segmenter_machine()
        self._last_end: int | None = None  # sample where the last utterance ended
        #: Where this microphone heard no speech, as of the last `push` or `flush` (`_quiet`).
        self.quiet: tuple[float, float] = (-math.inf, 0.0)
        self._reset()

    @property
    def time(self) -> float:
        """Audio seconds analysed so far (a partial frame waits for more samples)."""
        return self._pos / SAMPLE_RATE

    def _quiet(self) -> tuple[float, float]:
        """(from, to), seconds: no utterance overlaps that span, nor will one (-inf: none
        before). An utterance yet to start begins no earlier than the oldest frame kept for its
        pre-roll and start window; an open one (or a candidate) from its first frame. A room's
        cross-talk check reads it from another thread: kept as one tuple, set at each call's end."""
        last = -math.inf if self._last_end is None else self._last_end / SAMPLE_RATE
        if self._machine.state is not SegmenterState.SILENCE and self._utt:
            to = self._utt[0].start
        else:
            to = self._hist[0].start if self._hist else self._pos
        return last, max(last, to / SAMPLE_RATE)

    @property
    def in_speech(self) -> bool:
        """True while an utterance has started and not yet ended."""
        return self._machine.state is SegmenterState.SPEECH

    def push(self, samples: np.ndarray) -> list[Event]:
        """Feed mono float32 samples in [-1, 1], any chunk size; return the events they complete."""
        x = np.array(samples, dtype=np.float32)  # a copy: callers may reuse their buffer
        if x.ndim != 1:
            raise ValueError("expected mono (1-D) samples")
        buf = np.concatenate([self._leftover, x]) if self._leftover.size else x
        n = len(buf) // self._flen
        out: list[Event] = []
        for b0 in range(0, n, _BLOCK_FRAMES):
            block = buf[b0 * self._flen : min(n, b0 + _BLOCK_FRAMES) * self._flen]
            frames = block.reshape(-1, self._flen)
            levels = self._levels(frames)
            pcm = np.rint(np.clip(frames, -1.0, 1.0) * 32767.0).astype("<i2")
            gate = self.config.min_rms_dbfs
            for i in range(len(frames)):
                # Always ask the VAD, so webrtcvad's adaptive noise model sees every frame.
                voiced = bool(self._vad(pcm[i].tobytes(), SAMPLE_RATE))
                voiced = voiced and (gate is None or levels[i] >= gate)
                self._step(_Frame(self._pos, frames[i], voiced, float(levels[i])), out)
                self._pos += self._flen
        self._leftover = buf[n * self._flen :].copy()
        self._flush_audio(out)
        self.quiet = self._quiet()
        return out

    def flush(self) -> list[Event]:
        """End of stream: close any open utterance (reason "flush") and forget the history."""
        out: list[Event] = []
        if self._leftover.size:
            rest = self._leftover
            padded = np.zeros((1, self._flen), dtype=np.float32)
            padded[0, : len(rest)] = rest
            self._step(_Frame(self._pos, rest, False, float(self._levels(padded)[0])), out)
            self._pos += len(rest)
            self._leftover = np.zeros(0, dtype=np.float32)
        if self._machine.state is SegmenterState.SILENCE:
            self._machine.fire(SegmenterEvent.FLUSH)
        else:
            self._end("flush", out)
        self._flush_audio(out)
        self._reset()
        self.quiet = self._quiet()
        return out

    # -- state machine -------------------------------------------------------------------------

    def _reset(self) -> None:
        """Forget the utterance (the state is the machine's)."""
        self._hist: deque[_Frame] = deque(maxlen=self._n_preroll + self._n_window)
        self._window: deque[bool] = deque(maxlen=self._n_window)
        self._utt: list[_Frame] = []
        self._sent = 0  # frames of _utt already given downstream
        self._last_voiced = -1  # index in _utt
        self._n_voiced = 0

    def _levels(self, frames: np.ndarray) -> np.ndarray:
        """Speech-band RMS of each frame in dBFS (Hann window, Parseval)."""
        spec = np.fft.rfft(frames * self._hann, axis=1)
        power = (spec.real**2 + spec.imag**2)[:, self._band].sum(axis=1) * self._norm
        levels: np.ndarray = np.maximum(10.0 * np.log10(power + 1e-20), _FLOOR_DB)
        return levels

    def _step(self, f: _Frame, out: list[Event]) -> None:
        if self._machine.state is SegmenterState.SILENCE:
            self._hist.append(f)
            self._window.append(f.voiced)
            if f.voiced and sum(self._window) >= self._n_trigger:
                self._trigger(out)
            return
        self._utt.append(f)
        if f.voiced:
            self._last_voiced = len(self._utt) - 1
            self._n_voiced += 1
        self._update(out)

    def _trigger(self, out: list[Event]) -> None:
        hist = list(self._hist)
        first_in_window = len(hist) - len(self._window)
        onset = next(i for i in range(first_in_window, len(hist)) if hist[i].voiced)
        self._machine.fire(SegmenterEvent.TRIGGER)
        self._open(hist[max(0, onset - self._n_preroll) :])
        self._update(out)

    def _open(self, frames: list[_Frame]) -> None:
        self._hist.clear()
        self._window.clear()
        self._utt = frames
        self._sent = 0
        voiced = [i for i, f in enumerate(frames) if f.voiced]
        self._last_voiced = voiced[-1] if voiced else -1
        self._n_voiced = len(voiced)

    def _update(self, out: list[Event]) -> None:
        """After the utterance grew: confirm it, end it, split it, or send what is certain."""
        state = self._machine.state
        if state is SegmenterState.PENDING and self._n_voiced >= self._n_min_speech:
            state = self._machine.fire(SegmenterEvent.CONFIRM)
            out.append(SpeechStart(self._utt[0].start / SAMPLE_RATE))
        if len(self._utt) - 1 - self._last_voiced >= self._n_hang:
            self._end("silence", out)
        elif state is SegmenterState.SPEECH:
            if len(self._utt) >= self._n_max:
                self._split(out)
            else:
                # Frames within the tail of the last voice belong to the utterance whatever
                # comes next; later silent frames wait until speech resumes.
                self._send(self._last_voiced + 1 + self._n_tail)

    def _end(self, reason: EndReason, out: list[Event]) -> None:
        utt = self._utt
        stop = min(len(utt), self._last_voiced + 1 + self._n_tail)
        speech = self._machine.state is SegmenterState.SPEECH
        if reason == "flush":
            self._machine.fire(SegmenterEvent.FLUSH)
        else:
            self._machine.fire(SegmenterEvent.END if speech else SegmenterEvent.DISCARD)
        if speech:
            self._send(stop)
            self._flush_audio(out)
            self._last_end = utt[stop - 1].end
            end = self._last_end / SAMPLE_RATE
            out.append(SpeechEnd(utt[0].start / SAMPLE_RATE, end, reason))
        else:  # a dropped candidate: its voiced frames must not trigger again
            stop = self._last_voiced + 1
        self._back_to_silence(utt[stop:])

    def _back_to_silence(self, frames: list[_Frame]) -> None:
        self._reset()
        for f in frames[-(self._n_preroll + self._n_window) :]:
            self._hist.append(f)
            self._window.append(f.voiced)

    def _split(self, out: list[Event]) -> None:
        """Cut a too-long utterance at its quietest point; what follows starts the next one."""
        utt = self._utt
        if len(utt) - 1 - self._last_voiced > self._n_tail:  # already in a pause: end it here
            self._end("max_length", out)
            return
        k = self._quietest(max(1, len(utt) - self._n_search))
        head_voiced = [i for i in range(k) if utt[i].voiced]
        stop = min(k, head_voiced[-1] + 1 + self._n_tail) if head_voiced else k
        self._send(stop)
        self._flush_audio(out)
        self._last_end = utt[stop - 1].end
        end = self._last_end / SAMPLE_RATE
        out.append(SpeechEnd(utt[0].start / SAMPLE_RATE, end, "max_length"))
        rest = utt[k:]
        if not any(f.voiced for f in rest):
            self._machine.fire(SegmenterEvent.END)
            self._back_to_silence(rest)
            return
        self._machine.fire(SegmenterEvent.SPLIT)
        self._open(rest)
        out.append(SpeechStart(rest[0].start / SAMPLE_RATE))
        self._send(self._last_voiced + 1 + self._n_tail)

    def _quietest(self, lo: int) -> int:
        """Index in [lo, len) of the quietest ~150 ms; unvoiced preferred, mid-pause on ties."""
        utt = self._utt
        levels = np.array([f.level for f in utt])
        voiced = np.array([f.voiced for f in utt])
        smooth = np.convolve(levels, np.ones(5), "same") / np.convolve(
            np.ones(len(levels)), np.ones(5), "same"
        )
        idx = np.arange(len(utt))
        voiced_idx = idx[voiced]
        if voiced_idx.size:  # distance to the nearest voiced frame, to find the middle of pauses
            pos = np.clip(np.searchsorted(voiced_idx, idx), 1, voiced_idx.size) - 1
            nxt = np.minimum(pos + 1, voiced_idx.size - 1)
            dist = np.minimum(np.abs(idx - voiced_idx[pos]), np.abs(idx - voiced_idx[nxt]))
        else:
            dist = np.zeros(len(utt), dtype=np.int64)
        cand = idx[lo:]
        if (~voiced[cand]).any():
            cand = cand[~voiced[cand]]
        # Frames within 3 dB of the quietest are equally good: take the one farthest from voice.
        near = cand[smooth[cand] <= smooth[cand].min() + 3.0]
        return int(near[np.argmax(dist[near])])

    def _send(self, stop: int) -> None:
        stop = min(stop, len(self._utt))
        if stop > self._sent:
            self._pending_audio.extend(self._utt[self._sent : stop])
            self._sent = stop

    def _flush_audio(self, out: list[Event]) -> None:
        """Coalesce the frames sent during this call into one `SpeechAudio` event."""
        if self._pending_audio:
            fr = self._pending_audio
            samples = np.concatenate([f.samples for f in fr])
            voiced = [f.end for f in fr if f.voiced]
            end = fr[-1].end / SAMPLE_RATE
            start = fr[0].start / SAMPLE_RATE
            silent = end - voiced[-1] / SAMPLE_RATE if voiced else end - start
            out.append(SpeechAudio(samples, start, end, silent))
            self._pending_audio = []


def collect_utterances(events: list[Event]) -> list[Utterance]:
    """Join events into utterances, cutting each at its `SpeechEnd.end` (see module docstring)."""
    result: list[Utterance] = []
    chunks: list[np.ndarray] = []
    for ev in events:
        if isinstance(ev, SpeechStart):
            chunks = []
        elif isinstance(ev, SpeechAudio):
            chunks.append(ev.samples)
        else:
            n = round((ev.end - ev.start) * SAMPLE_RATE)
            audio = np.concatenate(chunks)[:n] if chunks else np.zeros(0, dtype=np.float32)
            result.append(Utterance(ev.start, ev.end, audio))
            chunks = []
    return result


def segment_audio(
    audio: np.ndarray, config: SegmenterConfig | None = None, vad: VadFn | None = None
) -> list[Utterance]:
    """Offline convenience: run the same state machine over a whole 16 kHz mono array."""
    seg = Segmenter(config, vad)
    return collect_utterances(seg.push(audio) + seg.flush())
