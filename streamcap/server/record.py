"""`--record DIR`: every stream's finals on disk, and the stream's log back after a restart.

Files per stream id (ids never start with ".", so none of these is hidden or escapes DIR):

- `DIR/<stream>.jsonl`: every final as it happens, one wire event per line, written at once.
- `DIR/<stream>.seq.json`: `{"epoch": E, "reserved": N}`: the log's epoch, and a seq that no
  event of this log has passed yet. Events also number partials, which are not recorded; so
  that a restarted server never hands out a seq a viewer has already seen (a viewer resumes
  with `since`), seqs are reserved in blocks: the file is rewritten (atomically) whenever the
  last event comes within half a block of `reserved` (`reservation`), so it is on disk before
  an event passes it, and at a clean shutdown it is set to the exact last seq. A server that
  was killed therefore continues at most one block above its last event, never below.

`load` rebuilds a `CaptionLog` (same epoch, the last `max_finals` finals, numbering after
everything issued) plus where segment numbers and stream time continue. Recordings made before
epochs existed (seq restarting at every server run) are renumbered in file order under a new
epoch. A broken line is skipped with one warning (`record_lines`: every field is checked as a
client's input); a `.seq.json` that is not one the server writes starts a new epoch; a broken
file never stops the server. A recording is parsed once and indexed (`record_index`): later
reads take only the lines they need.

Threads: the reading methods (`load`, `finals`, `plan`, `read`) may run in any threads (the
reads of one stream take turns); the writing side is `record_write.RecordWriter`'s (one
thread, in order: `record_io.RecordingIO`). All file I/O blocks: never on the event loop, and
only regular files are opened (a FIFO named like a recording froze the server: red-team round
4, bug 13).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from streamcap.core.captions import Caption, CaptionLog

from .ratelog import RateLimitedLog
from .record_index import RecordedLine, RecordingIndex, complete_lines, open_regular
from .record_lines import MAX_SEQ, BadLine, parse_line, parse_names
from .record_write import SEQ_BLOCK as SEQ_BLOCK
from .record_write import RecordWriter
from .request import EPOCH_RE, STREAM_ID_RE

log = logging.getLogger(__name__)
_rlog = RateLimitedLog(log, interval_s=60.0, burst=3)

#: Finals indexed in all (~25 bytes each); the least recently read recordings' indexes are
#: dropped beyond it (and rebuilt when read again). Renumbered recordings' are kept.
INDEXED_FINALS = 2_000_000
#: Finals a log read back holds in memory at first (the rest are read from disk when asked for).
RESTORED_FINALS = 50
#: Reads of different streams run at once; one stream's take turns (striped locks).
_LOCK_STRIPES = 64


def new_epoch() -> str:
    """A fresh log identity (12 hex digits)."""
    return secrets.token_hex(6)


@dataclass
class Restored:
    """A stream's log read back from DIR and where its numbering continues."""

    log: CaptionLog
    next_segment: int
    audio_s: float
    #: the names map its last `names` line set (`names.py`; {} without one)
    names: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ReadPlan:
    """Recorded finals to read (`Recorder.read`): where they are, and their size in bytes
    (what reading them costs, known before any is read: the reader's budget is spent first)."""

    stream: str
    index: RecordingIndex
    positions: range
    nbytes: int
    #: the seq of the last of them: a reader continues after it
    last_seq: int


class Recorder(RecordWriter):
    """Appends finals and keeps seq reservations (`RecordWriter`), and reads back the streams
    of one server."""

    def __init__(
        self, root: Path, *, block: int = SEQ_BLOCK, indexed_finals: int = INDEXED_FINALS
    ) -> None:
        super().__init__(root, block=block)
        self.indexed_finals = indexed_finals
        self._indexes: OrderedDict[str, RecordingIndex] = OrderedDict()
        self._indexes_lock = threading.Lock()
        self._locks = [threading.Lock() for _ in range(_LOCK_STRIPES)]

    def _lock(self, stream: str) -> threading.Lock:
        return self._locks[hash(stream) % _LOCK_STRIPES]

    # ------------------------------------------------------------------ reading

    def _open_jsonl(self, stream: str) -> int | None:
        """The stream's recording opened for reading; None without one (or unusable)."""
        if not STREAM_ID_RE.fullmatch(stream):
            return None
        try:
            return open_regular(self._jsonl(stream), os.O_RDONLY)
        except OSError as e:
            _rlog.warning(f"read:{stream}", "cannot read the recording of %s: %s", stream, e)
            return None

    def load(self, stream: str, *, max_finals: int) -> Restored | None:
        """The stream's recorded log, or None when DIR has none (or the id is not a file name).
        The log holds (up to) `max_finals` finals, but starts with its last `RESTORED_FINALS`:
        the others are on disk, and a stream read back again and again (a client cycling
        through more recorded ids than the server keeps) must not cost a parse of hundreds."""
        keep = min(max_finals, RESTORED_FINALS)
        with self._lock(stream):
            fd = self._open_jsonl(stream)
            if fd is None:
                return None
            try:  # one more than the log keeps: it drops that one, and so knows its seq
                index, kept = self._current(stream, fd, keep=keep + 1)
            finally:
                os.close(fd)
        epoch, reserved = self._read_seq_file(stream)
        if index.renumbered or epoch != index.epoch:
            reserved = 0  # the file's reservation is another log's
        clog = CaptionLog(stream, max_finals=keep, epoch=index.epoch)
        clog.restore(kept, max(reserved, index.last_seq))
        clog.max_finals = max_finals  # its window fills up again as the stream goes on
        return Restored(clog, index.next_segment, index.audio_s, dict(index.names))

    def finals(self, stream: str, epoch: str, after: int, through: int) -> list[Caption]:
        """Recorded finals of log `epoch` with `after < seq <= through`, in seq order: what a
        stream's log dropped from memory (`CaptionLog.dropped_seq`), for a subtitle file. A
        recording renumbered at load reads back with the numbers the log gave it."""
        plan = self.plan(stream, epoch, after, through)
        if plan is None:
            return []
        return [c for c in self._read(plan, raw=False) if isinstance(c, Caption)]

    def plan(
        self, stream: str, epoch: str, after: int, through: int, limit: int | None = None
    ) -> ReadPlan | None:
        """Where the recorded finals of log `epoch` with `after < seq <= through` are (the
        first `limit` of them), or None if there are none."""
        with self._lock(stream):
            fd = self._open_jsonl(stream)
            if fd is None:
                return None
            try:
                index, _ = self._current(stream, fd)
            finally:
                os.close(fd)
            if index.epoch != epoch:
                return None
            at = index.span(after, through, limit)
            if not at:
                return None
            return ReadPlan(stream, index, at, index.nbytes(at), index.seqs[at.stop - 1])

    def read(self, plan: ReadPlan) -> list[Caption | RecordedLine]:
        """The finals of `plan` as a viewer is sent them (`RecordedLine`s where the recorded
        bytes are exactly that)."""
        return self._read(plan, raw=True)

    def _read(self, plan: ReadPlan, *, raw: bool) -> list[Caption | RecordedLine]:
        with self._lock(plan.stream):
            fd = self._open_jsonl(plan.stream)
            if fd is None:
                return []
            try:
                return list(plan.index.read(fd, plan.positions, raw=raw))
            finally:
                os.close(fd)

    def _current(self, stream: str, fd: int, keep: int = 0) -> tuple[RecordingIndex, list[Caption]]:
        """The stream's index, brought up to date with its file (`fd`), and its last `keep`
        finals (caller holds the stream's lock)."""
        st = os.fstat(fd)
        ident = (st.st_dev, st.st_ino, st.st_mtime_ns)
        with self._indexes_lock:
            index = self._indexes.get(stream)
            if index is not None:
                self._indexes.move_to_end(stream)
        same_file = index is not None and index.ident[:2] == ident[:2]
        if index is not None and same_file and st.st_size >= index.size:
            if st.st_size > index.size:
                self._scan(index, fd, fresh=False)
            elif st.st_mtime_ns != index.ident[2]:
                index = None  # rewritten in place: index it afresh
        else:
            index = None
        if index is None:
            index, kept = self._build(stream, fd, keep)
            index.ident = ident
            self._remember(stream, index)
            return index, kept
        index.ident = ident
        at = range(max(0, len(index) - keep), len(index))
        kept = [c for c in index.read(fd, at, raw=False) if isinstance(c, Caption)]
        return index, kept

    def _scan(self, index: RecordingIndex, fd: int, *, fresh: bool) -> bool:
        """Index the complete lines after `index.size`. `fresh`: every final is indexed,
        whatever its epoch and order, and the answer is whether they are all of the index's
        epoch and in seq order (`_build` decides what that means); later scans index only
        this epoch's new finals (lines of another log belong to none the server has now)."""
        bad, same = 0, True
        for offset, end, line in complete_lines(fd, index.size):
            index.size = end
            if line is None:
                bad += 1
                continue
            if not line.strip():
                continue
            try:
                cap = parse_line(line)
            except BadLine:
                bad += 1
                continue
            if cap is None:
                try:  # a rename sets the map (the last one read wins: it holds all of it)
                    names = parse_names(line)
                except BadLine:
                    bad += 1
                    continue
                if names is not None:
                    index.names = names
                continue
            if cap.seq <= index.last_seq or cap.epoch != index.epoch:
                same = False
                if not fresh:
                    continue
            index.add(offset, line, cap, cap.seq)
        if bad:
            _rlog.warning(
                f"unreadable:{index.stream}",
                "recording of %s: skipped %d unreadable line(s)",
                index.stream,
                bad,
            )
        return same

    def _build(self, stream: str, fd: int, keep: int) -> tuple[RecordingIndex, list[Caption]]:
        """Index the whole file: its epoch is the `.seq.json`'s if every final is of it and
        in order, else every final is renumbered in file order under a new epoch."""
        epoch, _ = self._read_seq_file(stream)
        index = RecordingIndex(stream, epoch)
        same = self._scan(index, fd, fresh=True)
        if keep and os.fstat(fd).st_size > index.size:  # read back at a start: not being written
            _rlog.warning(
                f"torn:{stream}",
                "recording of %s ends in a line cut off (a write that did not finish): left out",
                stream,
            )
        if not same:  # an older recording (seqs restart at each run), or a foreign one
            index.renumber(new_epoch())
        elif not epoch:  # in order, and no epoch anywhere: the seqs stand, in a new epoch
            index.rename(new_epoch())
        at = range(max(0, len(index) - keep), len(index))
        return index, [c for c in index.read(fd, at, raw=False) if isinstance(c, Caption)]

    def _remember(self, stream: str, index: RecordingIndex) -> None:
        with self._indexes_lock:
            self._indexes[stream] = index
            self._indexes.move_to_end(stream)
            total = sum(len(i) for i in self._indexes.values())
            for old in list(self._indexes):
                if total <= self.indexed_finals:
                    break
                dropped = self._indexes[old]
                if old != stream and not dropped.renumbered:
                    del self._indexes[old]
                    total -= len(dropped)

    def _read_seq_file(self, stream: str) -> tuple[str, int]:
        """(epoch, reserved) of the stream's `.seq.json`; ("", 0) if it has none, or one the
        server would not have written (its log then starts a new epoch)."""
        path = self._seq_file(stream)
        try:
            fd = open_regular(path, os.O_RDONLY)
            if fd is None:
                return "", 0
            try:
                data = os.read(fd, 4097)
            finally:
                os.close(fd)
            obj = json.loads(data, parse_constant=float) if len(data) <= 4096 else None
            epoch, reserved = obj["epoch"], obj["reserved"]  # type: ignore[index]
            if (
                isinstance(epoch, str)
                and EPOCH_RE.fullmatch(epoch)
                and type(reserved) is int
                and 0 <= reserved <= MAX_SEQ
            ):
                return epoch, reserved
        except (OSError, ValueError, KeyError, TypeError):
            pass
        _rlog.warning(
            f"seqfile:{stream}", "ignoring unreadable %s: its log starts a new epoch", path.name
        )
        return "", 0
