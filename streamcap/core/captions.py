"""Caption events and the one sequencer (`CaptionLog`); the file formats are `streamcap.formats`.

A `Caption` is exactly one event of the wire protocol (docs/design.md, "The protocol's
shape"); `CaptionLog` numbers events and keeps what a reconnecting viewer needs to rebuild
its screen.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from streamcap.core.decode_types import WordTiming

__all__ = ["Caption", "CaptionEvent", "CaptionLog"]

CaptionType = Literal["partial", "final"]
CAPTION_TYPES: tuple[str, ...] = ("partial", "final")


@dataclass(frozen=True)
class CaptionEvent:
    """A caption as the policy makes it, not yet numbered: the sink's `CaptionLog` gives it its
    stream, `seq` and epoch (`CaptionLog.add`), so a stream has exactly one sequence."""

    type: CaptionType
    segment: int
    text: str
    start: float
    end: float
    committed_chars: int = 0
    latency_ms: float = 0.0
    #: a final's words with their stream times (empty when not timed; never on partials)
    words: tuple[WordTiming, ...] = ()
    #: who spoke: a room publisher's name or a voice label ("Speaker 2"); "" when unknown
    speaker: str = ""
    #: a partial's words heard after `text` that it does not show (held back, or not yet
    #: agreed on: they may still change; `PolicyConfig.tentative_holdback_words`): for a viewer
    #: that follows the voice word by word. "" on finals.
    tentative: str = ""
    #: how loud its microphone heard it (`core.crosstalk.speech_level_db` of its audio, dB full
    #: scale; None: not measured): a room tells a voice from its copy in another participant's
    #: microphone by it. Not on the wire.
    level_db: float | None = None

    def shifted(self, segments: int, seconds: float) -> CaptionEvent:
        """The same event with segment numbers and times moved on (a later publisher session
        of a stream continues after the earlier ones)."""
        return replace(
            self, segment=self.segment + segments, start=self.start + seconds,
            end=self.end + seconds, words=tuple(w.shifted(seconds) for w in self.words),
        )  # fmt: skip


@dataclass(frozen=True)
class Caption:
    """One caption event; the field order is the wire JSON's key order."""

    type: CaptionType
    stream: str
    seq: int
    segment: int
    text: str
    start: float
    end: float
    committed_chars: int
    latency_ms: float
    #: The caption log's identity (a server sets it; see `CaptionLog`); "" is left off the wire.
    epoch: str = ""
    #: A final's timed words (`WordTiming`, stream seconds); left off the wire when empty.
    words: tuple[WordTiming, ...] = ()
    #: Who spoke (`CaptionEvent.speaker`); left off the wire when "".
    speaker: str = ""
    #: A partial's words after `text` it does not show yet (`CaptionEvent.tentative`); left
    #: off the wire when "".
    tentative: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The wire JSON object; times rounded to milliseconds (no false precision on the wire)."""
        d: dict[str, Any] = {
            "type": self.type,
            "stream": self.stream,
            "seq": self.seq,
            "segment": self.segment,
            "text": self.text,
            "start": round(self.start, 3),
            "end": round(self.end, 3),
            "committed_chars": self.committed_chars,
            "latency_ms": round(self.latency_ms, 1),
        }
        if self.epoch:
            d["epoch"] = self.epoch
        if self.words:
            d["words"] = [w.as_dict() for w in self.words]
        if self.speaker:
            d["speaker"] = self.speaker
        if self.tentative:
            d["tentative"] = self.tentative
        return d

    def to_json(self) -> str:
        """Compact UTF-8-friendly JSON text frame."""
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Caption:
        """Inverse of `to_dict` (e.g. reading a JSONL file back); ValueError on bad input."""
        try:
            kind = d["type"]
            if kind not in CAPTION_TYPES:
                raise ValueError(f"caption type must be 'partial' or 'final', got {kind!r}")
            return cls(
                type=kind,
                stream=str(d["stream"]),
                seq=int(d["seq"]),
                segment=int(d["segment"]),
                text=str(d["text"]),
                start=float(d["start"]),
                end=float(d["end"]),
                committed_chars=int(d["committed_chars"]),
                latency_ms=float(d["latency_ms"]),
                epoch=str(d.get("epoch", "")),
                words=_words_from(d.get("words", ())),
                speaker=str(d.get("speaker", "")),
                tentative=str(d.get("tentative", "")),
            )
        except KeyError as e:
            raise ValueError(f"caption is missing field {e.args[0]!r}") from None
        except TypeError as e:
            raise ValueError(f"caption has a field of the wrong type: {e}") from None


def _words_from(items: Any) -> tuple[WordTiming, ...]:
    """`words` of a wire caption (a list of ``{word, start, end, probability}``)."""
    if not isinstance(items, (list, tuple)):
        raise ValueError("caption words must be a list")
    return tuple(
        WordTiming(str(w["word"]), float(w["start"]), float(w["end"]), float(w["probability"]))
        for w in items
    )


# --------------------------------------------------------------------------- log


class CaptionLog:
    """Per-stream sequencer and replay store (not thread-safe: one event loop owns it).

    Stores every final and, per segment, only the latest partial that no final has superseded:
    replaying those in `seq` order rebuilds the same screen a live viewer has. At most
    `max_finals` finals are kept in memory (oldest dropped: an hour-long stream stays flat), so
    `since(n)` with `n` older than the oldest stored event returns only what remains;
    `dropped_seq` says up to which seq finals were dropped, and a caller with the stream's
    recording reads those back from it (`server.record.Recorder.finals`).

    `epoch` names this log's sequence (stamped on every event): a `seq` means something only
    together with it. A log reloaded from a recording keeps its epoch and continues after
    `last_seq` (`restore`).
    """

    def __init__(
        self, stream: str, *, max_finals: int = 10_000, epoch: str = "", last_seq: int = 0
    ) -> None:
        if max_finals < 1:
            raise ValueError(f"max_finals must be >= 1, got {max_finals}")
        self.stream = stream
        self.max_finals = max_finals
        self.epoch = epoch
        self._seq = last_seq
        self._finals: deque[Caption] = deque()
        self._partials: dict[int, Caption] = {}
        self._dropped_seq = 0

    def _keep_window(self) -> None:
        while len(self._finals) > self.max_finals:
            self._dropped_seq = self._finals.popleft().seq

    def restore(self, finals: Iterable[Caption], last_seq: int) -> None:
        """Load recorded finals (seq order) and continue numbering after `last_seq`."""
        for cap in finals:
            self._finals.append(cap)
            self._keep_window()
        self._seq = max(self._seq, last_seq, self._finals[-1].seq if self._finals else 0)

    @property
    def last_seq(self) -> int:
        """Seq of the latest event (0 before any)."""
        return self._seq

    @property
    def dropped_seq(self) -> int:
        """Seq of the newest final dropped from memory (0: none was); every final with a seq up
        to it is gone from this log."""
        return self._dropped_seq

    @property
    def oldest_seq(self) -> int | None:
        """Smallest stored seq, or None when nothing is stored."""
        seqs = [c.seq for c in self._partials.values()]
        if self._finals:
            seqs.append(self._finals[0].seq)
        return min(seqs) if seqs else None

    def __len__(self) -> int:
        return len(self._finals) + len(self._partials)

    def add(self, event: CaptionEvent) -> Caption:
        """Number and store a new event; returns it for broadcast."""
        if event.type not in CAPTION_TYPES:
            raise ValueError(f"caption type must be 'partial' or 'final', got {event.type!r}")
        self._seq += 1
        cap = Caption(
            type=event.type,
            stream=self.stream,
            seq=self._seq,
            segment=event.segment,
            text=event.text,
            start=event.start,
            end=event.end,
            committed_chars=event.committed_chars,
            latency_ms=event.latency_ms,
            epoch=self.epoch,
            words=event.words,
            speaker=event.speaker,
            tentative=event.tentative if event.type == "partial" else "",
        )
        if cap.type == "partial":
            self._partials[cap.segment] = cap
        else:
            self._partials.pop(cap.segment, None)
            self._finals.append(cap)
            self._keep_window()
        return cap

    def emit(
        self,
        type: CaptionType,
        segment: int,
        text: str,
        start: float,
        end: float,
        committed_chars: int = 0,
        latency_ms: float = 0.0,
    ) -> Caption:
        """`add` spelled out field by field."""
        return self.add(CaptionEvent(type, segment, text, start, end, committed_chars, latency_ms))

    def since(self, seq: int) -> list[Caption]:
        """Stored events with seq > `seq`, in seq order."""
        out: list[Caption] = []
        for cap in reversed(self._finals):  # reconnects ask for the recent tail: stop early
            if cap.seq <= seq:
                break
            out.append(cap)
        out.extend(c for c in self._partials.values() if c.seq > seq)
        out.sort(key=lambda c: c.seq)
        return out

    def finals(self) -> list[Caption]:
        """Stored finals in order (e.g. for `render_srt`)."""
        return list(self._finals)
