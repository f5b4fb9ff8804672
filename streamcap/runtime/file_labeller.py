"""Speaker labels for a file's offline finals (`transcribe --speakers auto FILE`): the live
stage itself (`runtime.labeller.SpeakerLabeller`) fed the file's audio in step with its finals,
so the offline and live paths label alike (issue 37, item 8)."""

from __future__ import annotations

import os

from streamcap.core.captions import Caption, CaptionEvent, CaptionLog
from streamcap.runtime.labeller import PAD_S, SpeakerLabeller

__all__ = ["FileLabeller"]


class FileLabeller:
    """Speaker labels for a file's offline finals (`transcribe --speakers auto FILE`): the live
    stage itself (`SpeakerLabeller`, the same rules, thresholds and renumbering), fed the
    file's audio, read a second time in step with the finals, up to the end of each final
    before it is labelled, exactly as the live stream has fed it by then. Offline finals come
    one utterance at a time in order, so the labeller's buffer always holds the final's audio.

    `label(caption)` takes a `Caption` of `runtime.transcribe.Transcription` and returns its
    labelled piece(s), renumbered by this object's own `CaptionLog` (a split final adds a
    segment and a seq, so the file's captions keep one sequence).
    """

    def __init__(
        self, path: str | os.PathLike[str], labeller: SpeakerLabeller, stream: str = "file"
    ) -> None:
        from streamcap.audio import iter_audio_chunks

        self.labeller = labeller
        self._chunks = iter_audio_chunks(path, chunk_s=1.0)
        self._log = CaptionLog(stream)

    def _feed_to(self, t: float) -> None:
        while self.labeller.fed_s < t:
            chunk = next(self._chunks, None)
            if chunk is None:
                return
            self.labeller.feed(chunk)

    def label(self, caption: Caption) -> list[Caption]:
        """The labelled final(s) of ``caption`` (anything else passes, renumbered)."""
        self._feed_to(caption.end + PAD_S)
        event = CaptionEvent(
            caption.type, caption.segment, caption.text, caption.start, caption.end,
            caption.committed_chars, caption.latency_ms, caption.words, caption.speaker,
        )  # fmt: skip
        return [self._log.add(e) for e in self.labeller.process(event)]
