"""`--record DIR`: every stream's finals on disk, and the stream's log back after a restart.

Files per stream id (ids never start with ".", so none of these is hidden or escapes DIR):

- `DIR/<stream>.jsonl`: every final as it happens, one wire event per line, flushed at once.
- `DIR/<stream>.seq.json`: `{"epoch": E, "reserved": N}`: the log's epoch, and a seq that no
  event of this log has passed yet. Events also number partials, which are not recorded; so
  that a restarted server never hands out a seq a viewer has already seen (a viewer resumes
  with `since`), seqs are reserved in blocks: the file is rewritten (atomically) before an event
  passes `reserved`, and at a clean shutdown it is set to the exact last seq. A server that was
  killed therefore continues at most one block above its last event, never below.

`load` rebuilds a `CaptionLog` (same epoch, the last `max_finals` finals, numbering after
everything issued) plus where segment numbers and stream time continue. Recordings made before
epochs existed (seq restarting at every server run) are renumbered in file order under a new
epoch. A broken line is skipped with one warning; a broken file never stops the server.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from streamcap.core.captions import Caption, CaptionLog
from streamcap.formats import JsonlWriter

from .client_text import parse_speaker, well_formed
from .close import ProtocolError
from .ratelog import RateLimitedLog
from .request import STREAM_ID_RE

log = logging.getLogger(__name__)
_rlog = RateLimitedLog(log, interval_s=60.0, burst=3)

#: Seqs reserved per write of the `.seq.json` file.
SEQ_BLOCK = 256


def new_epoch() -> str:
    """A fresh log identity (12 hex digits)."""
    return secrets.token_hex(6)


@dataclass
class Restored:
    """A stream's log read back from DIR and where its numbering continues."""

    log: CaptionLog
    next_segment: int
    audio_s: float


class _AppendingJsonl(JsonlWriter):
    """JSONL of finals appended to (a path given to `JsonlWriter` would be truncated)."""

    def __init__(self, path: Path) -> None:
        self._owned: TextIO = open(path, "a", encoding="utf-8", newline="\n")  # noqa: SIM115
        super().__init__(self._owned)

    def close(self) -> None:
        super().close()
        self._owned.close()


class Recorder:
    """Appends finals and keeps seq reservations for the streams of one server."""

    def __init__(self, root: Path, *, block: int = SEQ_BLOCK) -> None:
        self.root = root
        self.block = block
        self._writers: dict[str, _AppendingJsonl] = {}
        self._reserved: dict[str, int] = {}
        self._epochs: dict[str, str] = {}
        #: stream -> (epoch, n): the first n finals of its file were renumbered into `epoch` at
        #: load (a recording made before epochs, or a foreign one); `finals` renumbers them alike
        self._renumbered: dict[str, tuple[str, int]] = {}

    def _jsonl(self, stream: str) -> Path:
        return self.root / f"{stream}.jsonl"

    def _seq_file(self, stream: str) -> Path:
        return self.root / f"{stream}.seq.json"

    # ------------------------------------------------------------------ reading

    def _recorded(self, stream: str, *, live: bool = False) -> list[Caption] | None:
        """Every readable final of the stream's JSONL, in file order (None: no recording).
        `live`: the file is being appended to; a last line without its newline is still being
        written, and is left out rather than counted as broken."""
        if not STREAM_ID_RE.fullmatch(stream):
            return None
        path = self._jsonl(stream)
        try:
            if not path.is_file():
                return None
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            log.warning("cannot read the recording of %s: %s", stream, e)
            return None
        lines = text.splitlines()
        if live and lines and not text.endswith("\n"):
            lines.pop()
        finals: list[Caption] = []
        bad = 0
        for line in lines:
            if not line.strip():
                continue
            try:
                cap = _checked(Caption.from_dict(json.loads(line)))
            except (ValueError, TypeError, AttributeError, ProtocolError):
                bad += 1
                continue
            if cap.type == "final":
                finals.append(cap)
        if bad:
            _rlog.warning(
                f"unreadable:{stream}",
                "recording of %s: skipped %d unreadable line(s)",
                stream,
                bad,
            )
        return finals

    def finals(self, stream: str, epoch: str, after: int, through: int) -> list[Caption]:
        """Recorded finals of log `epoch` with `after < seq <= through`, in seq order: what a
        stream's log dropped from memory (`CaptionLog.dropped_seq`), for a viewer that resumes
        from before its window or a subtitle download. Blocking file I/O: call it off the event
        loop. A recording renumbered at load reads back with the numbers the log gave it."""
        recorded = self._recorded(stream, live=True) or []
        renumbered_epoch, count = self._renumbered.get(stream, ("", 0))
        if renumbered_epoch == epoch and count:
            recorded[:count] = [
                _replace_seq(c, i + 1, epoch) for i, c in enumerate(recorded[:count])
            ]
        return [c for c in recorded if c.epoch == epoch and after < c.seq <= through]

    def load(self, stream: str, *, max_finals: int) -> Restored | None:
        """The stream's recorded log, or None when DIR has none (or the id is not a file name)."""
        finals = self._recorded(stream)
        if finals is None:
            return None
        epoch, reserved = self._read_seq_file(stream)
        ordered = all(b.seq > a.seq for a, b in zip(finals, finals[1:], strict=False))
        epochs = {c.epoch for c in finals}
        if not ordered or epochs - {epoch}:
            # An older recording (numbering restarted at each run) or a foreign one: renumber.
            epoch, reserved = new_epoch(), 0
            finals = [_replace_seq(c, i + 1, epoch) for i, c in enumerate(finals)]
            self._renumbered[stream] = (epoch, len(finals))
        else:
            self._renumbered.pop(stream, None)
        if not epoch:
            epoch = new_epoch()
        last = max(reserved, finals[-1].seq if finals else 0)
        clog = CaptionLog(stream, max_finals=max_finals, epoch=epoch)
        clog.restore(finals, last)
        self._epochs[stream] = epoch
        self._reserved[stream] = reserved
        next_segment = max((c.segment for c in finals), default=-1) + 1
        audio_s = max((c.end for c in finals), default=0.0)
        return Restored(clog, next_segment, audio_s)

    def _read_seq_file(self, stream: str) -> tuple[str, int]:
        path = self._seq_file(stream)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            epoch, reserved = data["epoch"], data["reserved"]
            if isinstance(epoch, str) and isinstance(reserved, int) and reserved >= 0:
                return epoch, reserved
        except FileNotFoundError:
            return "", 0
        except (OSError, ValueError, KeyError, TypeError):
            pass
        log.warning("ignoring unreadable %s", path.name)
        return "", 0

    # ------------------------------------------------------------------ writing

    def before_send(self, clog: CaptionLog) -> None:
        """Call with each new event numbered, before anyone can see it: keeps `reserved` ahead."""
        stream = clog.stream
        if self._epochs.get(stream) != clog.epoch:  # a new log under this id
            self._epochs[stream] = clog.epoch
            self._reserved[stream] = 0
        if clog.last_seq > self._reserved.get(stream, 0):
            self._write_seq(stream, clog.epoch, clog.last_seq + self.block)

    def _write_seq(self, stream: str, epoch: str, reserved: int) -> None:
        path = self._seq_file(stream)
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_text(json.dumps({"epoch": epoch, "reserved": reserved}), encoding="utf-8")
            os.replace(tmp, path)
            self._reserved[stream] = reserved
        except OSError as e:
            log.error("recording %s: cannot write %s: %s", stream, path.name, e)

    def write(self, cap: Caption) -> None:
        """Append one final to the stream's JSONL."""
        if not STREAM_ID_RE.fullmatch(cap.stream):
            return
        try:
            writer = self._writers.get(cap.stream)
            if writer is None:
                writer = self._writers[cap.stream] = _AppendingJsonl(self._jsonl(cap.stream))
            writer.write(cap)
        except (OSError, ValueError) as e:  # ValueError: text that cannot be encoded
            # one event that cannot be written never ends the recording (or the stream)
            _rlog.error(f"write:{cap.stream}", "recording %s failed: %s", cap.stream, e)

    def close_stream(self, stream: str) -> None:
        writer = self._writers.pop(stream, None)
        if writer is not None:
            writer.close()

    def close(self, logs: list[CaptionLog]) -> None:
        """Clean shutdown: close files, reserve exactly what was issued (no gap next run)."""
        for stream in list(self._writers):
            self.close_stream(stream)
        for clog in logs:
            if self._epochs.get(clog.stream) == clog.epoch and clog.last_seq:
                self._write_seq(clog.stream, clog.epoch, clog.last_seq)


def _checked(cap: Caption) -> Caption:
    """A recorded final holds only what the server could have sent: well-formed Unicode
    everywhere, and a speaker name that `parse_speaker` takes as it is (no control, format or
    look-alike characters); a hand-edited or foreign file must not break viewers or subtitles.
    Caption text may hold what a model writes (joiners, line breaks), so it is only checked
    for well-formedness."""
    for value in (cap.stream, cap.epoch, cap.text, *(w.word for w in cap.words)):
        if not well_formed(value):
            raise ValueError("recorded text is not well-formed Unicode")
    if cap.speaker and parse_speaker(cap.speaker) != cap.speaker:
        raise ValueError("recorded speaker name is not in its normal form")
    return cap


def _replace_seq(cap: Caption, seq: int, epoch: str) -> Caption:
    return replace(cap, seq=seq, epoch=epoch)
